// Leasehold logs through a pino-shaped logger ({ fields }, message); a Nest app logs through
// Nest's Logger (message, context). This adapts the one to the other, so that runs, skips and
// lost leases show in the application's log like the scheduler's own lines.
import { Logger as NestLogger, type LoggerService } from '@nestjs/common';
import type { Logger } from '../observe/logger.js';

/**
 * A leasehold logger writing to a Nest LoggerService (default: `new Logger('Leasehold')`).
 * Warnings (skips, lost leases, failed runs) and errors show at Nest's default levels; the
 * per-run info lines go to `debug` and debug lines to `verbose`, as Nest's own scheduler logs
 * nothing per run.
 */
export function nestLogger(service: LoggerService = new NestLogger('Leasehold')): Logger {
  const line = (fields: object, message?: string) => {
    const event = (fields as { event?: unknown }).event;
    return message ?? (typeof event === 'string' ? event : JSON.stringify(fields));
  };
  return {
    debug: (fields, message) => service.verbose?.(line(fields, message)),
    info: (fields, message) => (service.debug ? service.debug(line(fields, message)) : service.log(line(fields, message))),
    warn: (fields, message) => service.warn(line(fields, message)),
    error: (fields, message) => service.error(line(fields, message)),
  };
}

/** A leasehold (pino-shaped) logger as it is, or a Nest LoggerService adapted. */
export function toLeaseholdLogger(logger: Logger | LoggerService | undefined): Logger {
  if (!logger) return nestLogger();
  if (typeof (logger as Logger).info === 'function') return logger as Logger;
  return nestLogger(logger as LoggerService);
}
