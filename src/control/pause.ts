// Pause and resume, fleet-wide and durable: leasehold.pause_job marks the job's lease row so
// that claim() refuses its slots (whatever the workers know), and with stopRunning ends the
// running run's lease (its heartbeat and fenced writes then fail, its signal fires).
import { InvalidArgumentError } from '../errors.js';
import { checkHolder, checkLeaseName, codePoints, unsafeCharacter } from '../validate/names.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';
import { CONTROL_DEFAULTS } from './defaults.js';
import type { Queryable } from '../db/handle.js';
import { run } from './schedules.js';

export interface PauseOptions {
  /** Who pauses (a person or tool), recorded in leasehold.actions and shown by status. */
  by: string;
  /** Why, shown by status and the dashboard (at most 1,000 characters). */
  reason?: string | undefined;
  /** End the running run's lease now (its signal fires, its fenced writes are refused). @default false */
  stopRunning?: boolean | undefined;
}

export interface PauseResult {
  job: string;
  /** True when the job was paused already (the first pause's who and why are kept). */
  alreadyPaused: boolean;
  /** The holder whose run was stopped (stopRunning), or null. */
  stopped: { holder: string; fence: number } | null;
}

export interface ResumeOptions {
  /** Who resumes, recorded in leasehold.actions. */
  by: string;
}

export interface ResumeResult {
  job: string;
  /** False when the job was not paused (nothing changed). */
  resumed: boolean;
  pausedAt: Date | null;
  pausedBy: string | null;
}

const PAUSE_KEYS = optionKeys<PauseOptions>({ by: true, reason: true, stopRunning: true });
const RESUME_KEYS = optionKeys<ResumeOptions>({ by: true });

function checkReason(reason: unknown): string | null {
  if (reason === undefined || reason === null) return null;
  if (typeof reason !== 'string') throw new InvalidArgumentError('reason', `reason must be a string (got ${typeof reason}).`);
  if (codePoints(reason) > CONTROL_DEFAULTS.reasonMaxLength) {
    throw new InvalidArgumentError('reason', `reason must be at most ${CONTROL_DEFAULTS.reasonMaxLength} characters (got ${codePoints(reason)}).`);
  }
  // the same characters as names: it is shown to operators
  const bad = unsafeCharacter(reason);
  if (bad) throw new InvalidArgumentError('reason', `reason must not contain control, bidirectional or invisible characters (found ${bad}).`);
  return reason;
}

export async function pauseJob(db: Queryable, name: string, options: PauseOptions): Promise<PauseResult> {
  checkLeaseName(name);
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('by', 'pause(name, { by }) needs an options object naming who pauses.');
  checkOptionKeys(options, PAUSE_KEYS, 'pause()');
  const by = checkHolder(options.by);
  const reason = checkReason(options.reason);
  if (options.stopRunning !== undefined && typeof options.stopRunning !== 'boolean') {
    throw new InvalidArgumentError('stopRunning', `stopRunning must be true or false (got ${String(options.stopRunning)}).`);
  }
  const { rows } = await run(() =>
    db.query<{ already_paused: boolean; stopped_holder: string | null; stopped_fence: string | null }>('select * from leasehold.pause_job($1, $2, $3, $4)',
      [name, by, reason, options.stopRunning ?? CONTROL_DEFAULTS.stopRunning.default]),
  );
  const row = rows[0];
  return {
    job: name,
    alreadyPaused: row?.already_paused ?? false,
    stopped: row?.stopped_holder ? { holder: row.stopped_holder, fence: Number(row.stopped_fence) } : null,
  };
}

export async function resumeJob(db: Queryable, name: string, options: ResumeOptions): Promise<ResumeResult> {
  checkLeaseName(name);
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('by', 'resume(name, { by }) needs an options object naming who resumes.');
  checkOptionKeys(options, RESUME_KEYS, 'resume()');
  const by = checkHolder(options.by);
  const { rows } = await run(() =>
    db.query<{ resumed: boolean; paused_at: Date | null; paused_by: string | null }>('select * from leasehold.resume_job($1, $2)',
      [name, by]),
  );
  const row = rows[0];
  return { job: name, resumed: row?.resumed ?? false, pausedAt: row?.paused_at ?? null, pausedBy: row?.paused_by ?? null };
}
