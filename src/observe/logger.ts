// The logger interface is pino's (`logger.warn({ ...fields }, 'message')`), so a pino
// instance can be passed as it is. The default writes warnings and errors to stderr as one
// JSON line each; set LEASEHOLD_LOG_LEVEL=debug|info|warn|error|silent to change that.

export interface Logger {
  debug(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
  /** pino's level check; when present, the library builds no log line for a level that is off. */
  isLevelEnabled?(level: string): boolean;
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
const LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error', 'silent'];

export function silentLogger(): Logger {
  const ignore = () => undefined;
  return { debug: ignore, info: ignore, warn: ignore, error: ignore, isLevelEnabled: () => false };
}

/** JSON lines on stderr at or above `level`. */
export function stderrLogger(level: LogLevel = envLevel()): Logger {
  const threshold = LEVELS.indexOf(level);
  const write = (at: Exclude<LogLevel, 'silent'>) => (fields: object, message?: string) => {
    if (LEVELS.indexOf(at) < threshold) return;
    // a message alone (pino's log.info('text')) is a message, not an object of characters
    const line = typeof fields === 'string' ? { msg: fields } : { msg: message, ...fields };
    process.stderr.write(`${JSON.stringify({ level: at, time: new Date().toISOString(), ...line })}\n`);
  };
  return {
    debug: write('debug'),
    info: write('info'),
    warn: write('warn'),
    error: write('error'),
    isLevelEnabled: (at) => threshold <= LEVELS.indexOf(at as LogLevel) && at !== 'silent',
  };
}

function envLevel(): LogLevel {
  const value = process.env.LEASEHOLD_LOG_LEVEL?.toLowerCase();
  return (LEVELS as readonly string[]).includes(value ?? '') ? (value as LogLevel) : 'warn';
}
