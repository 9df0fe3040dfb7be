"""Provider registry: a model is named `prefix:model`, e.g. `openai:gpt-4o` or `local:smollm2-135m`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langbite_core.providers.base import (
    ChatRequest,
    ChatResponse,
    ConfigurationError,
    Provider,
    ProviderError,
)
from langbite_core.providers.local import BUNDLED_MODELS, LocalProvider
from langbite_core.providers.remote import HuggingFaceProvider, OllamaProvider, OpenAIProvider, ReplicateProvider

__all__ = [
    "BUNDLED_MODELS",
    "PROVIDERS",
    "ChatRequest",
    "ChatResponse",
    "ConfigurationError",
    "Provider",
    "ProviderError",
    "canonical_model",
    "create_provider",
]

PROVIDERS: dict[str, Callable[..., Provider]] = {
    "openai": OpenAIProvider,
    "hf": HuggingFaceProvider,
    "replicate": ReplicateProvider,
    "ollama": OllamaProvider,
    "local": LocalProvider,
}

PROVIDER_DESCRIPTIONS = {
    "openai": "OpenAI or any OpenAI-compatible server (OPENAI_API_KEY; OPENAI_BASE_URL for vLLM, llama.cpp...)",
    "hf": "Hugging Face Inference (HF_TOKEN)",
    "replicate": "Replicate (REPLICATE_API_TOKEN)",
    "ollama": "Ollama server (OLLAMA_HOST, default 127.0.0.1:11434)",
    "local": "in-process llama.cpp: a bundled model name or a path to a .gguf file",
}

# The model keys of LangBiTe's registry, and what they name.
LANGBITE_MODEL_KEYS = {
    "OpenAIGPT35Turbo": "openai:gpt-3.5-turbo",
    "OpenAIGPT35Turbo0613": "openai:gpt-3.5-turbo-0613",
    "OpenAIGPT35Turbo1106": "openai:gpt-3.5-turbo-1106",
    "OpenAIGPT4": "openai:gpt-4",
    "OpenAIGPT40613": "openai:gpt-4-0613",
    "OpenAIGPT4Turbo": "openai:gpt-4-turbo",
    "OpenAIGPT4o": "openai:gpt-4o",
    "OpenAIGPT4oMini": "openai:gpt-4o-mini",
    "OpenAIGPTo1": "openai:o1-preview",
    "Llama27BChat": "replicate:meta/llama-2-7b-chat",
    "Llama213BChat": "replicate:meta/llama-2-13b-chat",
    "Llama270BChat": "replicate:meta/llama-2-70b-chat",
    "OLlamaSalamandra7BInstruct": "ollama:salamandra-7b-instruct:latest",
    "OLlamaSalamandra2BInstruct": "ollama:salamandra-2b-instruct:latest",
    "OLlamaDeepSeek32B": "ollama:deepseek-r1:32b",
    "OLlamaDeepSeek14B": "ollama:deepseek-r1:14b",
    "OLlamaMistral": "ollama:mistral",
    "HuggingFaceFlanT5Base": "hf:google/flan-t5-base",
    "HuggingFaceFlanT5Large": "hf:google/flan-t5-large",
    "HuggingFaceFlanT5XXL": "hf:google/flan-t5-xxl",
    "HuggingFaceMT5Base": "hf:google/mt5-base",
    "HuggingFaceMT5Large": "hf:google/mt5-large",
    "HuggingFaceGemma2BIT": "hf:google/gemma-2b-it",
    "HuggingFaceFalcon7BInstruct": "hf:tiiuae/falcon-7b-instruct",
    "HuggingFaceMixtral8x7B01Instruct": "hf:mistralai/Mixtral-8x7B-Instruct-v0.1",
}


def canonical_model(spec: str) -> str:
    """`prefix:model` for a LangBiTe key or a prefixed id; raises ConfigurationError otherwise."""
    spec = spec.strip()
    if spec in LANGBITE_MODEL_KEYS:
        return LANGBITE_MODEL_KEYS[spec]
    prefix, sep, model = spec.partition(":")
    if not sep or not model:
        raise ConfigurationError(
            f"model {spec!r} is neither a LangBiTe model key nor of the form provider:model "
            f"(providers: {', '.join(PROVIDERS)})"
        )
    if prefix not in PROVIDERS:
        raise ConfigurationError(f"model {spec!r}: unknown provider {prefix!r} (known: {', '.join(PROVIDERS)})")
    return f"{prefix}:{model}"


def create_provider(spec: str, **options: Any) -> Provider:
    """Builds the provider for a model, checking its credentials before any call is made."""
    prefix, _, model = canonical_model(spec).partition(":")
    return PROVIDERS[prefix](model, **options)
