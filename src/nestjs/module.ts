// LeaseholdModule: configured once (forRoot / forRootAsync), global, so any provider can put
// @Leased() or @LeaseholdJob() on its methods and inject the client or LeaseContext.
import { Module, type DynamicModule, type InjectionToken, type LoggerService, type ModuleMetadata, type OptionalFactoryDependency } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { createLeasehold, Leasehold, type LeaseholdOptions } from '../client/leasehold.js';
import { LEASEHOLD_OPTION_KEYS } from '../lease/option-keys.js';
import type { Logger } from '../observe/logger.js';
import type { Duration } from '../validate/duration.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';
import { InvalidArgumentError } from '../errors.js';
import { workerSettings } from '../worker/worker.js';
import { LeaseContext } from './context.js';
import { LeaseholdExplorer } from './explorer.js';
import { toLeaseholdLogger } from './logger.js';
import { LEASEHOLD_SETTINGS, type LeaseholdSettings } from './registry.js';
import { LEASEHOLD_CLIENT } from './tokens.js';

export interface LeaseholdModuleOptions extends Omit<LeaseholdOptions, 'logger'> {
  /** A Nest LoggerService or a pino-shaped logger. @default new Logger('Leasehold') */
  logger?: Logger | LoggerService | undefined;
  /** How long shutdown waits for running `@Leased()` and `@LeaseholdJob()` methods after aborting them. @default '30s' */
  shutdownGrace?: Duration | undefined;
  /** Run history kept by the `@LeaseholdJob()` worker. @default '30d' */
  historyRetention?: Duration | undefined;
  /** How often the `@LeaseholdJob()` worker measures the database clock again. @default '5m' */
  clockSyncInterval?: Duration | undefined;
  /** How far ahead of a slot the `@LeaseholdJob()` worker claims it (startWorker's `claimAhead`): 'auto', a duration, or '0ms' for never. @default 'auto' */
  claimAhead?: Duration | 'auto' | undefined;
  /** How often the `@LeaseholdJob()` worker asks for paused jobs while it is not notified of them (startWorker's `scheduleRefresh`). @default '1s' */
  scheduleRefresh?: Duration | undefined;
  /** Whether the `@LeaseholdJob()` worker listens for pauses and run-now requests (startWorker's `notifications`; false: always poll, e.g. behind a transaction-pooling PgBouncer without a direct URL). @default true */
  notifications?: boolean | undefined;
}

export interface LeaseholdModuleAsyncOptions {
  imports?: ModuleMetadata['imports'] | undefined;
  useFactory: (...args: never[]) => LeaseholdModuleOptions | Promise<LeaseholdModuleOptions>;
  inject?: Array<InjectionToken | OptionalFactoryDependency> | undefined;
}

const MODULE_OPTION_KEYS = [
  ...LEASEHOLD_OPTION_KEYS,
  ...optionKeys<Omit<LeaseholdModuleOptions, keyof LeaseholdOptions>>({
    shutdownGrace: true,
    historyRetention: true,
    clockSyncInterval: true,
    claimAhead: true,
    scheduleRefresh: true,
    notifications: true,
  }),
];
const ASYNC_OPTION_KEYS = optionKeys<LeaseholdModuleAsyncOptions>({ imports: true, useFactory: true, inject: true });

export class LeaseholdModule {
  /** The connection (or DATABASE_URL), holder name and logger, for the whole application. */
  static forRoot(options: LeaseholdModuleOptions = {}): DynamicModule {
    // bad options fail here, where the module is configured
    return this.build([{ provide: LEASEHOLD_SETTINGS, useValue: settingsOf(options) }], []);
  }

  /** Options from a factory, e.g. `{ imports: [ConfigModule], inject: [ConfigService], useFactory: (config) => ({ connectionString: config.get('DATABASE_URL') }) }`. */
  static forRootAsync(options: LeaseholdModuleAsyncOptions): DynamicModule {
    if (!options || typeof options.useFactory !== 'function') {
      throw new InvalidArgumentError('useFactory', 'LeaseholdModule.forRootAsync() needs { useFactory, inject? }.');
    }
    checkOptionKeys(options, ASYNC_OPTION_KEYS, 'LeaseholdModule.forRootAsync()');
    const factory = options.useFactory as (...args: unknown[]) => LeaseholdModuleOptions | Promise<LeaseholdModuleOptions>;
    return this.build(
      [{ provide: LEASEHOLD_SETTINGS, useFactory: async (...args: unknown[]) => settingsOf(await factory(...args)), inject: options.inject ?? [] }],
      options.imports ?? [],
    );
  }

  private static build(settings: DynamicModule['providers'] & object, imports: NonNullable<ModuleMetadata['imports']>): DynamicModule {
    return {
      module: LeaseholdModule,
      global: true,
      imports: [DiscoveryModule, ...imports],
      providers: [
        ...settings,
        {
          provide: LEASEHOLD_CLIENT,
          useFactory: (s: LeaseholdSettings) => createLeasehold({ ...s.clientOptions, logger: s.logger }),
          inject: [LEASEHOLD_SETTINGS],
        },
        { provide: Leasehold, useExisting: LEASEHOLD_CLIENT },
        LeaseContext,
        LeaseholdExplorer,
      ],
      exports: [LEASEHOLD_CLIENT, Leasehold, LeaseContext],
    };
  }
}
Module({})(LeaseholdModule);

function settingsOf(options: LeaseholdModuleOptions): LeaseholdSettings {
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('options', 'LeaseholdModule options must be an object.');
  checkOptionKeys(options, MODULE_OPTION_KEYS, 'LeaseholdModule');
  const { logger, shutdownGrace, historyRetention, clockSyncInterval, claimAhead, scheduleRefresh, notifications, ...clientOptions } = options;
  const worker: LeaseholdSettings['worker'] = {};
  if (shutdownGrace !== undefined) worker.shutdownGrace = shutdownGrace;
  if (historyRetention !== undefined) worker.historyRetention = historyRetention;
  if (clockSyncInterval !== undefined) worker.clockSyncInterval = clockSyncInterval;
  if (claimAhead !== undefined) worker.claimAhead = claimAhead;
  if (scheduleRefresh !== undefined) worker.scheduleRefresh = scheduleRefresh;
  if (notifications !== undefined) worker.notifications = notifications;
  workerSettings(worker); // bad worker options fail here too, not when the application starts
  return { clientOptions, logger: toLeaseholdLogger(logger), shutdownGrace, worker };
}
