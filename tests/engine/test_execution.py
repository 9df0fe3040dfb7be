from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from langbite_core.execution import Executor, PromptJob, ResponseCache, RetryPolicy
from langbite_core.providers import ChatRequest, ConfigurationError, canonical_model, create_provider
from tests.fake_openai import FakeOpenAIServer, Fault

FAST = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05)


def _jobs(n: int, model: str = "openai:fake", **request: object) -> list[PromptJob]:
    settings = {"temperature": 0.0, "max_tokens": 20, "seed": 3, **request}
    return [PromptJob(model=model, request=ChatRequest(prompt=f"question {i}", **settings)) for i in range(n)]  # type: ignore[arg-type]


def _executor(cache: ResponseCache | None = None, **options: object) -> Executor:
    return Executor({"openai:fake": create_provider("openai:fake", timeout_s=5)}, cache=cache, policy=FAST, **options)  # type: ignore[arg-type]


def test_it_really_sends_temperature_zero_max_tokens_and_seed(fake_llm: FakeOpenAIServer) -> None:
    _executor().run(_jobs(1))
    body = fake_llm.requests[0]
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 20
    assert body["seed"] == 3
    assert body["model"] == "fake"


def test_it_retries_rate_limits_after_the_retry_after_delay(fake_llm: FakeOpenAIServer) -> None:
    fake_llm.faults = {"question 0": [Fault(429, retry_after=0.3), Fault(500)]}
    executor = _executor()
    started = time.monotonic()
    results = executor.run(_jobs(1))
    elapsed = time.monotonic() - started
    result = next(iter(results.values()))
    assert result.text == "No."
    assert result.attempts == 3
    assert elapsed >= 0.3, "Retry-After is a floor for the pause"
    assert executor.stats.retries == 2


@pytest.mark.parametrize("status", [400, 401, 404])
def test_it_does_not_retry_permanent_failures(fake_llm: FakeOpenAIServer, status: int) -> None:
    fake_llm.faults = {"": [Fault(status)] * 5}
    result = next(iter(_executor().run(_jobs(1)).values()))
    assert result.text is None
    assert f"HTTP {status}" in (result.error or "")
    assert result.attempts == 1
    assert len(fake_llm.requests) == 1


def test_it_records_an_error_when_transient_failures_never_stop(fake_llm: FakeOpenAIServer) -> None:
    fake_llm.faults = {"question 1": [Fault(503)] * 10}
    results = _executor().run(_jobs(3))
    by_prompt = {job.request.prompt: result for job, result in results.items()}
    assert by_prompt["question 0"].text == "No."
    assert by_prompt["question 1"].text is None and by_prompt["question 1"].attempts == FAST.attempts
    assert by_prompt["question 2"].text == "No."


def test_it_times_out_a_hanging_request_and_retries_it(fake_llm: FakeOpenAIServer) -> None:
    fake_llm.hang_s = 1.5
    executor = Executor(
        {"openai:fake": create_provider("openai:fake", timeout_s=0.3)},
        policy=RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.01),
    )
    job = PromptJob("openai:fake", ChatRequest(prompt="HANG please", temperature=0, max_tokens=5))
    result = executor.run([job])[job]
    assert result.text is None and "timed out" in (result.error or "")
    assert result.attempts == 2


def test_it_keeps_at_most_the_concurrency_limit_in_flight(fake_llm: FakeOpenAIServer) -> None:
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    def slow(prompt: str, body: dict[str, object]) -> str:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.05)
        with lock:
            in_flight -= 1
        return "No."

    fake_llm.responder = slow
    _executor(concurrency=4).run(_jobs(20))
    assert peak == 4


def test_it_spaces_requests_to_respect_a_per_minute_limit(fake_llm: FakeOpenAIServer) -> None:
    started = time.monotonic()
    _executor(concurrency=4, requests_per_minute=600).run(_jobs(5))  # one start per 0.1 s
    assert time.monotonic() - started >= 0.4


