"""The one small interface every LLM provider implements."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ChatRequest:
    prompt: str
    temperature: float
    max_tokens: int
    seed: int | None = None
    system: str | None = None
    # A JSON schema the answer must follow (the judge); providers that cannot enforce it
    # still receive the instruction in the prompt.
    json_schema: dict[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True)
class ChatResponse:
    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None


class ProviderError(Exception):
    """A failed request. Transient failures (rate limits, 5xx, time-outs, lost connections)
    are retried; permanent ones (bad request, bad credentials, unknown model) are not."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.status = status
        self.retry_after = retry_after


class ConfigurationError(ValueError):
    """A provider cannot be used as configured (missing credentials, unknown model)."""


class Provider(Protocol):
    name: str  # provider prefix, e.g. "openai"
    model: str  # the model as the provider names it
    default_concurrency: int

    def complete(self, request: ChatRequest) -> ChatResponse: ...


def require_env(variable: str, purpose: str) -> str:
    value = os.environ.get(variable, "").strip()
    if not value:
        raise ConfigurationError(f"{purpose} needs the environment variable {variable}, which is not set")
    return value


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (a number of seconds; HTTP dates are rare for APIs)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def status_is_transient(status: int) -> bool:
    return status in (408, 409, 425, 429) or status >= 500
