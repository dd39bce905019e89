// The nemesis: injects faults one at a time on a seeded random plan, and logs each as a
// FaultRecord on the shared monotonic clock.
//
// The seed fixes the sequence of fault kinds (shuffled rounds, so every kind comes up), their
// durations and the gaps between them. Targets are drawn from the same generator among the
// workers that are up at that moment, preferring one that holds a lease (a fault on an idle
// worker tests little), so a replay with the same seed is close to, not identical with, the
// original run.
import { mono, sleep, type FaultKind, type FaultRecord, type Rng } from './common.js';
import type { ProxyMode } from './proxy.js';
import type { FailoverHow, FailoverStep } from './topology.js';

export interface WorkerView {
  index: number;
  name: string;
  /** Holds a lease right now (granted, not ended, not lost). */
  holding: boolean;
}

/** What the nemesis can do to the cluster (implemented by the harness). */
export interface ClusterControl {
  /** Workers that are up and not under another fault. */
  targets(): WorkerView[];
  kill(index: number): void;
  pause(index: number): void;
  resume(index: number): void;
  setProxy(index: number, mode: ProxyMode): void;
  /** Terminates one of the worker's backends; returns which (application_name), or null if none was found. */
  terminate(index: number, preferLiveness: boolean): Promise<string | null>;
  /** Restarts the database server, or returns false when it cannot (external server). */
  restartDatabase(mode: 'fast' | 'crash'): Promise<boolean>;
  /**
   * Fails over (one promotion, or two for `double`), or returns null when the database cannot
   * fail over that way. `rebuild` builds the next standby (not part of the fault's interval: the
   * service is up).
   */
  failover(how: FailoverHow): Promise<{ steps: FailoverStep[]; rebuild: () => Promise<number> } | null>;
  /** Steps the database clock by `seconds`; returns the database time (epoch ms) just before and after, or null when it cannot. */
  stepClock(seconds: number): Promise<{ fromDb: number; toDb: number } | null>;
}

export interface NemesisOptions {
  kinds: FaultKind[];
  ttlMs: number;
  pauseMs: [number, number];
  blackholeMs: [number, number];
  dropMs: [number, number];
  gapMs: [number, number];
  /** Probability of aiming at a lease holder when there is one. */
  holderBias: number;
  /** Probability that a terminate fault picks the liveness session (else a pooled connection). */
  livenessBias: number;
  /** Include a database restart in every n-th round only. */
  restartEveryRounds: number;
  /** Forward clock steps, minutes (the backward step is always 30 s). */
  stepMinutes?: [number, number];
  /** The ways to fail over, taken in turn; unset: killed or frozen at random (the suite's own cluster). */
  failovers?: FailoverHow[];
  /** Stop after this many faults (a topology's scenario: one or two failovers). */
  limit?: number;
  /**
   * The run's first fault, whatever the seed: a short run whose one decisive fault came last
   * would see it cut short by the end of the run (the mutant tier's long pause).
   */
  first?: FaultKind;
}

export class Nemesis {
  readonly log: FaultRecord[] = [];
  readonly notes: string[] = [];
  private nextId = 1;
  private lastStep: 'back' | 'forward' | null = null;
  private injected = 0;
  private failoverTurn = 0;

  constructor(
    private readonly control: ClusterControl,
    private readonly options: NemesisOptions,
    private readonly rng: Rng,
  ) {}

  /** Injects faults until `until` (shared monotonic ms); every fault has ended when it returns. */
  async run(until: number, stopped: () => boolean = () => false): Promise<void> {
    let bag: FaultKind[] = [];
    let round = 0;
    while (!stopped() && mono() < until - 300 && this.injected < (this.options.limit ?? Number.POSITIVE_INFINITY)) {
      if (bag.length === 0) {
        round++;
        const kinds = this.options.kinds.filter((k) => k !== 'skew' && (k !== 'restart' || (round - 1) % this.options.restartEveryRounds === 0));
        bag = this.rng.shuffle(kinds);
        const at = this.options.first === undefined ? -1 : bag.indexOf(this.options.first);
        if (round === 1 && at > 0) bag.unshift(...bag.splice(at, 1));
        if (bag.length === 0) break;
      }
      const kind = bag.shift() as FaultKind;
      await this.inject(kind, until);
      this.injected++;
      if (this.injected >= (this.options.limit ?? Number.POSITIVE_INFINITY)) break;
      await sleep(this.rng.between(...this.options.gapMs));
    }
  }

