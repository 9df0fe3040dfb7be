"""Sending prompts: concurrency per provider, rate limits, retries with backoff, and a disk cache.

Every job ends as an answer or a recorded error. Answers are written to the cache as they
arrive, so an interrupted run resumes where it stopped and a repeated run makes no calls.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langbite_core.providers import ChatRequest, Provider, ProviderError


@dataclass(frozen=True)
class PromptJob:
    model: str  # canonical "provider:model"
    request: ChatRequest
    sample: int = 0

    @property
    def cache_key(self) -> str:
        r = self.request
        material = [
            self.model,
            r.prompt,
            r.system,
            r.temperature,
            r.max_tokens,
            r.seed,
            self.sample,
            json.dumps(r.json_schema, sort_keys=True) if r.json_schema else None,
        ]
        return hashlib.sha256(json.dumps(material, ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class JobResult:
    text: str | None
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    attempts: int = 0
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": self.latency_s,
            "attempts": self.attempts,
        }


class ResponseCache:
    """Content-addressed answers in one SQLite file: the key is the hash of everything that
    shapes an answer (see PromptJob.cache_key). Each answer is committed as it arrives; WAL mode
    lets several processes share one cache."""

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.folder / "responses.sqlite3", check_same_thread=False, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.commit()

    @staticmethod
    def _decode(value: str) -> JobResult | None:
        try:
            data = json.loads(value)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            return None
        return JobResult(
            text=data["text"],
            prompt_tokens=data.get("prompt_tokens"),
            completion_tokens=data.get("completion_tokens"),
            latency_s=float(data.get("latency_s") or 0.0),
            attempts=int(data.get("attempts") or 0),
            cached=True,
        )

    def get_many(self, keys: list[str]) -> dict[str, JobResult]:
        found: dict[str, JobResult] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(f"SELECT key, value FROM responses WHERE key IN ({marks})", chunk)
                for key, value in rows:
                    result = self._decode(value)
                    if result is not None:
                        found[key] = result
        return found

    def get(self, key: str) -> JobResult | None:
        return self.get_many([key]).get(key)

    def put(self, key: str, result: JobResult) -> None:
        value = json.dumps(result.to_json(), ensure_ascii=False)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, value))
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Full-jitter exponential backoff; a server's Retry-After is a floor, never cut short."""
        backoff = min(self.max_delay_s, self.base_delay_s * 2**attempt)
        jittered = rng.uniform(backoff / 2, backoff)
        return max(jittered, retry_after) if retry_after is not None else jittered


class RateLimiter:
    """Spaces request starts so that at most `per_minute` begin in any minute."""

    def __init__(self, per_minute: float | None):
        self._interval = 60.0 / per_minute if per_minute else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        if not self._interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self._interval
        if start > now:
            time.sleep(start - now)


@dataclass
class ExecutionStats:
    calls: int = 0
    cache_hits: int = 0
    errors: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


ProgressCallback = Callable[[PromptJob, JobResult], None]


class Executor:
    def __init__(
        self,
        providers: dict[str, Provider],
        *,
        cache: ResponseCache | None = None,
        policy: RetryPolicy | None = None,
        concurrency: int | None = None,
        requests_per_minute: float | None = None,
        rng: random.Random | None = None,
    ):
        self.providers = providers
        self.cache = cache
        self.policy = policy or RetryPolicy()
        self.concurrency = concurrency
        self.limiters = {model: RateLimiter(requests_per_minute) for model in providers}
        self.stats = ExecutionStats()
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()

    def _limit_for(self, model: str) -> int:
        return self.concurrency or self.providers[model].default_concurrency

    def _call(self, job: PromptJob) -> JobResult:
        provider = self.providers[job.model]
        started = time.monotonic()
        for attempt in range(1, self.policy.attempts + 1):
            self.limiters[job.model].wait()
            try:
                response = provider.complete(job.request)
            except ProviderError as exc:
                if not exc.transient or attempt == self.policy.attempts:
                    return JobResult(
                        text=None,
                        error=exc.message,
                        latency_s=time.monotonic() - started,
                        attempts=attempt,
                    )
                with self._rng_lock:
                    pause = self.policy.delay(attempt - 1, exc.retry_after, self._rng)
                with self.stats.lock:
                    self.stats.retries += 1
                time.sleep(pause)
                continue
            except Exception as exc:  # a provider bug must not lose the rest of the run
                return JobResult(
                    text=None,
                    error=f"{type(exc).__name__}: {exc}",
                    latency_s=time.monotonic() - started,
                    attempts=attempt,
                )
            return JobResult(
                text=response.text,
                prompt_tokens=response.prompt_tokens,
                completion_tokens=response.completion_tokens,
                latency_s=time.monotonic() - started,
                attempts=attempt,
            )
        raise AssertionError("unreachable: the last attempt always returns")

    def _run_one(self, job: PromptJob) -> JobResult:
        result = self._call(job)
        with self.stats.lock:
            self.stats.calls += 1
            self.stats.errors += result.text is None
            self.stats.prompt_tokens += result.prompt_tokens or 0
            self.stats.completion_tokens += result.completion_tokens or 0
        if self.cache is not None and result.text is not None:
            self.cache.put(job.cache_key, result)
        return result

    def run(self, jobs: Iterable[PromptJob], on_result: ProgressCallback | None = None) -> dict[PromptJob, JobResult]:
        """Answers every job; each model gets its own pool so one slow provider never starves another."""
        pending = list(dict.fromkeys(jobs))
        results: dict[PromptJob, JobResult] = {}
        if self.cache is not None:
            # One batched lookup up front: a fully cached re-run never touches the thread pools.
            hits = self.cache.get_many([job.cache_key for job in pending])
            misses = []
            for job in pending:
                hit = hits.get(job.cache_key)
                if hit is None:
                    misses.append(job)
                    continue
                results[job] = hit
                if on_result is not None:
                    on_result(job, hit)
            self.stats.cache_hits += len(pending) - len(misses)
            pending = misses
        pools = {
            model: ThreadPoolExecutor(max_workers=self._limit_for(model), thread_name_prefix=f"llm-{model}")
            for model in {job.model for job in pending}
        }
        try:
            futures = {pools[job.model].submit(self._run_one, job): job for job in pending}
            for future in as_completed(futures):
                job = futures[future]
                results[job] = future.result()
                if on_result is not None:
                    on_result(job, results[job])
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True, cancel_futures=True)
        return results
