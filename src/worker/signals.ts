// SIGTERM and SIGINT stop the worker; a second signal exits at once.
import type { Logger } from '../observe/logger.js';

/** Installs the handlers; returns the function that removes them. */
export function stopOnSignals(stop: () => unknown, logger: Logger): () => void {
  let received = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    received++;
    if (received > 1) {
      logger.warn({ event: 'worker:forced-exit', signal }, 'second signal: exiting now');
      process.exit(signal === 'SIGINT' ? 130 : 143);
    }
    logger.info({ event: 'worker:signal', signal }, `${signal}: stopping (send again to exit at once)`);
    void stop();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return () => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  };
}
