"""leasehold leases from Python: acquire, renew, fenced writes, release.

A thin layer over the SQL functions of the leasehold schema (docs/sql-api.md), so Python
jobs share leases, fences and skips with the TypeScript client, psql and shell scripts.
Needs psycopg2 >= 2.9. Every function takes a cursor: a psycopg2 cursor or one from
Django's django.db.connection. acquire, renew and release must run in autocommit mode,
outside any transaction: the database decides expiry by now(), the start of the transaction.
"""
from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta


class LeaseLost(Exception):
    """The lease is no longer ours: stop the work. Fenced writes under it are refused."""


@dataclass(frozen=True)
class Lease:
    name: str
    token: str  # secret of this acquisition: present it, never log it
    fence: int  # grows by one on every acquisition of the name; store it beside your writes
    ttl: float  # seconds
    expires_at: datetime  # database time


@dataclass(frozen=True)
class Skip:
    """Someone else holds the lease. Not an error: log it and let the next run try."""

    name: str
    reason: str  # 'held'; 'holder-committing' (its holder is inside a fenced transaction); 'being-acquired' (another caller is taking it now)
    holder: str | None
    since: datetime | None
    until: datetime | None
    fence: int
    database_time: datetime

    def __str__(self) -> str:
        held = f" for {(self.database_time - self.since).total_seconds():.1f}s" if self.since else ""
        return (f'skipped "{self.name}" ({self.reason}): held by {self.holder} '
                f"(fence {self.fence}){held}, until {self.until}")


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _autocommit(cur) -> None:
    conn = cur.connection  # psycopg2's, also behind a Django cursor
    if not conn.autocommit or conn.info.transaction_status != 0:  # 0: idle, no transaction open
        raise RuntimeError("acquire, renew and release need an autocommit connection, "
                           "outside any transaction (psycopg2: conn.autocommit = True)")


def acquire(cur, name: str, ttl: float, holder: str | None = None,
            holder_key: int | None = None, token: str | None = None) -> Lease | Skip:
    """Takes the lease for ttl seconds if it is free. One statement; never waits.

    token: a fresh uuid of your own (str(uuid.uuid4())); when the answer never arrived
    (timeout, dropped connection), call again with the same token to get that grant back,
    or run "select leasehold.release(name, token)" if you give up."""
    _autocommit(cur)
    cur.execute(
        "select acquired, token, fence, expires_at, holder, acquired_at, reason, database_time"
        "  from leasehold.acquire(%s, %s, %s, %s, null, %s::uuid)",
        (name, timedelta(seconds=ttl), holder or default_holder(), holder_key, token),
    )
    acquired, token, fence, expires_at, who, since, reason, now = cur.fetchone()
    if acquired:
        return Lease(name, str(token), fence, ttl, expires_at)
    return Skip(name, reason, who, since, expires_at, fence, now)


def renew(cur, lease: Lease) -> datetime:
    """Extends the lease by its ttl from now. Raises LeaseLost when it is no longer ours."""
    _autocommit(cur)
    cur.execute("select renewed, expires_at, reason from leasehold.renew_leases((%s, %s, %s))",
                (lease.name, lease.token, timedelta(seconds=lease.ttl)))
    renewed, expires_at, reason = cur.fetchone()
    if not renewed:
        raise LeaseLost(f'lease "{lease.name}" (fence {lease.fence}) is lost: {reason}')
    return expires_at


def release(cur, lease: Lease) -> bool:
    """Frees the lease if it is still ours; False (and no change) when it no longer was."""
    _autocommit(cur)
    cur.execute("select leasehold.release(%s, %s)", (lease.name, lease.token))
    return cur.fetchone()[0]


def assert_lease(cur, lease: Lease) -> None:
    """Call first in a transaction whose commit must not come from a stale holder. Raises
    LeaseLost (roll back) unless the lease is still ours; until the transaction ends nobody
    can take it over. A transaction left idle longer than the ttl is ended by the server."""
    try:
        cur.execute("select set_config('idle_in_transaction_session_timeout', %s, true),"
                    "       leasehold.assert_lease(%s, %s, %s)",
                    (f"{int(lease.ttl * 1000)}ms", lease.name, lease.token, lease.fence))
    except Exception as error:  # psycopg2.Error, or Django's wrapper around it
        cause = error if hasattr(error, "pgcode") else error.__cause__
        if getattr(cause, "pgcode", None) != "LH003":
            raise
        raise LeaseLost(f"{cause.diag.message_primary}: {cause.diag.message_detail}") from error


@contextlib.contextmanager
def fenced(conn, lease: Lease):
    """psycopg2: `with fenced(conn, lease) as cur:` commits the block's writes only while the
    lease is ours; raises LeaseLost and rolls back otherwise."""
    with conn, conn.cursor() as cur:  # BEGIN ... COMMIT (ROLLBACK on an exception)
        assert_lease(cur, lease)
        yield cur


def register_liveness(conn) -> int:
    """Optional. On a dedicated, direct connection that stays open while the process lives:
    pass the key as holder_key to acquire, and a killed process's leases are free at once."""
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("select leasehold.register_liveness()")
        return cur.fetchone()[0]
