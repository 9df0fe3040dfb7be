"""Runs through real RQ workers (separate processes) on PostgreSQL and Redis: a scheduled run
goes from queued to done, a run survives a killed worker, and retried work adds nothing twice."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from leaderboard import jobs
from leaderboard.models import LLM, Response, Run, RunPrompt, Verdict
from tests.site.conftest import PROMPTS_PER_RUN, needs_services, scenario

pytestmark = [needs_services, pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def workers() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Starts `manage.py rqworker` processes on the test database; stops whatever is left."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*, burst: bool = True, name: str | None = None) -> subprocess.Popen[bytes]:
        env = {**os.environ, "DB_NAME": connection.settings_dict["NAME"], "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "manage.py", "rqworker", "default", "--worker-ttl", "30"]
        if burst:
            command.append("--burst")
        if name:
            command += ["--name", name]
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            kill_worker(process)


def descendants(pid: int) -> list[int]:
    """Child processes, recursively, from /proc: RQ's work horse starts its own session, so
    killing the worker's process group alone would leave the horse answering."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            child = int(stat.parent.name)
            children += [child, *descendants(child)]
    return children


def kill_worker(process: subprocess.Popen[bytes]) -> None:
    """What a crashed machine does to a worker: everything stops at once, nothing cleans up."""
    for pid in [process.pid, *descendants(process.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=10)


def finish(process: subprocess.Popen[bytes], timeout: float = 120) -> str:
    output, _ = process.communicate(timeout=timeout)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    return text


def test_it_takes_a_scheduled_run_from_queued_to_done_through_workers(
    library: Any, make_llm: Any, redis_queue: Any, workers: Any, llm_server: Any
) -> None:
    llm = make_llm("sched", schedule=LLM.Schedule.DAILY, next_run_at=timezone.now() - dt.timedelta(minutes=5))
    llm.requirements = scenario()
    llm.save()
    call_command("scheduler", "--once")
    call_command("scheduler", "--once")  # a second pass finds the slot taken
    run = Run.objects.get(llm=llm)
    assert run.status == Run.Status.QUEUED and run.trigger == Run.Trigger.SCHEDULE
    assert redis_queue.count == 1 and redis_queue.job_ids[0].startswith("schedule-sched-")
    first, second = workers(name="w1"), workers(name="w2")
    finish(first), finish(second)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE, run.error_message
    assert run.answered_prompts == PROMPTS_PER_RUN == Response.objects.filter(prompt__run=run).count()
    assert run.verdicts.count() == 8 and run.verdict_count == 8
    assert len(llm_server.requests) == PROMPTS_PER_RUN
    workers_seen = set(Response.objects.filter(prompt__run=run).values_list("worker", flat=True))
    assert workers_seen and all(":" in w for w in workers_seen)
    llm.refresh_from_db()
    assert llm.next_run_at > timezone.now()


def test_it_completes_a_run_whose_worker_was_killed(
    library: Any, make_llm: Any, redis_queue: Any, workers: Any, llm_server: Any, settings: Any
) -> None:
    llm_server.latency_s = 0.2
    llm = make_llm("victim", samples=3, concurrency=2)
    run = Run.create_for(llm, scenario=scenario(), chunk_size=24)
    total = PROMPTS_PER_RUN * 3
    jobs.start_run(run)
    doomed = workers(burst=False, name="doomed")
    wait_for(lambda: Response.objects.filter(prompt__run=run).count() >= 4, 60, "the first answers")
    kill_worker(doomed)
    run.refresh_from_db()
    answered_before = Response.objects.filter(prompt__run=run).count()
    # Killed in the middle of the first chunk: its job is left "started" by a dead worker.
    assert run.status == Run.Status.RUNNING and 4 <= answered_before < 24
    assert 0 in run.pending_chunks()
    # The scheduler sees no heartbeat for longer than the limit and enqueues the unfinished chunks.
    settings.LEADERBOARD_STALE_AFTER_S = 1
    time.sleep(1.5)
    call_command("scheduler", "--once")
    run.refresh_from_db()
    assert run.recoveries == 1
    finish(workers(name="rescuer"))
    run.refresh_from_db()
    assert run.status == Run.Status.DONE, run.error_message
    assert Response.objects.filter(prompt__run=run).count() == total == run.answered_prompts
    assert RunPrompt.objects.filter(run=run).count() == total
    assert run.verdicts.count() == 8 * 3
    # Answers stored before the kill were kept, not asked again: only requests in flight repeat.
    assert len(llm_server.requests) <= total + 2


def test_it_adds_nothing_when_workers_retry_finished_work(
    library: Any, make_llm: Any, redis_queue: Any, workers: Any, llm_server: Any
) -> None:
    run = Run.create_for(make_llm("twice"), scenario=scenario(), chunk_size=4)
    jobs.start_run(run)
    finish(workers())
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    counts = (Response.objects.count(), Verdict.objects.count(), RunPrompt.objects.count(), len(llm_server.requests))
    # Every job of the run again, as a retry after a crash would send them.
    jobs.enqueue_planning(run, force=True)
    jobs.enqueue_chunks(run, list(range(run.total_chunks)), force=True)
    jobs.enqueue_evaluation(run, force=True)
    assert redis_queue.count == run.total_chunks + 2
    finish(workers())
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    assert (
        Response.objects.count(),
        Verdict.objects.count(),
        RunPrompt.objects.count(),
        len(llm_server.requests),
    ) == counts


def test_it_does_not_queue_a_waiting_job_twice(library: Any, make_llm: Any, redis_queue: Any) -> None:
    run = Run.create_for(make_llm("once"), scenario=scenario())
    assert jobs.enqueue_planning(run) is True
    assert jobs.enqueue_planning(run) is False
    assert jobs.enqueue_planning(run, force=True) is False  # still waiting: nothing to replace
    assert redis_queue.count == 1


def test_it_stops_the_scheduler_cleanly_on_sigterm(library: Any) -> None:
    env = {**os.environ, "DB_NAME": connection.settings_dict["NAME"], "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "scheduler", "--interval", "0.2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().decode()
        assert "scheduler: started" in first
        process.send_signal(signal.SIGTERM)
        output = first + process.communicate(timeout=30)[0].decode()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "SIGTERM received" in output and "scheduler: stopped" in output
