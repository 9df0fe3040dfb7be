"""Background work: planning a run, answering its chunks, evaluating it, and scheduling.

With REDIS_URL set, each step is an RQ job that any number of `manage.py rqworker` processes
pick up; without it every step runs inline in the calling process (the zero-setup default).
Job ids are deterministic (run-<id>-plan, run-<id>-chunk-<n>, run-<id>-evaluate) so a step that is
already waiting in the queue is never queued twice, and every step is idempotent so one that runs
twice (a retry after a crash) changes nothing the second time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.db import IntegrityError, close_old_connections, transaction
from django.utils import timezone

from langbite_core.engine import PlanError
from langbite_core.library import LibraryError
from langbite_core.providers import ConfigurationError
from langbite_core.requirements import RequirementsError

log = logging.getLogger(__name__)

# Errors that no retry can fix: the run fails with the message instead of being retried.
PERMANENT_ERRORS = (PlanError, RequirementsError, ConfigurationError, LibraryError)
WAITING_STATES = ("queued", "deferred", "scheduled")


_local = threading.local()


def uses_redis() -> bool:
    return bool(getattr(settings, "REDIS_URL", "")) and not getattr(_local, "inline", False)


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Runs every job enqueued inside the block in this thread, even when Redis is configured
    (demo_run, and commands that must finish before they return)."""
    previous = getattr(_local, "inline", False)
    _local.inline = True
    try:
        yield
    finally:
        _local.inline = previous


def get_queue() -> Any:
    import django_rq

    return django_rq.get_queue(settings.RQ_QUEUE_NAME)


def _waiting(queue: Any, job_id: str) -> bool:
    """Whether the job is already in the queue and has not started."""
    from rq.job import Job

    job = Job.fetch(job_id, connection=queue.connection) if Job.exists(job_id, connection=queue.connection) else None
    if job is None:
        return False
    status = job.get_status(refresh=True)
    return status is not None and str(getattr(status, "value", status)) in WAITING_STATES


def enqueue(func: Callable[..., Any], *args: Any, job_id: str, force: bool = False) -> bool:
    """Queues func(*args) under job_id once the current transaction commits (or runs it inline
    without Redis). A job with that id already waiting is left alone; force also replaces one
    that started (its worker is presumed dead). True when the job was queued or run."""
    if getattr(_local, "inline", False):
        func(*args)  # asked for explicitly: now, in this thread
        return True
    if not uses_redis():
        # After the commit, so an inline run never becomes one long transaction with its caller.
        transaction.on_commit(lambda: func(*args))
        return True
    queue = get_queue()
    if _waiting(queue, job_id):
        return False
    if not force:
        from rq.job import Job

        if Job.exists(job_id, connection=queue.connection):
            status = Job.fetch(job_id, connection=queue.connection).get_status(refresh=True)
            if str(getattr(status, "value", status)) == "started":
                return False
    queue.enqueue(func, *args, job_id=job_id, result_ttl=86400, failure_ttl=7 * 86400, job_timeout=6 * 3600)
    return True


def plan_job_id(run_id: int) -> str:
    return f"run-{run_id}-plan"


def chunk_job_id(run_id: int, chunk: int) -> str:
    return f"run-{run_id}-chunk-{chunk}"


def evaluate_job_id(run_id: int) -> str:
    return f"run-{run_id}-evaluate"


def enqueue_planning(run: Any, force: bool = False) -> bool:
    return enqueue(plan_run, run.pk, job_id=plan_job_id(run.pk), force=force)


def enqueue_chunks(run: Any, chunks: list[int], force: bool = False) -> int:
    return sum(
        enqueue(answer_chunk, run.pk, chunk, job_id=chunk_job_id(run.pk, chunk), force=force) for chunk in chunks
    )


def enqueue_evaluation(run: Any, force: bool = False) -> bool:
    return enqueue(evaluate_run, run.pk, job_id=evaluate_job_id(run.pk), force=force)


# --- the jobs (module-level functions: RQ imports them by name) ---------------------------------


def _load(run_id: int) -> Any:
    from leaderboard.models import Run

    return Run.objects.filter(pk=run_id).select_related("llm").first()


def plan_run(run_id: int) -> None:
    run = _load(run_id)
    if run is None:
        return
    try:
        planned = run.plan()
    except PERMANENT_ERRORS as exc:
        run.fail(f"planning failed: {exc}")
        return
    if planned or run.status == run.Status.RUNNING:
        enqueue_chunks(run, run.pending_chunks())


def answer_chunk(run_id: int, chunk: int) -> None:
    run = _load(run_id)
    if run is None:
        return
    try:
        run.answer_chunk(chunk)
    except PERMANENT_ERRORS as exc:
        run.fail(f"chunk {chunk}: {exc}")


def evaluate_run(run_id: int) -> None:
    run = _load(run_id)
    if run is None:
        return
    try:
        run.evaluate()
    except PERMANENT_ERRORS as exc:
        run.fail(f"evaluation failed: {exc}")


# --- starting runs ------------------------------------------------------------------------------


def start_run(run: Any, *, background: bool = False) -> None:
    """Sends a queued run on its way: to the RQ queue, or inline (in a thread when background,
    so a web request returns at once)."""
    if uses_redis() or not background:
        enqueue_planning(run)
        return

    def work() -> None:
        try:
            plan_run(run.pk)
        except Exception:  # a crash must not kill the server; the scheduler resumes the run
            log.exception("inline run %s failed", run.pk)
        finally:
            close_old_connections()

    transaction.on_commit(lambda: threading.Thread(target=work, name=f"run-{run.pk}", daemon=True).start())


def schedule_due_runs(now: dt.datetime | None = None) -> list[Any]:
    """Creates and enqueues the run of every model whose schedule slot has come. A slot makes at
    most one run (unique llm + scheduled_for), however many schedulers race for it."""
    from leaderboard.models import LLM, Run

    now = now or timezone.now()
    started = []
    for llm in LLM.objects.due(now):
        slot = (llm.next_run_at or now).replace(second=0, microsecond=0)
        following = llm.following_slot(slot, now)
        with transaction.atomic():
            # Moving next_run_at only if nobody moved it first makes the slot ours.
            claimed = LLM.objects.filter(pk=llm.pk, next_run_at=llm.next_run_at).update(next_run_at=following)
            if not claimed:
                continue
            if Run.objects.filter(llm=llm).active().exists():
                log.info("%s: previous run still active, slot %s skipped", llm.slug, slot.isoformat())
                continue
            try:
                with transaction.atomic():
                    run = Run.create_for(llm, trigger=Run.Trigger.SCHEDULE, scheduled_for=slot)
            except IntegrityError:
                continue  # another scheduler made this slot's run
            except RequirementsError as exc:
                log.error("%s: cannot schedule: %s", llm.slug, exc)
                continue
        # Enqueued after the commit, so a worker always finds the run, and an inline run is not
        # one long transaction.
        enqueue(plan_run, run.pk, job_id=f"schedule-{llm.slug}-{slot:%Y%m%dT%H%M}")
        started.append(run)
    return started


def recover_stale_runs(now: dt.datetime | None = None) -> list[Any]:
    """Enqueues again the unfinished work of runs whose worker stopped reporting."""
    from leaderboard.models import Run

    now = now or timezone.now()
    resumed = []
    for run in Run.objects.stale(now, settings.LEADERBOARD_STALE_AFTER_S):
        log.warning("run %s: no heartbeat since %s, resuming", run.pk, run.heartbeat_at)
        if run.resume():
            resumed.append(run)
    return resumed
