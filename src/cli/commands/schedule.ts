// leasehold schedule preview "CRON" [--tz ZONE] [--count N]: the next slots exactly as a worker
// computes them, with DST gaps and repeats marked, so that an operator sees what 02:30
// Europe/Berlin does on the transition days before they come. With --jitter and --job, each
// slot's fire time (slot + the job's offset, src/schedule/jitter.ts) next to it.
import type { Command } from 'commander';
import { dstMark, localTime } from '../../schedule/dst.js';
import { fireTime, jitterOffsetMs } from '../../schedule/jitter.js';
import { parseSchedule } from '../../schedule/schedule.js';
import { formatDuration, parseBoundedDuration } from '../../validate/duration.js';
import { checkLeaseName } from '../../validate/names.js';
import { CliError, integerFlag, report, type Io } from '../context.js';
import { range, SCHEDULE_DEFAULTS, shown } from '../defaults.js';
import { outputColumns, wrapLines } from '../layout.js';
import { table } from '../table.js';
import { EXIT } from '../exit-codes.js';
import { registerScheduleData } from './schedules.js';

export function registerSchedule(program: Command, io: Io): void {
  const schedule = program.command('schedule').description('work with schedules');
  registerScheduleData(schedule, io);
  schedule
    .command('preview')
    .description('print the next slots of a cron pattern (or --every interval), marking DST gaps and repeats')
    .argument('[cron]', "cron pattern, e.g. '30 2 * * *' (5 fields, or 6 with seconds first)")
    .option('--every <duration>', `an interval schedule instead of cron, e.g. 90s ${range(SCHEDULE_DEFAULTS.every)}`)
    .option('--tz <zone>', 'IANA timezone of the cron pattern', SCHEDULE_DEFAULTS.tz.default)
    .option('--count <n>', `how many slots (${SCHEDULE_DEFAULTS.count.min} to ${SCHEDULE_DEFAULTS.count.max})`, shown(SCHEDULE_DEFAULTS.count))
    .option('--from <iso-time>', 'start after this instant (default: now)')
    .option('--jitter <duration>', "a job's jitter, e.g. 30s: also print each slot's fire time (needs --job)")
    .option('--job <name>', 'the job whose offset --jitter shows (the offset is a function of the name)')
    .option('--json', 'print JSON')
    .option('--wide', 'do not fit the table to the terminal (or 100 columns): notes on one line')
    .action((cron: string | undefined, options: { every?: string; tz: string; count: string; from?: string; jitter?: string; job?: string; json?: boolean; wide?: boolean }) => {
      try {
        const width = outputColumns(options.wide);
        const note = { header: 'NOTE', shrink: 20, wrap: true };
        const count = integerFlag(options.count, SCHEDULE_DEFAULTS.count, '--count');
        if (cron === undefined && options.every === undefined) throw new CliError("give a cron pattern such as '30 2 * * *', or --every 90s", EXIT.usage);
        if (cron !== undefined && options.every !== undefined) throw new CliError('give a cron pattern or --every, not both', EXIT.usage);
        try {
          new Intl.DateTimeFormat('en-US', { timeZone: options.tz });
        } catch {
          throw new CliError(`--tz '${options.tz}' is not a timezone: use an IANA name such as Europe/Berlin or America/New_York`, EXIT.usage);
        }
        const spec = cron !== undefined ? { cron, timezone: options.tz } : { every: parseBoundedDuration(options.every as string, '--every', SCHEDULE_DEFAULTS.every.minMs, SCHEDULE_DEFAULTS.every.maxMs) };
        // no job name: the messages speak of the pattern, --every or --tz the user typed
        const parsed = parseSchedule(spec);
        const offsetMs = jitterFlags(options.jitter, options.job, parsed.nominalIntervalMs);
        let at = options.from ? new Date(options.from) : new Date();
        if (Number.isNaN(at.getTime())) throw new CliError(`--from must be an ISO time such as 2026-03-28T00:00:00Z (got ${options.from})`, EXIT.usage);
        const slots: Array<{ slot: string; local: string; dst: string | null; fires?: string }> = [];
        for (let i = 0; i < count; i++) {
          const next = parsed.next(at);
          if (!next) break;
          const mark = cron !== undefined ? dstMark(next, options.tz) : null;
          slots.push({
            slot: next.toISOString(),
            local: localTime(next, options.tz),
            dst: mark?.note ?? null,
            ...(offsetMs === null ? {} : { fires: fireTime(next, offsetMs).toISOString() }),
          });
          at = next;
        }
        const jitter = offsetMs === null ? undefined : { job: options.job, jitter: options.jitter, offsetMs };
        if (options.json) io.out(JSON.stringify({ schedule: parsed.description, timezone: options.tz, ...(jitter ? { jitter } : {}), slots }, null, 2));
        else if (offsetMs !== null) {
          io.out(wrapLines(`${parsed.description}, job "${options.job}" fires ${formatDuration(offsetMs)} after each slot (jitter ${options.jitter}), next ${slots.length} slot(s):`, width));
          io.out(table(['SLOT (UTC)', 'FIRES (UTC)', `LOCAL (${options.tz})`, note], slots.map((s) => [s.slot, s.fires ?? '', s.local, s.dst ?? '']), width));
        } else {
          io.out(wrapLines(`${parsed.description}, next ${slots.length} slot(s):`, width));
          io.out(table(['UTC', `LOCAL (${options.tz})`, note], slots.map((s) => [s.slot, s.local, s.dst ?? '']), width));
        }
        io.exit(EXIT.ok);
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

/** The job's offset for --jitter/--job (null without them); the jitter must be below the interval, as for a job. */
function jitterFlags(jitter: string | undefined, job: string | undefined, intervalMs: number): number | null {
  if (jitter === undefined && job === undefined) return null;
  if (jitter === undefined || job === undefined) throw new CliError('give --jitter and --job together: the offset is a function of the job name', EXIT.usage);
  const name = checkLeaseName(job);
  const ms = parseBoundedDuration(jitter, '--jitter', 1, intervalMs);
  if (ms >= intervalMs) throw new CliError(`--jitter ${jitter} must be shorter than the schedule's interval (${formatDuration(intervalMs)})`, EXIT.usage);
  return jitterOffsetMs(name, ms);
}
