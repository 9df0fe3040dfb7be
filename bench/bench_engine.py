"""Throughput of the engine against a fake OpenAI-compatible server with fixed latency.

    python bench/bench_engine.py [--latency 0.1] [--prompts 640] [--serial-prompts 64]

Measures prompts per second at concurrency 1 and 32 through the real executor (openai client,
HTTP on 127.0.0.1), and a fully cached re-run of the concurrent batch. The server runs in its own
process so that it does not compete with the engine for the interpreter lock.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langbite_core.execution import Executor, PromptJob, ResponseCache, RetryPolicy  # noqa: E402
from langbite_core.providers import ChatRequest, create_provider  # noqa: E402


def _serve(latency: float, ready: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from tests.fake_openai import FakeOpenAIServer

    server = FakeOpenAIServer(responder=lambda prompt, body: "No.", latency_s=latency).start()
    ready.put(server.base_url)
    while True:
        time.sleep(3600)


def _jobs(count: int, tag: str) -> list[PromptJob]:
    return [
        PromptJob("openai:bench", ChatRequest(prompt=f"{tag} prompt {i}", temperature=0, max_tokens=8, seed=0))
        for i in range(count)
    ]


def _rate(executor: Executor, jobs: list[PromptJob]) -> tuple[float, float]:
    started = time.perf_counter()
    results = executor.run(jobs)
    elapsed = time.perf_counter() - started
    failed = [r for r in results.values() if r.text is None]
    if failed:
        raise SystemExit(f"{len(failed)} prompts failed: {failed[0].error}")
    return len(jobs) / elapsed, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--prompts", type=int, default=640, help="prompts in the concurrent and cached runs")
    parser.add_argument("--serial-prompts", type=int, default=64, help="prompts in the concurrency-1 run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    ready: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    server = multiprocessing.Process(target=_serve, args=(args.latency, ready), daemon=True)
    server.start()
    os.environ["OPENAI_BASE_URL"] = ready.get(timeout=10)
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    provider = create_provider("openai:bench", timeout_s=10)
    policy = RetryPolicy(attempts=1)
    try:
        with tempfile.TemporaryDirectory() as cache_dir:
            serial_rate, _ = _rate(Executor({"openai:bench": provider}, concurrency=1, policy=policy),
                                   _jobs(args.serial_prompts, "serial"))  # fmt: skip
            cache = ResponseCache(cache_dir)
            jobs = _jobs(args.prompts, "parallel")
            parallel = Executor({"openai:bench": provider}, concurrency=args.concurrency, policy=policy, cache=cache)
            parallel_rate, parallel_s = _rate(parallel, jobs)
            cached = Executor({"openai:bench": provider}, concurrency=args.concurrency, policy=policy, cache=cache)
            cached_rate, cached_s = _rate(cached, jobs)
            assert cached.stats.calls == 0, "the cached re-run must make no calls"
    finally:
        server.terminate()

    bound = args.concurrency / args.latency
    results = {
        "latency_s": args.latency,
        "serial_prompts_per_s": round(serial_rate, 2),
        "concurrent_prompts_per_s": round(parallel_rate, 2),
        "concurrency": args.concurrency,
        "speed_up": round(parallel_rate / serial_rate, 1),
        "share_of_bound": round(parallel_rate / bound, 3),
        "first_run_s": round(parallel_s, 3),
        "cached_run_s": round(cached_s, 4),
        "cached_speed_up": round(parallel_s / cached_s, 1),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"latency {args.latency * 1000:.0f} ms per request")
    print(f"concurrency 1:  {serial_rate:8.1f} prompts/s ({args.serial_prompts} prompts)")
    print(f"concurrency {args.concurrency}: {parallel_rate:8.1f} prompts/s ({args.prompts} prompts), "
          f"{results['speed_up']}x, {results['share_of_bound']:.0%} of the {bound:.0f}/s bound")  # fmt: skip
    print(f"cached re-run:  {cached_s * 1000:8.1f} ms for {args.prompts} prompts, "
          f"{results['cached_speed_up']}x faster than the first run")  # fmt: skip


if __name__ == "__main__":
    main()
