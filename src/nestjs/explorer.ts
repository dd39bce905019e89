// Finds the @Leased() and @LeaseholdJob() methods of the application's providers and
// controllers, and ties them to the Nest lifecycle:
// - module init: each @Leased() method gets its guard (leased()), before @nestjs/schedule
//   starts its timers (at application bootstrap);
// - application bootstrap: @LeaseholdJob() methods start on a leasehold worker;
// - before shutdown (enableShutdownHooks, or app.close()): guards refuse new calls and abort
//   running ones, the worker stops gracefully, the client closes.
import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { leased, type LeasedFunction, type LeasedOptions } from '../integrations/leased.js';
import type { Leasehold } from '../client/leasehold.js';
import type { JobContext, JobOptions } from '../job/job.js';
import { startWorker, type Worker } from '../worker/worker.js';
import type { LeaseholdJobOptions } from './decorators.js';
import { boundGuards, JOB_KEY, LEASED_KEY, metadata, withContext, type LeasedMetadata } from './registry.js';
import { LEASEHOLD_SETTINGS, type LeaseholdSettings } from './registry.js';
import { LEASEHOLD_CLIENT } from './tokens.js';

// @nestjs/schedule's metadata keys (its schedule.constants): the schedule a @Leased() method fires on.
const CRON_OPTIONS = 'SCHEDULE_CRON_OPTIONS';
const INTERVAL_OPTIONS = 'SCHEDULE_INTERVAL_OPTIONS';

type Method = (this: unknown, ...args: unknown[]) => unknown;

export class LeaseholdExplorer implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly guards: LeasedFunction[] = [];
  private readonly jobs: JobOptions[] = [];
  private worker: Worker | null = null;

  constructor(
    private readonly client: Leasehold,
    private readonly settings: LeaseholdSettings,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
  ) {}

  onModuleInit(): void {
    for (const wrapper of [...this.discovery.getControllers(), ...this.discovery.getProviders()]) {
      const instance: unknown = wrapper.instance;
      if (!instance || typeof instance !== 'object' || !Object.getPrototypeOf(instance) || !wrapper.isDependencyTreeStatic()) continue;
      for (const key of this.scanner.getAllMethodNames(Object.getPrototypeOf(instance) as object)) {
        const method = (instance as Record<string, unknown>)[key];
        if (typeof method !== 'function') continue;
        const className = (instance as object).constructor.name;
        const leasedMeta = metadata.getMetadata(LEASED_KEY, method) as LeasedMetadata | undefined;
        if (leasedMeta) this.bind(instance as object, key, method as Method, leasedMeta, `${className}.${key}`);
        const jobMeta = metadata.getMetadata(JOB_KEY, method) as LeaseholdJobOptions | undefined;
        if (jobMeta) {
          this.jobs.push({ ...jobMeta, name: jobMeta.name ?? `${className}.${key}`, handler: (ctx: JobContext) => withContext(ctx, async () => (method as Method).call(instance, ctx)) });
        }
      }
    }
  }

  private bind(instance: object, key: string, method: Method, meta: LeasedMetadata, defaultName: string): void {
    // a schedule given to @Leased() wins over the one @Cron()/@Interval() carry
    const own = meta.options.cron !== undefined || meta.options.every !== undefined;
    const options: LeasedOptions = { ...(own ? {} : scheduleOf(method, defaultName)), ...meta.options, name: meta.options.name ?? defaultName };
    if (options.shutdownGrace === undefined && this.settings.shutdownGrace !== undefined) options.shutdownGrace = this.settings.shutdownGrace;
    const guard = leased(this.client, options, (ctx) => withContext(ctx, async () => meta.original.call(instance, ctx)));
    this.guards.push(guard);
    let methods = boundGuards.get(instance);
    if (!methods) boundGuards.set(instance, (methods = new Map()));
    methods.set(key, guard);
    this.settings.logger.info({ event: 'nest:leased', job: guard.job.name, schedule: guard.job.schedule.description }, `${defaultName}: each ${guard.job.schedule.description} occurrence runs once across replicas as "${guard.job.name}"`);
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.jobs.length === 0) return;
    const { clientOptions, logger, worker } = this.settings;
    this.worker = await startWorker({ ...clientOptions, ...worker, logger, handleSignals: false, jobs: this.jobs });
  }

  async beforeApplicationShutdown(): Promise<void> {
    await Promise.allSettled([...this.guards.map((guard) => guard.stop()), this.worker?.stop()]);
    await this.client.close();
  }
}
Injectable()(LeaseholdExplorer);
Inject(LEASEHOLD_CLIENT)(LeaseholdExplorer, undefined, 0);
Inject(LEASEHOLD_SETTINGS)(LeaseholdExplorer, undefined, 1);
Inject(DiscoveryService)(LeaseholdExplorer, undefined, 2);
Inject(MetadataScanner)(LeaseholdExplorer, undefined, 3);

/** The schedule @Cron()/@Interval() put on the method; @Leased({ cron | every }) overrides it. */
function scheduleOf(method: Method, where: string): Pick<LeasedOptions, 'cron' | 'timezone' | 'every'> {
  const cron = metadata.getMetadata(CRON_OPTIONS, method) as { cronTime?: unknown; timeZone?: string } | undefined;
  if (cron) {
    if (typeof cron.cronTime !== 'string') {
      throw new TypeError(`${where}: @Leased() maps calls to the occurrences of a cron pattern; give @Leased({ cron }) for a @Cron() with a ${typeof cron.cronTime} cronTime`);
    }
    return { cron: cron.cronTime, ...(cron.timeZone ? { timezone: cron.timeZone } : {}) };
  }
  const interval = metadata.getMetadata(INTERVAL_OPTIONS, method) as { timeout?: number } | undefined;
  if (interval && typeof interval.timeout === 'number') return { every: interval.timeout };
  return {};
}

