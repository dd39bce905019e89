"""Django: myapp/management/commands/nightly_report.py, so `manage.py nightly_report` from
cron on every replica builds the report once; the others skip (exit 75)."""
import logging
import sys

from django.core.management.base import BaseCommand
from django.db import connection, transaction

import leasehold_lease as lh

log = logging.getLogger(__name__)


def build_report(part):  # your job; renew the lease between steps of a long one
    return f"{part}: done"


class Command(BaseCommand):
    help = "Builds the nightly report unless another replica is building it."

    def handle(self, *args, **options):
        with connection.cursor() as cur:  # Django's connection is in autocommit mode here
            got = lh.acquire(cur, "nightly-report", ttl=300)
        if isinstance(got, lh.Skip):
            log.warning("%s", got)
            sys.exit(75)
        try:
            parts = []
            for part in ("orders", "refunds"):
                parts.append(build_report(part))
                with connection.cursor() as cur:
                    lh.renew(cur, got)  # raises LeaseLost when it is no longer ours: stop
            with transaction.atomic():  # fenced: commits only while the lease is still ours
                with connection.cursor() as cur:
                    lh.assert_lease(cur, got)
                    cur.execute("insert into reports (day, body, fence) values (current_date, %s, %s)",
                                ("; ".join(parts), got.fence))
                # ORM writes in this block are fenced too: Report.objects.create(..., fence=got.fence)
        finally:
            with connection.cursor() as cur:
                lh.release(cur, got)
