// Injection tokens and the settings the module derives from its options.
import type { LeaseholdOptions } from '../lease/leasehold.js';
import type { Logger } from '../observe/logger.js';
import type { Duration } from '../validate/duration.js';

/** Inject the module's client: `@Inject(LEASEHOLD_CLIENT) leasehold: Leasehold` (or the `Leasehold` class as the token). */
export const LEASEHOLD_CLIENT = 'leasehold:client';
/** @internal */
export const LEASEHOLD_SETTINGS = 'leasehold:settings';

/** @internal */
export interface LeaseholdSettings {
  clientOptions: Omit<LeaseholdOptions, 'logger'>;
  logger: Logger;
  shutdownGrace: Duration | undefined;
  worker: { shutdownGrace?: Duration; historyRetention?: Duration; clockSyncInterval?: Duration };
}
