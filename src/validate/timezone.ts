// The timezones a schedule stored as data may name. PostgreSQL stores the definition and the
// workers run it with croner on Node's Intl, and the two know different names: PostgreSQL
// takes 'posixrules' (New York time), 'Factory', 'localtime', POSIX specifications ('UTC+5' is
// five hours west) and abbreviations, which Intl refuses; Intl and PostgreSQL both take legacy
// names (EST, CET) that each maps to a zone of its own choosing. So both sides accept only
// 'UTC' and the tz database's Area/Location names; each then checks that its own engine knows
// the name (Intl here, in parseSchedule; the server in SQL). Keep in step with
// leasehold.timezone_problem in sql/baseline/4_control.sql.
import { InvalidArgumentError } from '../errors.js';

/** 'UTC', or Area/Location[/Sub] in an area of the tz database (US, Canada, ... the backward-compatible ones). */
export const ZONE_NAME =
  /^(?:UTC|(?:Africa|America|Antarctica|Arctic|Asia|Atlantic|Australia|Europe|Indian|Pacific|Etc|US|Canada|Brazil|Chile|Mexico)\/[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z][A-Za-z0-9_+-]*)?)$/;

/** Refuses a timezone that is not of the form both PostgreSQL and the workers read alike. Non-strings are left to the schedule's parser. */
export function checkZoneName(timezone: unknown, where: string): void {
  if (typeof timezone !== 'string') return;
  if (timezone.length <= 64 && ZONE_NAME.test(timezone)) return;
  const shown = timezone.length > 64 ? `${timezone.slice(0, 64)}…` : timezone;
  throw new InvalidArgumentError(
    'timezone',
    `${where}: timezone must be an IANA name such as 'Europe/Berlin', 'America/Argentina/Buenos_Aires', 'Etc/GMT+5' or 'UTC' (got ${JSON.stringify(shown)}); ` +
      'legacy names (EST, CET, GMT), POSIX rules and abbreviations are refused: the database and the workers read them differently.',
  );
}
