// What the decorators, the context and the explorer share inside the package (not exported
// from leasehold/nestjs): metadata keys, the guards bound to instances, the running context.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { LeasedResult } from '../integrations/leased.js';
import type { LeaseholdOptions } from '../client/leasehold.js';
import type { Logger } from '../observe/logger.js';
import type { Duration } from '../validate/duration.js';
import type { JobContext } from '../job/job.js';
import type { LeasedMethodOptions } from './decorators.js';
import type { WorkerOptions } from '../worker/worker.js';

// Strings: they live on the method function, where @nestjs/schedule reads its own.
export const LEASED_KEY = 'leasehold:leased';
export const JOB_KEY = 'leasehold:job';

/** What @Leased() stores on the wrapper it puts in place of the method. */
export interface LeasedMetadata {
  options: LeasedMethodOptions;
  original: (this: unknown, ...args: unknown[]) => unknown;
}

type Bound = (...args: unknown[]) => Promise<LeasedResult>;
/** instance → method name → its guarded call, filled by the explorer at module init. */
export const boundGuards = new WeakMap<object, Map<string | symbol, Bound>>();

// @nestjs/common loads reflect-metadata; these are its functions, typed for what is used here.
interface ReflectMetadata {
  getOwnMetadataKeys(target: object): unknown[];
  getOwnMetadata(key: unknown, target: object): unknown;
  defineMetadata(key: unknown, value: unknown, target: object): void;
  getMetadata(key: unknown, target: object): unknown;
}
export const metadata = Reflect as unknown as ReflectMetadata;

export const contextStorage = new AsyncLocalStorage<JobContext>();

/** Runs `fn` with `context` as the current one (LeaseContext.current). */
export function withContext<T>(context: JobContext, fn: () => T): T {
  return contextStorage.run(context, fn);
}

/** The settings the module derives from its options, and their token. */
export const LEASEHOLD_SETTINGS = 'leasehold:settings';

export interface LeaseholdSettings {
  clientOptions: Omit<LeaseholdOptions, 'logger'>;
  logger: Logger;
  shutdownGrace: Duration | undefined;
  worker: Pick<WorkerOptions, 'shutdownGrace' | 'historyRetention' | 'clockSyncInterval' | 'claimAhead' | 'scheduleRefresh' | 'notifications'>;
}
