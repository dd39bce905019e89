// The valid keys of the lease client's options objects, for checkOptionKeys().
import { optionKeys } from '../validate/options.js';
import type { LeaseholdOptions } from './types.js';
import type { TransactionOptions } from './lease.js';
import type { AcquireOptions, ForceReleaseOptions, RunOptions } from './types.js';

export const LEASEHOLD_OPTION_KEYS = optionKeys<LeaseholdOptions>({
  connectionString: true,
  pool: true,
  holder: true,
  liveness: true,
  migrate: true,
  queryTimeout: true,
  connectTimeout: true,
  poolSize: true,
  logger: true,
});

export const ACQUIRE_OPTION_KEYS = optionKeys<AcquireOptions>({ ttl: true, slot: true, heartbeat: true, heartbeatInterval: true });

export const FORCE_RELEASE_OPTION_KEYS = optionKeys<ForceReleaseOptions>({ by: true });

export const RUN_OPTION_KEYS = optionKeys<RunOptions>({ ttl: true, slot: true, heartbeatInterval: true, history: true });

export const TRANSACTION_OPTION_KEYS = optionKeys<TransactionOptions>({ idleTimeout: true, statementTimeout: true });
