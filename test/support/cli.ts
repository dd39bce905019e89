// Runs the `leasehold` command as a real process (from source, through tsx).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliProcess {
  child: ChildProcessWithoutNullStreams;
  output(): { stdout: string; stderr: string };
  done: Promise<CliResult>;
}

export function startCli(args: string[], env: Record<string, string | undefined> = {}): CliProcess {
  const child = spawn(process.execPath, ['--import', TSX, MAIN, ...args], {
    // COLUMNS unset: human output has its default width whatever terminal runs the tests
    env: { ...process.env, LEASEHOLD_LOG_LEVEL: undefined, COLUMNS: undefined, ...env } as NodeJS.ProcessEnv,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<CliResult>((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
  return { child, output: () => ({ stdout, stderr }), done };
}

export function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<CliResult> {
  const run = startCli(args, env);
  run.child.stdin.end();
  return run.done;
}
