// What the fault suite needs from a replicated database it fails over: the suite's own primary +
// standby (faults/cluster.ts), or a topology of production tools built from packages (Patroni
// with etcd and HAProxy, pg_auto_failover: faults/topologies/).
import type { FaultProxy } from './proxy.js';

/**
 * How the primary goes away: killed (SIGKILL to the host's processes), frozen (SIGSTOP), a
 * planned switchover, cut off from the consensus store (etcd), or `double`: killed, and the
 * promoted standby killed too before the other standby followed it (two promotions of one
 * timeline number, on two forks of history).
 */
export type FailoverHow = 'kill' | 'freeze' | 'switchover' | 'etcd-cut' | 'double';

/** One promotion: [t0, t1] on the shared monotonic clock, from the fault to clients reaching the new primary. */
export interface FailoverStep {
  t0: number;
  t1: number;
  params: Record<string, string | number | boolean>;
}

export interface FailoverTopology {
  /** Superuser URL of the test database, through the address every client uses. */
  readonly url: string;
  /** Where the workers' fault proxies connect: the primary (moved by `follow`) or a router that follows it. */
  readonly upstreamPort: number;
  /** A proxy that must be moved to each new primary (a no-op behind a router). */
  follow(proxy: FaultProxy): void;
  /** Which ways of failing over it supports. */
  readonly supports: readonly FailoverHow[];
  /**
   * Fails over; resolves once clients reach the new primary. `beforeMove` runs on the promoted
   * server before clients are moved to it, where the topology can (the suite's own cluster).
   */
  failover(how: FailoverHow, holdBackMs: number, beforeMove?: (primaryUrl: string, from: number) => Promise<void>): Promise<FailoverStep[]>;
  /** Brings the cluster back to full strength for the next failover; returns how long it took, ms. */
  rebuildStandby(): Promise<number>;
  readonly clockSteps: boolean;
  stepClock(seconds: number): boolean;
  close(): Promise<void>;
}
