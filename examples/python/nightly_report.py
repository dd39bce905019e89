"""Run from cron on every host: one builds the report, the others skip (exit 75).

    DATABASE_URL=postgres://... python3 nightly_report.py
"""
import logging
import os
import sys

import psycopg2

import leasehold_lease as lh

log = logging.getLogger("nightly-report")


def build_report(part):  # your job; renew the lease between steps of a long one
    return f"{part}: done"


def main() -> int:
    conn = psycopg2.connect(os.environ["DATABASE_URL"])
    conn.autocommit = True  # acquire, renew and release each run as their own statement
    with conn.cursor() as cur:
        got = lh.acquire(cur, "nightly-report", ttl=300)
    if isinstance(got, lh.Skip):
        log.warning("%s", got)  # skipped "nightly-report" (held): held by web-2:4711 (fence 42) for 75.3s, ...
        return 75
    try:
        parts = []
        for part in ("orders", "refunds"):
            parts.append(build_report(part))
            with conn.cursor() as cur:
                lh.renew(cur, got)  # raises LeaseLost when it is no longer ours: stop
        with lh.fenced(conn, got) as cur:  # commits only while the lease is still ours
            cur.execute("insert into reports (day, body, fence) values (current_date, %s, %s)",
                        ("; ".join(parts), got.fence))
        return 0
    finally:
        with conn.cursor() as cur:
            lh.release(cur, got)


if __name__ == "__main__":
    sys.exit(main())
