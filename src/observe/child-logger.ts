import type { Logger } from './logger.js';

/** A logger that adds `bound` fields to every line. */
export function childLogger(logger: Logger, bound: object): Logger {
  return {
    debug: (fields, message) => logger.debug({ ...bound, ...fields }, message),
    info: (fields, message) => logger.info({ ...bound, ...fields }, message),
    warn: (fields, message) => logger.warn({ ...bound, ...fields }, message),
    error: (fields, message) => logger.error({ ...bound, ...fields }, message),
  };
}
