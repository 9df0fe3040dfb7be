"""Providers reached over HTTP: OpenAI-compatible servers, Hugging Face, Replicate and Ollama."""

from __future__ import annotations

import os
from typing import Any

import httpx

from langbite_core.providers.base import (
    ChatRequest,
    ChatResponse,
    ConfigurationError,
    ProviderError,
    parse_retry_after,
    require_env,
    status_is_transient,
)

DEFAULT_TIMEOUT_S = 60.0


def _messages(request: ChatRequest) -> list[dict[str, str]]:
    messages = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.append({"role": "user", "content": request.prompt})
    return messages


def _http_error(exc: httpx.HTTPStatusError, label: str) -> ProviderError:
    status = exc.response.status_code
    return ProviderError(
        f"{label}: HTTP {status}: {exc.response.text[:200]}",
        transient=status_is_transient(status),
        status=status,
        retry_after=parse_retry_after(exc.response.headers.get("retry-after")),
    )


class OpenAIProvider:
    """The official client; OPENAI_BASE_URL (or base_url) points it at any compatible server."""

    name = "openai"
    default_concurrency = 8

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        import openai

        self.model = model
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        if base_url:
            # Self-hosted compatible servers (vLLM, llama.cpp) usually need no key.
            api_key = os.environ.get(api_key_env, "").strip() or "not-needed"
        else:
            api_key = require_env(api_key_env, f"openai:{model}")
        # Retries are ours (backoff, Retry-After, the run's policy), so the client makes none.
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)
        self._openai = openai

    def complete(self, request: ChatRequest) -> ChatResponse:
        openai = self._openai
        extra: dict[str, Any] = {}
        if request.seed is not None:
            extra["seed"] = request.seed
        if request.json_schema is not None:
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": request.json_schema},
            }
        try:
            completion = self._client.chat.completions.create(
                model=self.model,
                messages=_messages(request),  # type: ignore[arg-type]
                temperature=request.temperature,
                max_tokens=request.max_tokens,
                **extra,
            )
        except openai.APIStatusError as exc:
            raise ProviderError(
                f"openai:{self.model}: HTTP {exc.status_code}: {exc.message}",
                transient=status_is_transient(exc.status_code),
                status=exc.status_code,
                retry_after=parse_retry_after(exc.response.headers.get("retry-after")),
            ) from None
        except openai.APITimeoutError:
            raise ProviderError(f"openai:{self.model}: request timed out", transient=True) from None
        except openai.APIConnectionError as exc:
            raise ProviderError(f"openai:{self.model}: connection failed: {exc}", transient=True) from None
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai:{self.model}: {exc}", transient=False) from None
        if not completion.choices:
            raise ProviderError(f"openai:{self.model}: the answer has no choices", transient=True)
        usage = completion.usage
        return ChatResponse(
            text=completion.choices[0].message.content or "",
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            model=completion.model,
        )


class HuggingFaceProvider:
    name = "hf"
    default_concurrency = 4

    def __init__(self, model: str, *, api_key_env: str = "HF_TOKEN", timeout_s: float = DEFAULT_TIMEOUT_S, **_: Any):
        from huggingface_hub import InferenceClient

        self.model = model
        self._client = InferenceClient(model=model, token=require_env(api_key_env, f"hf:{model}"), timeout=timeout_s)

    def complete(self, request: ChatRequest) -> ChatResponse:
        from huggingface_hub.errors import HfHubHTTPError

        extra: dict[str, Any] = {}
        if request.json_schema is not None:
            extra["response_format"] = {"type": "json_object", "value": request.json_schema}
        try:
            out = self._client.chat_completion(
                messages=_messages(request),
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                seed=request.seed,
                **extra,
            )
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            headers = exc.response.headers if exc.response is not None else {}
            raise ProviderError(
                f"hf:{self.model}: HTTP {status}: {str(exc)[:200]}",
                transient=status == 0 or status_is_transient(status),
                status=status or None,
                retry_after=parse_retry_after(headers.get("retry-after")),
            ) from None
        except (httpx.TimeoutException, httpx.TransportError, TimeoutError, ConnectionError) as exc:
            raise ProviderError(f"hf:{self.model}: {exc or type(exc).__name__}", transient=True) from None
        usage = getattr(out, "usage", None)
        return ChatResponse(
            text=out.choices[0].message.content or "",
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            model=self.model,
        )


class ReplicateProvider:
    name = "replicate"
    default_concurrency = 4

    def __init__(
        self, model: str, *, api_key_env: str = "REPLICATE_API_TOKEN", timeout_s: float = DEFAULT_TIMEOUT_S, **_: Any
    ):
        import replicate

        self.model = model
        self._client = replicate.Client(
            api_token=require_env(api_key_env, f"replicate:{model}"), timeout=httpx.Timeout(timeout_s)
        )

    def complete(self, request: ChatRequest) -> ChatResponse:
        from replicate.exceptions import ModelError, ReplicateError

        payload: dict[str, Any] = {
            "prompt": request.prompt,
            "temperature": request.temperature,
            "max_new_tokens": request.max_tokens,
            "max_tokens": request.max_tokens,
        }
        if request.system:
            payload["system_prompt"] = request.system
        if request.seed is not None:
            payload["seed"] = request.seed
        try:
            output = self._client.run(self.model, input=payload)
        except ReplicateError as exc:
            status = exc.status or 0
            raise ProviderError(
                f"replicate:{self.model}: {exc.detail or exc.title or exc}",
                transient=status == 0 or status_is_transient(status),
                status=status or None,
            ) from None
        except ModelError as exc:
            raise ProviderError(f"replicate:{self.model}: model failed: {exc}", transient=False) from None
        except httpx.HTTPStatusError as exc:
            raise _http_error(exc, f"replicate:{self.model}") from None
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise ProviderError(f"replicate:{self.model}: {exc or type(exc).__name__}", transient=True) from None
        text = output if isinstance(output, str) else "".join(str(part) for part in output)
        return ChatResponse(text=text, model=self.model)


class OllamaProvider:
    """Ollama's native chat API; OLLAMA_HOST chooses the server (default 127.0.0.1:11434)."""

    name = "ollama"
    default_concurrency = 2

    def __init__(self, model: str, *, base_url: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, **_: Any):
        host = base_url or os.environ.get("OLLAMA_HOST") or "http://127.0.0.1:11434"
        if not host.startswith(("http://", "https://")):
            host = f"http://{host}"
        self.model = model
        self._client = httpx.Client(base_url=host, timeout=timeout_s)

    def complete(self, request: ChatRequest) -> ChatResponse:
        options: dict[str, Any] = {"temperature": request.temperature, "num_predict": request.max_tokens}
        if request.seed is not None:
            options["seed"] = request.seed
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _messages(request),
            "stream": False,
            "options": options,
        }
        if request.json_schema is not None:
            body["format"] = request.json_schema
        try:
            response = self._client.post("/api/chat", json=body)
            response.raise_for_status()
            data = response.json()
        except httpx.HTTPStatusError as exc:
            raise _http_error(exc, f"ollama:{self.model}") from None
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise ProviderError(f"ollama:{self.model}: {exc or type(exc).__name__}", transient=True) from None
        except ValueError:
            raise ProviderError(f"ollama:{self.model}: the answer is not JSON", transient=True) from None
        message = data.get("message") or {}
        if "content" not in message:
            raise ConfigurationError(f"ollama:{self.model}: unexpected answer {str(data)[:200]}")
        return ChatResponse(
            text=message["content"],
            prompt_tokens=data.get("prompt_eval_count"),
            completion_tokens=data.get("eval_count"),
            model=self.model,
        )
