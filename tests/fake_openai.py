"""An in-process OpenAI-compatible chat server for tests and benchmarks: real HTTP on 127.0.0.1.

It also answers Ollama's native `POST /api/chat`.

Answers are scripted by a function of the prompt; latency and HTTP failures (429 with
Retry-After, 500, 401...) can be injected per request. Every request is recorded so tests can
check what the engine really sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[str, dict[str, Any]], str]


def _user_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "user")


@dataclass
class Fault:
    status: int
    retry_after: float | None = None
    message: str = "injected failure"


@dataclass
class FakeOpenAIServer:
    responder: Responder = field(default=lambda prompt, body: "No.")
    latency_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    # Failures consumed in order by requests whose prompt contains the key ("" matches all).
    faults: dict[str, list[Fault]] = field(default_factory=dict)
    hang_s: float = 0.0  # sleep this long before answering prompts containing "HANG"

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in one packet: with Nagle's algorithm and delayed ACKs a
            # keep-alive client would otherwise wait ~40 ms per request.
            disable_nagle_algorithm = True
            wbufsize = 1 << 16

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                ollama = self.path.rstrip("/") == "/api/chat"
                if not (ollama or self.path.rstrip("/").endswith("/chat/completions")):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                prompt = _user_text(body)
                with server._lock:
                    server.requests.append(body)
                    fault = server._take_fault(prompt)
                if server.latency_s:
                    time.sleep(server.latency_s)
                if server.hang_s and "HANG" in prompt:
                    time.sleep(server.hang_s)
                if fault is not None:
                    headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                    self._send(fault.status, {"error": {"message": fault.message, "type": "injected"}}, headers)
                    return
                answer = server.responder(prompt, body)
                if ollama:  # Ollama's native chat API
                    self._send(
                        200,
                        {
                            "model": body.get("model"),
                            "message": {"role": "assistant", "content": answer},
                            "done": True,
                            "prompt_eval_count": len(prompt.split()),
                            "eval_count": len(answer.split()),
                        },
                    )
                    return
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "fake"),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}
                        ],
                        "usage": {
                            "prompt_tokens": len(prompt.split()),
                            "completion_tokens": len(answer.split()),
                            "total_tokens": len(prompt.split()) + len(answer.split()),
                        },
                    },
                )

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take_fault(self, prompt: str) -> Fault | None:
        for key, queue in self.faults.items():
            if queue and key in prompt:
                return queue.pop(0)
        return None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def prompts(self) -> list[str]:
        with self._lock:
            return [_user_text(r) for r in self.requests]

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
