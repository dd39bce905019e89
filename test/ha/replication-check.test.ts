// The replication check at client start: silent on a server without standbys, one warning
// (log line, event, metric, `leasehold status` line) when a standby streams asynchronously.
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/monitor/index.js';
import type { Logger } from '../../src/observe/logger.js';
import { client, freshDatabase, waitFor } from '../support/db.js';
import { cli } from '../support/cli.js';

let url: string;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

function recordingLogger(lines: string[]): Logger {
  return {
    debug: () => undefined,
    info: () => undefined,
    warn: (_fields: object, message?: string) => void lines.push(String(message)),
    error: () => undefined,
  };
}

describe('replication check', () => {
  it('says nothing when no standby streams', async () => {
    const lines: string[] = [];
    const leasehold = await client(url, { liveness: false, logger: recordingLogger(lines) });
    expect(leasehold.replication).toMatchObject({ inRecovery: false, synchronousStandbyNames: '', standbys: 0, warning: null });
    expect(lines.filter((l) => l.includes('replication'))).toEqual([]);
  });

  it('warns once, as a log line, an event, a metric and a status line, when a standby streams asynchronously', async () => {
    // A replication connection is a WAL sender, listed in pg_stat_replication like a standby.
    const sender = new pg.Client({ connectionString: url, replication: 'database' } as pg.ClientConfig);
    await sender.connect();
    try {
      await sender.query('IDENTIFY_SYSTEM');
      const lines: string[] = [];
      const leasehold = await client(url, { liveness: false, logger: recordingLogger(lines) });
      const events: string[] = [];
      leasehold.on('replication:warning', (report) => events.push(report.warning ?? ''));
      const metrics = createMetrics();
      metrics.observe(leasehold);
      await waitFor(() => events.length > 0, 5_000);
      expect(leasehold.replication?.standbys).toBeGreaterThanOrEqual(1);
      expect(events).toHaveLength(1);
      expect(events[0]).toMatch(/asynchronous/);
      expect(lines.filter((l) => /asynchronous/.test(l))).toHaveLength(1);
      expect(await metrics.metrics()).toMatch(/^leasehold_replication_grants_can_be_lost 1$/m);

      const status = await cli(['status'], { DATABASE_URL: url });
      expect(status.stdout).toMatch(/^warning: replication is asynchronous/m);
    } finally {
      await sender.end();
    }
  });
});