def test_it_answers_a_repeated_run_from_the_cache_without_calls(fake_llm: FakeOpenAIServer, tmp_path: Path) -> None:
    first = _executor(ResponseCache(tmp_path))
    first.run(_jobs(6))
    calls = len(fake_llm.requests)
    second = _executor(ResponseCache(tmp_path))
    results = second.run(_jobs(6))
    assert len(fake_llm.requests) == calls == 6
    assert second.stats.cache_hits == 6 and second.stats.calls == 0
    assert all(r.cached and r.text == "No." for r in results.values())


def test_it_keys_the_cache_on_everything_that_shapes_an_answer(fake_llm: FakeOpenAIServer, tmp_path: Path) -> None:
    _executor(ResponseCache(tmp_path)).run(_jobs(1))
    _executor(ResponseCache(tmp_path)).run(_jobs(1, temperature=0.7))
    _executor(ResponseCache(tmp_path)).run(_jobs(1, seed=4))
    _executor(ResponseCache(tmp_path)).run(_jobs(1, max_tokens=21))
    assert len(fake_llm.requests) == 4


def test_it_resumes_an_interrupted_run_where_it_stopped(fake_llm: FakeOpenAIServer, tmp_path: Path) -> None:
    # The first run loses its connection for half the prompts (as a crash or kill would);
    # everything that was answered is already in the cache.
    fake_llm.faults = {f"question {i}": [Fault(400)] for i in range(5, 10)}
    _executor(ResponseCache(tmp_path)).run(_jobs(10))
    assert len(fake_llm.requests) == 10
    resumed = _executor(ResponseCache(tmp_path))
    results = resumed.run(_jobs(10))
    assert resumed.stats.calls == 5 and resumed.stats.cache_hits == 5
    assert sorted(fake_llm.prompts()[10:]) == [f"question {i}" for i in range(5, 10)]
    assert all(r.text == "No." for r in results.values())


def test_it_never_caches_errors(fake_llm: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_llm.faults = {"": [Fault(400)]}
    _executor(ResponseCache(tmp_path)).run(_jobs(1))
    result = next(iter(_executor(ResponseCache(tmp_path)).run(_jobs(1)).values()))
    assert result.text == "No." and not result.cached


def test_it_requires_only_the_credentials_of_providers_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HF_TOKEN", "REPLICATE_API_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        create_provider("openai:gpt-4o")
    with pytest.raises(ConfigurationError, match="HF_TOKEN"):
        create_provider("hf:google/gemma-2b-it")
    with pytest.raises(ConfigurationError, match="REPLICATE_API_TOKEN"):
        create_provider("Llama27BChat")
    assert create_provider("ollama:mistral").model == "mistral"


def test_it_maps_langbite_model_keys_and_rejects_unknown_ones() -> None:
    assert canonical_model("OpenAIGPT4o") == "openai:gpt-4o"
    assert canonical_model("HuggingFaceGemma2BIT") == "hf:google/gemma-2b-it"
    assert canonical_model("ollama:llama3.1") == "ollama:llama3.1"
    with pytest.raises(ConfigurationError, match="unknown provider 'gpt'"):
        canonical_model("gpt:4")
    with pytest.raises(ConfigurationError, match="neither a LangBiTe model key"):
        canonical_model("GPT5Turbo")


def test_it_talks_to_ollama_with_its_own_options(fake_llm: FakeOpenAIServer) -> None:
    provider = create_provider("OLlamaMistral", base_url=fake_llm.base_url.removesuffix("/v1"))
    response = provider.complete(ChatRequest(prompt="Hello?", temperature=0.0, max_tokens=7, seed=5))
    assert response.text == "No." and response.completion_tokens == 1
    body = fake_llm.requests[-1]
    assert body["model"] == "mistral" and body["stream"] is False
    assert body["options"] == {"temperature": 0.0, "num_predict": 7, "seed": 5}


def test_it_reaches_a_hugging_face_endpoint_over_http(
    fake_llm: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    provider = create_provider(f"hf:{fake_llm.base_url.removesuffix('/v1')}", timeout_s=5)
    response = provider.complete(ChatRequest(prompt="Hello?", temperature=0.0, max_tokens=9, seed=2))
    assert response.text == "No."
    body = fake_llm.requests[-1]
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.0, 9, 2)
