#!/usr/bin/env bash
# with-lease.sh: run a command under a leasehold lease (docs/shell.md), e.g. from cron on
# every host, so that at most one of them runs it at a time.
#
#   with-lease.sh NAME TTL_SECONDS COMMAND [ARG...]
#
# Takes the lease NAME for TTL_SECONDS, runs COMMAND, renews the lease every TTL_SECONDS/3
# while COMMAND runs, and releases it when COMMAND ends. Exit status:
#   COMMAND's   COMMAND ran, and the lease stayed ours throughout
#   75          skipped: the lease is held elsewhere (who holds it is printed on stderr)
#   70          the lease was lost while COMMAND ran (no renewal confirmed in time): COMMAND
#               got SIGTERM
#   69          psql failed (no connection, no leasehold schema, a bad name); COMMAND did not run
#   64          usage error
# COMMAND sees LEASEHOLD_NAME, LEASEHOLD_TOKEN and LEASEHOLD_FENCE, for fenced writes:
#   begin; select leasehold.assert_lease(:'name', :'token', :'fence'); ...; commit;
# SIGINT, SIGTERM and SIGHUP are passed on to COMMAND as SIGTERM; the lease is released after
# it ends. If this script is killed with SIGKILL, the lease ends by its TTL.
#
# Connection: DATABASE_URL, or the PG* environment variables psql reads.
# HOLDER names this run in skips and in leasehold.lease_status (default: host:pid).
set -u

if [ $# -lt 3 ] || ! [[ $2 =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "usage: with-lease.sh NAME TTL_SECONDS COMMAND [ARG...]" >&2
  exit 64
fi
name=$1 ttl=$2
shift 2
holder=${HOLDER:-${HOSTNAME:-$(uname -n)}:$$}
interval=$(awk -v t="$ttl" 'BEGIN { print t / 3 }')
export PGCONNECT_TIMEOUT=${PGCONNECT_TIMEOUT:-5}
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }

# Values reach SQL as psql variables (:'name'), never spliced into the text.
sql() { psql ${DATABASE_URL:+"$DATABASE_URL"} -X -q -At -v ON_ERROR_STOP=1 -v name="$name" -v ttl="$ttl" "$@"; }

# A signal before COMMAND starts ends the script (after releasing); later ones go to COMMAND.
child='' stopped=''
stop() { stopped=$1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null; }
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP

sent=$(now)
row=$(sql -v holder="$holder" <<'SQL'
select acquired, coalesce(token::text, ''), fence, reason, coalesce(acquired_at::text, ''),
       coalesce(holder, '')
  from leasehold.acquire(:'name', :'ttl'::float8 * interval '1 second', :'holder')
SQL
) || { echo "with-lease: could not take lease \"$name\" (psql's error is above)" >&2; exit 69; }
IFS='|' read -r acquired token fence reason since who <<<"$row"
if [ "$acquired" != t ]; then
  echo "with-lease: skipped \"$name\" ($reason): held by $who (fence $fence) since $since" >&2
  exit 75
fi
release() { sql -v token="$token" <<<"select leasehold.release(:'name', :'token')" >/dev/null ||
  echo "with-lease: could not release \"$name\"; it ends by its TTL" >&2; }
if [ -n "$stopped" ]; then release; exit "$stopped"; fi
export LEASEHOLD_NAME=$name LEASEHOLD_TOKEN=$token LEASEHOLD_FENCE=$fence

"$@" <&0 &  # keep stdin (a background command would get /dev/null)
child=$!
# a signal that came while COMMAND was being started found no child to pass it to
[ -z "$stopped" ] || kill -TERM "$child" 2>/dev/null

# Heartbeat. The lease is lost when no renewal is confirmed before the last confirmed one
# (or the acquire) + TTL: after that the database may have handed it to someone else.
(
  trap 'exit 0' TERM
  while sleep "$interval" </dev/null >/dev/null 2>&1 & wait $!; do
    kill -0 "$child" 2>/dev/null || exit 0
    attempt=$(now)
    left=$(awk -v sent="$sent" -v ttl="$ttl" -v now="$attempt" 'BEGIN { l = sent + ttl - now; print (l > 0.01 ? l : 0) }')
    answer='renewal not confirmed in time'
    if [ "$left" != 0 ]; then
      answer=$(timeout "$left" psql ${DATABASE_URL:+"$DATABASE_URL"} -X -q -At -v ON_ERROR_STOP=1 \
        -v name="$name" -v token="$token" -v ttl="$ttl" \
        <<<"select reason from leasehold.renew_leases((:'name', :'token', :'ttl'::float8 * interval '1 second'))") ||
        answer='renewal not confirmed in time'
    fi
    if [ "$answer" != renewed ]; then
      trap '' TERM # from here on, exit 3 whatever happens
      echo "with-lease: lost lease \"$name\" (fence $fence): $answer; stopping the command" >&2
      kill -TERM "$child" 2>/dev/null
      exit 3
    fi
    sent=$attempt
  done
) &
beat=$!

while :; do
  wait "$child"
  status=$?
  kill -0 "$child" 2>/dev/null || break # still running: a forwarded signal interrupted wait
done
kill -TERM "$beat" 2>/dev/null
wait "$beat"
beat_status=$?
release
[ "$beat_status" = 3 ] && exit 70
exit "$status"
