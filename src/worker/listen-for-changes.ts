// Which connection a worker listens for changes on, and what a notification pokes: the schedule
// feed and the unhandled-schedules watch for 'jobs', the request poller for 'requests'.
// Listening needs a direct connection: the liveness session's connection string when one is
// given (it is the direct one behind a pooler), else the main one; a worker given only a `pool`
// polls.
import { resolveConnectionString } from '../db/connection.js';
import { LEASEHOLD_DEFAULTS } from '../lease/defaults.js';
import type { LeaseRuntime } from '../lease/runtime.js';
import type { LeaseholdOptions } from '../lease/types.js';
import type { Logger } from '../observe/logger.js';
import { durationSetting } from '../validate/settings.js';
import { ChangeListener } from './change-listener.js';
import { WORKER_DEFAULTS } from './defaults.js';
import type { JobFeed } from './job-feed.js';
import type { RequestPoller } from './requests.js';
import type { UnhandledWatch } from './unhandled.js';

export type { ChangeListener };

interface ListenTargets {
  runtime: LeaseRuntime;
  logger: Logger;
  feed: JobFeed;
  requests: RequestPoller;
  unhandled: UnhandledWatch;
}

/** The listener of a worker with these options, or undefined when it only polls. */
export function listenerFor(options: LeaseholdOptions & { notifications?: boolean | undefined }, targets: ListenTargets): ChangeListener | undefined {
  if (!(options.notifications ?? WORKER_DEFAULTS.notifications.default)) return undefined;
  const liveness = typeof options.liveness === 'object' ? options.liveness.connectionString : undefined;
  const connectionString = liveness ?? resolveConnectionString(options);
  if (!connectionString) return undefined;
  const { feed, requests, unhandled } = targets;
  return new ChangeListener({
    connectionString,
    connectTimeoutMs: durationSetting(options.connectTimeout, LEASEHOLD_DEFAULTS.connectTimeout, 'connectTimeout'),
    runtime: targets.runtime,
    logger: targets.logger,
    onChange: (kind) => {
      if (kind === 'requests') return requests.poke();
      feed.poke();
      unhandled.poke(); // a schedule defined or changed may have no live handler
    },
    onListening: (listening) => {
      feed.setNotified(listening);
      requests.setNotified(listening);
      unhandled.setNotified(listening);
      // a change between the last look and LISTEN was not announced; polling resumes at once
      feed.poke();
      requests.poke();
      unhandled.poke();
    },
  });
}
