"""The scheduler: one process that starts due runs and resumes runs whose worker died."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections, connection

from leaderboard import jobs


class Command(BaseCommand):
    help = (
        "Every --interval seconds: creates and enqueues the run of each model whose schedule is due, and "
        "enqueues again the unfinished work of runs without a heartbeat for LEADERBOARD_STALE_AFTER_S. "
        "Stops cleanly on SIGTERM or SIGINT (the current pass finishes first)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="make one pass and exit")
        parser.add_argument(
            "--interval", type=float, default=settings.LEADERBOARD_SCHEDULER_INTERVAL_S, help="seconds between passes"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            self.stdout.write(f"scheduler: {signal.Signals(signum).name} received, stopping after this pass")
            stop.set()

        if not options["once"]:
            signal.signal(signal.SIGTERM, request_stop)
            signal.signal(signal.SIGINT, request_stop)
            mode = "RQ queue" if jobs.uses_redis() else "inline (no REDIS_URL)"
            self.stdout.write(f"scheduler: started, pass every {options['interval']:g} s, jobs go to the {mode}")
        while True:
            self.run_pass()
            if options["once"] or stop.wait(options["interval"]):
                break
        if not options["once"]:
            self.stdout.write("scheduler: stopped")

    def run_pass(self) -> None:
        self.refresh_connection()
        try:
            for run in jobs.schedule_due_runs():
                self.stdout.write(
                    f"scheduler: run {run.pk} of {run.llm.slug} started for slot {run.scheduled_for:%Y-%m-%d %H:%M}"
                )
            for run in jobs.recover_stale_runs():
                self.stdout.write(f"scheduler: run {run.pk} had no heartbeat; unfinished work enqueued again")
        except Exception as exc:  # one bad pass (database restart, Redis down) must not end the loop
            self.stderr.write(f"scheduler: pass failed: {type(exc).__name__}: {exc}")
        finally:
            self.refresh_connection()

    @staticmethod
    def refresh_connection() -> None:
        # A long-lived process must not keep a connection the server dropped (nor one older
        # than CONN_MAX_AGE); inside a transaction (tests, callers) the connection is left alone.
        if not connection.in_atomic_block:
            close_old_connections()
