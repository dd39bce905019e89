// The acts an operator may take from the dashboard, each one call of the control functions
// (src/control/: pause, resume, run now, backfill) or of leasehold.force_release, with the
// person's name as `by`. The SQL records each in leasehold.actions (actor = the person, db_role
// = the login role the dashboard connected as) and applies the role's level and namespace
// (docs/security.md); a refusal comes back as a plain message with a 4xx status, never a 500.
import { backfill, runNow } from '../control/manual-runs.js';
import { forceReleaseLease } from '../control/force-release.js';
import { pauseJob, resumeJob } from '../control/pause.js';
import type { Queryable } from '../db/handle.js';
import { InvalidArgumentError, PermissionDeniedError } from '../errors.js';
import { checkLeaseName } from '../validate/names.js';
import { HttpError } from './guard.js';

/** Each act, the function of the schema it calls, and the level of `leasehold.access` that function is at. */
export const DASHBOARD_ACTIONS = {
  pause: { fn: 'pause_job', level: 'operator' },
  resume: { fn: 'resume_job', level: 'operator' },
  'run-now': { fn: 'run_now', level: 'operator' },
  backfill: { fn: 'run_now', level: 'operator' },
  'force-release': { fn: 'force_release', level: 'operator' },
} as const;

export type ActionName = keyof typeof DASHBOARD_ACTIONS;

export function isActionName(name: string): name is ActionName {
  return Object.hasOwn(DASHBOARD_ACTIONS, name);
}

export interface ActionContext {
  db: Queryable;
  /** The person's name: `by` of the control call. */
  by: string;
  /** Signs and checks a backfill's confirmation against what its dry run showed. */
  sign(...parts: string[]): string;
  verify(signature: unknown, ...parts: string[]): boolean;
}

export interface ActionReply {
  /** One sentence for the page. */
  message: string;
  [key: string]: unknown;
}

const FIELDS: Record<ActionName, readonly string[]> = {
  pause: ['job', 'reason', 'stopRunning'],
  resume: ['job'],
  'run-now': ['job'],
  backfill: ['job', 'from', 'to', 'max', 'dryRun', 'confirm'],
  'force-release': ['job'],
};

/** The request body's fields, refusing unknown ones (400), as the library's options do. */
function fields(action: ActionName, body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new HttpError(400, `${action}: the body must be a JSON object`);
  const known = FIELDS[action];
  for (const key of Object.keys(body)) {
    if (!known.includes(key)) throw new HttpError(400, `${action}: unknown field ${JSON.stringify(key.slice(0, 40))}; it takes ${known.join(', ')}`);
  }
  return body as Record<string, unknown>;
}

function job(values: Record<string, unknown>): string {
  return checkLeaseName(values.job);
}

const quoted = (name: string) => JSON.stringify(name);

/** Takes the act `action` for the person of `context`; a refusal is an HttpError with a plain message. */
export async function takeAction(action: ActionName, body: unknown, context: ActionContext): Promise<ActionReply> {
  try {
    return await act(action, fields(action, body), context);
  } catch (error) {
    throw asHttpError(error);
  }
}

