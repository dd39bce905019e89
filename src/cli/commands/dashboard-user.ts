// leasehold dashboard-user NAME [--users-file FILE]: a line of a users file for `leasehold
// dashboard --users-file` (name:scrypt hash), from a password read without echo on a terminal
// or from stdin. With --users-file the line is added to the file (or replaces NAME's), which is
// created readable by its owner only.
import { chmod, readFile, writeFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { checkPassword, checkUserName, hashPassword } from '../../dashboard/passwords.js';
import { CliError, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';

export function registerDashboardUser(program: Command, io: Io): void {
  program
    .command('dashboard-user')
    .description('hash a password for the dashboard\'s --users-file (read from the terminal without echo, or from stdin)')
    .argument('<name>', 'who signs in: recorded as the actor of each act')
    .option('--users-file <path>', 'add the line to this file (or replace the name\'s line) instead of printing it')
    .action(async (name: string, options: { usersFile?: string }) => {
      try {
        checkUserName(name, 'dashboard-user');
        const password = process.stdin.isTTY ? await promptTwice(io) : await readStdin();
        checkPassword(password);
        const line = `${name}:${await hashPassword(password)}`;
        if (options.usersFile === undefined) io.out(line);
        else {
          await addLine(options.usersFile, name, line);
          io.err(`leasehold: ${name} can sign in (${options.usersFile}); restart the dashboard to read the file again`);
        }
        io.exit(EXIT.ok);
      } catch (error) {
        report(io, error, false);
      }
    });
}

async function addLine(file: string, name: string, line: string): Promise<void> {
  let text = '';
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw new CliError(`cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`, EXIT.error);
  }
  const lines = text.split(/\r?\n/).filter((l) => l !== '' && !l.startsWith(`${name}:`));
  await writeFile(file, `${[...lines, line].join('\n')}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
}

/** stdin to its end, without one trailing newline. */
async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '');
}

async function promptTwice(io: Io): Promise<string> {
  const first = await prompt(io, 'password: ');
  const second = await prompt(io, 'again: ');
  if (first !== second) throw new CliError('the two passwords differ', EXIT.usage);
  return first;
}

/** One line from the terminal, not echoed. */
function prompt(io: Io, question: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const input = process.stdin;
    io.err(question.trimEnd());
    let text = '';
    input.setRawMode(true);
    input.resume();
    const done = (error?: Error) => {
      input.setRawMode(false);
      input.pause();
      input.off('data', onData);
      if (error) reject(error);
      else resolve(text);
    };
    const onData = (data: Buffer) => {
      for (const char of data.toString('utf8')) {
        if (char === '\r' || char === '\n') return done();
        if (char === '\u0003' || char === '\u0004') return done(new CliError('cancelled', EXIT.error));
        if (char === '\u007f' || char === '\b') text = [...text].slice(0, -1).join('');
        else text += char;
      }
    };
    input.on('data', onData);
  });
}
