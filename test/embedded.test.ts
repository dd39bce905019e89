// The embedded server helper must leave the host process its own exit code and signals.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const TSX = fileURLToPath(new URL('../node_modules/tsx/dist/esm/index.mjs', import.meta.url));
const SCRIPT = fileURLToPath(new URL('./fixtures/embedded-exit-code.ts', import.meta.url));

it('keeps the process exit code (a failing test run must not exit 0)', async () => {
  const child = spawn(process.execPath, ['--import', TSX, SCRIPT], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  expect(code, stderr).toBe(3);
});