  /** A worker to hit: a lease holder when the plan prefers one (waiting up to 1.5 s for one to appear). */
  private async pickTarget(): Promise<WorkerView | undefined> {
    const preferHolder = this.rng.next() < this.options.holderBias;
    const deadline = mono() + 1_500;
    for (;;) {
      const candidates = this.control.targets();
      if (candidates.length === 0) return undefined;
      const holding = candidates.filter((c) => c.holding);
      if (holding.length > 0 && preferHolder) return this.rng.pick(holding);
      if (!preferHolder || mono() > deadline) return this.rng.pick(candidates);
      await sleep(25);
    }
  }

  private record(kind: FaultKind, target: WorkerView | null, t0: number, t1: number, params: FaultRecord['params']): void {
    this.log.push({ id: this.nextId++, kind, target: target?.name ?? null, t0, t1, params, targetHeld: target?.holding ?? false });
  }

  private async inject(kind: FaultKind, until: number): Promise<void> {
    const { options, rng, control } = this;
    const capped = (range: [number, number]) => Math.max(200, Math.min(rng.between(...range), until - mono() - 200));
    if (kind === 'failover') {
      const list = options.failovers;
      const how = list?.length ? (list[this.failoverTurn++ % list.length] as FailoverHow) : rng.next() < 0.5 ? 'kill' : 'freeze';
      const done = await control.failover(how);
      if (!done) {
        if (!this.notes.includes('failover')) this.notes.push('failover');
        return;
      }
      // the last fault of a limited plan leaves the cluster as it is: the run drains and ends
      const rebuildMs = this.injected + 1 >= (options.limit ?? Number.POSITIVE_INFINITY) ? 0 : await done.rebuild();
      done.steps.forEach((step, i) => this.record('failover', null, step.t0, step.t1, { ...step.params, ...(i === done.steps.length - 1 ? { rebuildMs } : {}) }));
      return;
    }
    if (kind === 'clock-step') {
      // alternating, backward first; -30 s only when the run has time left to see scheduling
      // resume on the database's new time
      const back = this.lastStep !== 'back' && until - mono() > 45_000;
      this.lastStep = back ? 'back' : 'forward';
      const [lo, hi] = options.stepMinutes ?? [2, 5];
      const seconds = back ? -30 : rng.int(lo, hi) * 60;
      const t0 = mono();
      const step = await control.stepClock(seconds);
      if (!step) {
        if (!this.notes.includes('clock-step')) this.notes.push('clock-step');
        return;
      }
      this.record('clock-step', null, t0, mono(), { deltaMs: seconds * 1_000, ...step });
      return;
    }
    if (kind === 'restart') {
      const mode = rng.next() < 0.5 ? 'fast' : 'crash';
      const t0 = mono();
      if (!(await control.restartDatabase(mode))) {
        if (!this.notes.includes('restart')) this.notes.push('restart');
        return;
      }
      this.record('restart', null, t0, mono(), { mode });
      return;
    }
    const target = await this.pickTarget();
    if (!target) return;
    const t0 = mono();
    switch (kind) {
      case 'kill': {
        // keep one worker up: killing the last one tests nothing
        if (control.targets().length < 2) return;
        control.kill(target.index);
        this.record('kill', target, t0, mono(), {});
        return;
      }
      case 'pause': {
        const ms = capped(options.pauseMs);
        control.pause(target.index);
        await sleep(ms);
        control.resume(target.index);
        this.record('pause', target, t0, mono(), { ms: Math.round(ms), ttlMultiple: Number((ms / options.ttlMs).toFixed(2)) });
        return;
      }
      case 'terminate': {
        const backend = await control.terminate(target.index, rng.next() < options.livenessBias);
        if (backend === null) return;
        this.record('terminate', target, t0, mono(), { backend });
        return;
      }
      case 'blackhole':
      case 'drop': {
        const ms = capped(kind === 'blackhole' ? options.blackholeMs : options.dropMs);
        control.setProxy(target.index, kind);
        await sleep(ms);
        control.setProxy(target.index, 'pass');
        this.record(kind, target, t0, mono(), { ms: Math.round(ms) });
        return;
      }
      case 'skew':
        return;
    }
  }
}
