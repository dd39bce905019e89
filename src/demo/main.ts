// `npm run demo` (tsx src/demo/main.ts [--quick] [--keep]): runs the demo and exits with its code.
// A second Ctrl-C, a second after the first, gives up on the cleanup and exits at once (the
// demo's exit hook still kills the workers and removes the embedded server's directory).
import { runDemo } from './run.js';

process.exitCode = await runDemo({
  quick: process.argv.includes('--quick'),
  keep: process.argv.includes('--keep'),
  onForceQuit: (code) => process.exit(code),
});