async function act(action: ActionName, values: Record<string, unknown>, { db, by, sign, verify }: ActionContext): Promise<ActionReply> {
  switch (action) {
    case 'pause': {
      const name = job(values);
      // the dashboard asks why: the reason is what the next person on call reads
      if (typeof values.reason !== 'string' || values.reason.trim() === '') throw new HttpError(400, 'pause: say why (reason), for whoever reads the job next');
      if (values.stopRunning !== undefined && typeof values.stopRunning !== 'boolean') throw new HttpError(400, 'pause: stopRunning must be true or false');
      const result = await pauseJob(db, name, { by, reason: values.reason.trim(), stopRunning: values.stopRunning === true });
      const stopped = result.stopped ? `; the run of ${result.stopped.holder} (fence ${result.stopped.fence}) was stopped` : '';
      return { message: result.alreadyPaused ? `${quoted(name)} was paused already (its first pause is kept)${stopped}` : `paused ${quoted(name)}${stopped}`, ...result };
    }
    case 'resume': {
      const name = job(values);
      const result = await resumeJob(db, name, { by });
      return { message: result.resumed ? `resumed ${quoted(name)} (paused by ${result.pausedBy ?? 'unknown'})` : `${quoted(name)} was not paused: nothing changed`, ...result };
    }
    case 'run-now': {
      const name = job(values);
      const id = await runNow(db, name, { by });
      return { message: `asked for a run of ${quoted(name)} now (request ${id}): a worker with its handler starts it shortly`, job: name, request: id };
    }
    case 'backfill':
      return backfillAction(values, db, by, sign, verify);
    case 'force-release': {
      const name = job(values);
      const result = await forceReleaseLease(db, name, by);
      if (result.fence === null) throw new HttpError(404, `there is no lease named ${quoted(name)}`);
      return {
        message: result.released
          ? `released ${quoted(name)}: it was held by ${result.previousHolder ?? 'unknown'} (fence ${result.previousFence}); the fence is now ${result.fence}, so that holder's fenced writes fail`
          : `${quoted(name)} was not held; the fence moved to ${result.fence}`,
        job: name,
        ...result,
      };
    }
  }
}

/**
 * Backfill is two requests: a dry run lists the slots and signs them; the confirmation names
 * the same range with that signature, and is refused when the slots are no longer the ones
 * shown (the schedule changed, or time moved the range): nothing is requested unseen.
 */
async function backfillAction(values: Record<string, unknown>, db: Queryable, by: string, sign: ActionContext['sign'], verify: ActionContext['verify']): Promise<ActionReply> {
  const name = job(values);
  if (typeof values.from !== 'string' || typeof values.to !== 'string') throw new HttpError(400, 'backfill: from and to must be ISO 8601 times such as 2026-11-30T00:00:00Z');
  if (values.max !== undefined && typeof values.max !== 'number') throw new HttpError(400, 'backfill: max must be a number');
  if (values.dryRun !== undefined && typeof values.dryRun !== 'boolean') throw new HttpError(400, 'backfill: dryRun must be true or false');
  const range = { from: values.from, to: values.to, by, ...(values.max === undefined ? {} : { max: values.max }) };
  const preview = await backfill(db, name, { ...range, dryRun: true });
  const slots = preview.slots.map((slot) => slot.toISOString());
  const parts = [name, values.from, values.to, slots.join(',')];
  if (values.dryRun === true) {
    const count = slots.length;
    return {
      message: count === 0 ? `no slot of ${quoted(name)} in (${values.from}, ${values.to}]: nothing to backfill` : `${count} slot${count === 1 ? '' : 's'} of ${quoted(name)} in (${values.from}, ${values.to}]: confirm to request ${count === 1 ? 'it' : 'them'}`,
      job: name,
      dryRun: true,
      slots,
      confirm: count === 0 ? null : sign(...parts),
    };
  }
  if (values.confirm === undefined) throw new HttpError(400, 'backfill: run a dry run first (dryRun: true), then confirm its slots (confirm)');
  if (!verify(values.confirm, ...parts)) throw new HttpError(409, 'backfill: the slots of this range are not the ones the dry run showed (or the confirmation is not this session\'s): run the dry run again');
  const result = await backfill(db, name, { ...range, dryRun: false });
  const requested = result.requested.length;
  return {
    message: `requested ${requested} slot${requested === 1 ? '' : 's'} of ${quoted(name)}${result.alreadyRequested ? ` (${result.alreadyRequested} requested before)` : ''}`,
    job: name,
    dryRun: false,
    slots,
    requested: result.requested.map((r) => ({ id: r.id, slot: r.slot.toISOString() })),
    alreadyRequested: result.alreadyRequested,
  };
}

/** The control functions' typed errors as statuses with their (plain, checked) messages. */
function asHttpError(error: unknown): unknown {
  if (error instanceof HttpError) return error;
  if (error instanceof InvalidArgumentError) {
    return new HttpError(/^(?:leasehold: )?(?:there is )?no job named/.test(error.message) ? 404 : 400, error.message.replace(/^leasehold: /, ''));
  }
  if (error instanceof PermissionDeniedError) return new HttpError(403, error.message);
  return error;
}
