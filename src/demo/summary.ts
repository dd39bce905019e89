// The end of the story: a summary from the workers' events and leasehold.run_history, and the
// checks behind the exit code, on the events and on the database (no slot ran twice, runs of a
// job never overlapped, fenced writes committed in fence order, no stale or killed write).
import { shorten } from './helpers.js';
import { REPORT_JOB, slotKey } from './protocol.js';
import type { Demo } from './run.js';
import { clockTime, type Style } from './story.js';

export async function summary(demo: Demo): Promise<void> {
  const pool = demo.life.observer?.pool;
  if (!pool) return;
  const story = demo.story;
  const outcomes = await demo.query<{ outcome: string; n: number }>('select outcome, count(*)::int as n from leasehold.runs group by outcome order by n desc');
  const runs = outcomes.rows.reduce((sum, row) => sum + row.n, 0);
  const skips = demo.log.count('skipped', (m) => !m.buffered);
  const bufferedStarts = demo.log.count('started', (m) => demo.timeline.bufferedSlots.has(slotKey(m.job, m.slot)));
  const refused = demo.log.count('refused');

  story.heading('Summary');
  const item = (label: string, value: number, detail = '') => story.plain(`  ${label.padEnd(30)}${String(value).padStart(4)}${detail ? `   ${detail}` : ''}`);
  item('runs', runs, outcomes.rows.map((row) => `${row.outcome} ${row.n}`).join(', '));
  item('skips', skips, 'slots that did not run: the previous run still held the lease');
  item('buffered slots started', bufferedStarts, 'slots that waited for the previous run and started when it released');
  const takeovers = demo.log.count('started', (m) => m.tookOver);
  const unexplained = takeovers - demo.takeovers.length;
  item('takeovers', takeovers, [...demo.takeovers.map((t) => t.text), ...(unexplained > 0 ? [`${unexplained} more: a lease ran out by itself`] : [])].join('; '));
  item('stale writes refused', refused, demo.stale ? `${demo.stale.worker}, fence ${demo.stale.fence}` : '');

  const history = await demo.query<{
    slot: Date;
    job: string;
    kind: string;
    outcome: string;
    fence: string | null;
    holder: string | null;
    duration_seconds: number | null;
    detail: string | null;
  }>(
    `select slot, job, kind, outcome, fence::text, holder, duration_seconds, detail
       from (select * from leasehold.run_history order by slot desc, at desc limit 15) last
      order by slot, at`,
  );
  story.plain('');
  story.plain('  select slot, job, kind, outcome, fence, holder, duration_seconds, detail from leasehold.run_history  (the last 15)');
  story.plain(demo.paint(`  ${'slot'.padEnd(8)}  ${'job'.padEnd(14)}  ${'kind'.padEnd(4)}  ${'outcome'.padEnd(9)}  ${'fence'.padStart(5)}  ${'holder'.padEnd(8)}  ${'took'.padStart(6)}  detail`, 'bold'));
  for (const row of history.rows) {
    const took = row.duration_seconds === null ? '' : `${row.duration_seconds.toFixed(1)} s`;
    const outcomeStyle: Style[] = row.outcome === 'lost' || row.outcome === 'failed' || row.outcome === 'timed-out' ? ['red'] : row.kind === 'skip' ? ['yellow'] : [];
    story.plain(
      `  ${clockTime(row.slot).padEnd(8)}  ${row.job.padEnd(14)}  ${row.kind.padEnd(4)}  ${demo.paint(row.outcome.padEnd(9), ...outcomeStyle)}  ${(row.fence ?? '').padStart(5)}  ${(row.holder ?? '').padEnd(8)}  ${took.padStart(6)}  ${shorten(row.detail ?? '', 90)}`,
    );
  }

  await checks(demo, skips, bufferedStarts, refused);
}

/** The checks behind the exit code, on the worker events and on the database. */
async function checks(demo: Demo, skips: number, bufferedStarts: number, refused: number): Promise<void> {
  const problems = demo.problems;
  if (skips < 1) problems.push('no slot was skipped');
  if (demo.log.count('skipped', (m) => !m.buffered && m.holder !== null && m.heldMs !== null && m.holderSlot !== null) < 1) problems.push('no skip named the holder');
  if (bufferedStarts < 1) problems.push('no buffered slot started');
  if (!demo.killed) problems.push('no worker was killed');
  else if (!demo.takeovers.some((t) => t.text.includes('killed'))) problems.push(`no takeover after ${demo.killed.worker} was killed`);
  if (!demo.stale || refused < 1) problems.push('no stale write was refused');

  const unfinished = await demo.query<{ job: string; slot: Date; fence: string; holder: string }>(
    "select r.job, r.slot, r.fence::text as fence, r.holder from leasehold.runs r where r.outcome = 'running' order by r.fence",
  );
  // (only after a normal wind-down: workers killed after a failure leave runs 'running')
  for (const row of demo.woundDown ? unfinished.rows : []) {
    problems.push(`${row.job} slot ${clockTime(row.slot)} (fence ${row.fence}, ${row.holder}) is still 'running' in leasehold.runs after every worker stopped`);
  }

  const twice = await demo.query<{ job: string; slot: Date; n: number }>(
    'select job, slot, count(*)::int as n from leasehold.runs group by job, slot having count(*) > 1',
  );
  for (const row of twice.rows) problems.push(`${row.job} slot ${clockTime(row.slot)} ran ${row.n} times`);

  const runs = await demo.query<{ fence: string; started_at: Date; finished_at: Date | null; holder: string }>(
    'select r.fence::text as fence, r.started_at, r.finished_at, r.holder from leasehold.runs r where r.job = $1 order by r.fence',
    [REPORT_JOB.name],
  );
  for (let i = 1; i < runs.rows.length; i++) {
    const previous = runs.rows[i - 1];
    const current = runs.rows[i];
    if (!previous || !current) continue;
    if (previous.finished_at === null || current.started_at < previous.finished_at) {
      problems.push(`${REPORT_JOB.name} runs overlap: fence ${current.fence} (${current.holder}) started before fence ${previous.fence} (${previous.holder}) ended`);
    }
  }

  const writes = await demo.query<{ job: string; fence: string }>('select w.job, w.fence::text as fence from demo_writes w order by w.written_at');
  const lastFence = new Map<string, number>();
  for (const row of writes.rows) {
    const fence = Number(row.fence);
    if (fence <= (lastFence.get(row.job) ?? 0)) problems.push(`demo_writes: ${row.job} fence ${fence} was committed after fence ${lastFence.get(row.job)}`);
    lastFence.set(row.job, fence);
  }
  const has = (job: string, fence: number) => writes.rows.some((row) => row.job === job && Number(row.fence) === fence);
  if (demo.stale && has(REPORT_JOB.name, demo.stale.fence)) problems.push(`demo_writes has a row from the stale fence ${demo.stale.fence}`);
  if (demo.killed && has(REPORT_JOB.name, demo.killed.fence)) problems.push(`demo_writes has a row from the killed run's fence ${demo.killed.fence}`);
  if (writes.rows.length !== demo.timeline.written.size) problems.push(`demo_writes has ${writes.rows.length} rows but the workers reported ${demo.timeline.written.size} writes`);
}
