import { performance } from 'node:perf_hooks';
import { HolderProcess } from '../test/support/processes.js';
import { openBenchDatabase } from './lib/database.js';
import { Session } from './lib/session.js';
import { sleep } from './lib/stats.js';

const db = await openBenchDatabase(process.env.DATABASE_URL);
try {
  const challenger = await Session.open(db.url, 'probe-challenger');
  const watcher = await Session.open(db.url, 'probe-watcher');
  for (let i = 0; i < 6; i++) {
    const holder = await HolderProcess.start(db.url);
    const name = `probe-${i}`;
    await holder.send({ cmd: 'acquire', name, ttl: '30s' });
    const pids = (await watcher.query<{ pid: number }>(`select pid from pg_stat_activity where application_name = 'leasehold liveness'`)).map((r) => r.pid);
    await sleep(100);
    const t0 = performance.now();
    let exitedAt = 0, goneAt = 0, wonAt = 0;
    void holder.exited.then(() => { exitedAt = performance.now() - t0; });
    holder.signal('SIGKILL');
    const watch = (async () => {
      for (;;) {
        const rows = await watcher.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where pid = any($1)', [pids]);
        if (rows[0]?.n === 0) { goneAt = performance.now() - t0; return; }
      }
    })();
    const chall = (async () => {
      for (;;) {
        const rows = await challenger.query<{ acquired: boolean; token: string }>('select * from leasehold.acquire($1, $2::interval, $3)', [name, '30s', 'c']);
        if (rows[0]?.acquired) { wonAt = performance.now() - t0; await challenger.query('select leasehold.release($1,$2)', [name, rows[0].token]); return; }
        await sleep(2);
      }
    })();
    await Promise.all([watch, chall, holder.exited]);
    console.log(`run ${i}: child exit seen ${exitedAt.toFixed(1)} ms, liveness backend gone ${goneAt.toFixed(1)} ms, challenger won ${wonAt.toFixed(1)} ms`);
  }
  await challenger.close();
  await watcher.close();
} finally {
  await db.close();
}
