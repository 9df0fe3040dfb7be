"""Shared fixtures: a fake OpenAI-compatible server reached over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAIServer

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A running fake server; openai:* models reach it through OPENAI_BASE_URL."""
    server = FakeOpenAIServer().start()
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
