// One fault-suite worker process (faults/worker.ts) as the driver sees it: its JSONL history
// goes into the run's shared history as it arrives; it knows whether it holds a lease now
// (the nemesis aims at holders) and whether it is under a fault.
import { fileURLToPath } from 'node:url';
import { JsonLinesProcess } from '../src/testing/json-lines.js';
import { mono, type HistoryLine, type ProcessRecord } from './common.js';

const WORKER_SCRIPT = fileURLToPath(new URL('./worker.ts', import.meta.url));

export class FaultWorker {
  readonly record: ProcessRecord;
  readonly process: JsonLinesProcess;
  private readonly held = new Set<string>();
  /** Under a fault (stopped, cut off, killed): not a target for another one. */
  faulted = false;
  /** Resolves on the ready line, or on exit before it. */
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;

  constructor(
    readonly index: number,
    readonly name: string,
    env: Record<string, string>,
    skewed: boolean,
    history: HistoryLine[],
  ) {
    let markReady: () => void = () => undefined;
    this.ready = new Promise((resolve) => {
      markReady = resolve;
    });
    this.process = JsonLinesProcess.nodeScript(WORKER_SCRIPT, {
      label: name,
      env,
      stdin: false,
      // the history is kept here, in the run's order; lines cut short by SIGKILL are dropped
      keepLines: false,
      stderrLimit: 2_000_000,
      onLine: (raw) => {
        const line = raw as HistoryLine;
        history.push(line);
        if (line.type === 'ready') {
          this.record.readyAt = line.mono;
          markReady();
        } else if (line.type === 'grant') this.held.add(`${line.job}|${line.fence}`);
        else if (line.type === 'end' || line.type === 'lost') this.held.delete(`${line.job}|${line.fence}`);
      },
    });
    this.record = { worker: name, index, pid: this.process.pid, spawnedAt: mono(), readyAt: null, exitedAt: null, skewed };
    this.exited = this.process.exited.then(() => {
      this.record.exitedAt ??= mono();
      markReady();
    });
  }

  get alive(): boolean {
    return this.process.alive;
  }

  get holding(): boolean {
    return this.held.size > 0;
  }

  get stderr(): string {
    return this.process.stderr;
  }

  signal(signal: NodeJS.Signals): void {
    this.process.signal(signal);
  }

  /** Ends the process whatever its state (a stopped process is continued first). */
  kill(): Promise<void> {
    return this.process.kill();
  }
}
