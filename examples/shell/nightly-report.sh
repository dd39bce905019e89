#!/usr/bin/env bash
# A job for with-lease.sh: its final write is fenced, so a run that has lost its lease
# cannot commit it (psql exits 3 and the transaction is rolled back).
#   with-lease.sh nightly-report 60 ./nightly-report.sh
set -euo pipefail
body="report built on ${HOSTNAME:-$(uname -n)}"   # the work; a long job renews through with-lease.sh
psql ${DATABASE_URL:+"$DATABASE_URL"} -X -q -v ON_ERROR_STOP=1 -v body="$body" \
  -v name="$LEASEHOLD_NAME" -v token="$LEASEHOLD_TOKEN" -v fence="$LEASEHOLD_FENCE" <<'SQL'
begin;
select leasehold.assert_lease(:'name', :'token', :'fence') \g /dev/null
insert into reports (day, body, fence) values (current_date, :'body', :'fence');
commit;
SQL
