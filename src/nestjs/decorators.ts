// The method decorators: @Leased() beside an @nestjs/schedule @Cron()/@Interval(), and
// @LeaseholdJob() for methods that leasehold's own scheduler runs. Both only record options;
// the explorer (explorer.ts) binds them to the client when the application starts.
import type { JobContext, JobOptions } from '../job/job.js';
import type { LeasedOptions, LeasedResult } from '../integrations/leased.js';
import { boundGuards, JOB_KEY, LEASED_KEY, metadata, type LeasedMetadata } from './registry.js';

/** Options of @Leased(): the schedule is read from @Cron()/@Interval() unless given here. */
export type LeasedMethodOptions = Partial<LeasedOptions>;

/** Options of @LeaseholdJob(): a job definition without its handler (the method is the handler). */
export type LeaseholdJobOptions = Omit<JobOptions, 'handler' | 'name'> & { name?: string };

/**
 * Runs the method once per scheduled occurrence across all replicas. Put it beside
 * `@Cron(...)` or `@Interval(...)`, in either order. The method gets the run's context
 * (signal, slot, fence, idempotencyKey, transaction, log) as its first argument, and through
 * the injectable `LeaseContext`. A call that does not run (another replica has the occurrence,
 * or the previous run still holds the lease) resolves without calling the method; skips are
 * recorded and logged once per occurrence.
 */
export function Leased(options: LeasedMethodOptions = {}): MethodDecorator {
  return (target, key, descriptor) => {
    const original = descriptor.value;
    if (typeof original !== 'function') throw new TypeError(`@Leased() goes on a method (${String(key)} is not one)`);
    const where = `${(target as { constructor?: { name?: string } }).constructor?.name ?? 'class'}.${String(key)}`;
    const wrapper = function (this: object, ...args: unknown[]): Promise<LeasedResult> {
      const guard = boundGuards.get(this)?.get(key);
      if (!guard) {
        return Promise.reject(new Error(`${where} is @Leased() but not bound: import LeaseholdModule.forRoot(...) and make the class a provider of the application`));
      }
      return guard(...args);
    };
    Object.defineProperty(wrapper, 'name', { value: (original as { name: string }).name });
    // @Cron()/@Interval() applied before this decorator stored their metadata on the original
    // function, where @nestjs/schedule looks for it: carry it over to the wrapper.
    for (const metaKey of metadata.getOwnMetadataKeys(original)) metadata.defineMetadata(metaKey, metadata.getOwnMetadata(metaKey, original), wrapper);
    metadata.defineMetadata(LEASED_KEY, { options, original: original as unknown as LeasedMetadata['original'] } satisfies LeasedMetadata, wrapper);
    descriptor.value = wrapper as unknown as NonNullable<typeof descriptor.value>;
    return descriptor;
  };
}

/**
 * Makes the method a job of leasehold's own scheduler: `startWorker` runs it when the
 * application has bootstrapped and stops it (gracefully) at shutdown. The method gets the
 * job's context as its first argument.
 */
export function LeaseholdJob(options: LeaseholdJobOptions): MethodDecorator {
  return (_target, _key, descriptor) => {
    if (typeof descriptor.value !== 'function') throw new TypeError('@LeaseholdJob() goes on a method');
    metadata.defineMetadata(JOB_KEY, options, descriptor.value);
    return descriptor;
  };
}

/** The context a guarded method gets as its first argument. */
export type LeasedContext = JobContext;
