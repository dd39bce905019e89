// `npm run demo` (tsx src/cli/demo-main.ts [--quick] [--keep]): runs the demo and exits with its code.
// A second Ctrl-C, a second after the first, gives up on the cleanup and exits at once (the
// demo's exit hook still kills the workers and removes the embedded server's directory). A demo
// that cannot start says why, as `leasehold demo` does.
import { processIo, report } from './context.js';
import { noteDatabaseUrl } from './database-errors.js';
import { runDemo } from '../demo/run.js';

if (process.env.DATABASE_URL) noteDatabaseUrl(process.env.DATABASE_URL, 'DATABASE_URL');
try {
  process.exitCode = await runDemo({
    quick: process.argv.includes('--quick'),
    keep: process.argv.includes('--keep'),
    onForceQuit: (code) => process.exit(code),
  });
} catch (error) {
  report(processIo, error, false);
}
