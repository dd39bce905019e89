import type { Logger } from './logger.js';

/** One level of a job's logger: pino's two common shapes, `log.info('message')` and `log.info({ fields }, 'message')`. */
export interface JobLogFn {
  (message: string): void;
  (fields: object, message?: string): void;
}

/** The logger a job's handler gets (`context.log`), with job, slot and fence bound. */
export interface JobLogger {
  debug: JobLogFn;
  info: JobLogFn;
  warn: JobLogFn;
  error: JobLogFn;
}

/**
 * A logger that adds `bound` fields to every line. It accepts a message alone as well as
 * (fields, message), and passes an Error as `err`, so whatever shape a handler uses, the
 * underlying logger always receives (fields, message).
 */
export function childLogger(logger: Logger, bound: object): JobLogger {
  const level =
    (write: (fields: object, message?: string) => void): JobLogFn =>
    (first: string | object, message?: string) => {
      if (typeof first === 'string') write({ ...bound }, first);
      else if (first instanceof Error) write({ ...bound, err: { type: first.name, message: first.message, stack: first.stack } }, message ?? first.message);
      else if (first === null || typeof first !== 'object') write({ ...bound }, message ?? String(first));
      else write({ ...bound, ...first }, message);
    };
  return {
    debug: level((fields, message) => logger.debug(fields, message)),
    info: level((fields, message) => logger.info(fields, message)),
    warn: level((fields, message) => logger.warn(fields, message)),
    error: level((fields, message) => logger.error(fields, message)),
  };
}
