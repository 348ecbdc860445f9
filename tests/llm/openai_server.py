"""A real OpenAI-compatible HTTP server on 127.0.0.1 serving a local TransformersLLM, for tests.

``/v1/completions`` (with ``echo`` + ``logprobs``: every token of the prompt with its log-probability
and ``text_offset``, as vLLM answers), ``/v1/chat/completions`` and ``/v1/models``. A ``mode`` makes it
misbehave the ways real servers do; ``requests`` counts what arrived, so tests can check retry counts.
Like some real servers, it ignores ``stop``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import torch

from personamem.llm.hf import TransformersLLM

Mode = Literal[
    "normal",
    "fail",
    "flaky",
    "stall",
    "no_logprobs",
    "bad_request",
    "no_zero_max_tokens",
    "not_json",
    "wrong_shape",
    "html",
]
_GARBAGE: dict[str, tuple[str, bytes]] = {  # status 200 with a body no OpenAI client can use
    "not_json": ("application/json", b"this is not json {"),
    "wrong_shape": ("application/json", b'{"result": [1, 2, 3], "choices": "none"}'),
    "html": ("text/html", b"<html><body><h1>Welcome to nginx!</h1></body></html>"),
}


class OpenAIServer:
    """Serves ``llm`` until the ``with`` block ends.

    Modes: ``normal``; ``fail`` (every request answered with ``status``); ``flaky`` (``status`` for the
    first ``failures`` requests, then normal); ``stall`` (answers nothing until ``stall`` seconds have
    passed or the server stops); ``no_logprobs`` (completions without logprobs, as chat-only hosted
    APIs); ``bad_request`` (400 always); ``no_zero_max_tokens`` (400 for ``max_tokens=0``, as older vLLM);
    ``not_json``, ``wrong_shape``, ``html`` (status 200 with a body that is not the API's answer, as a
    broken proxy or a captive portal gives).
    """

    def __init__(
        self,
        llm: TransformersLLM,
        mode: Mode = "normal",
        *,
        status: int = 500,
        failures: int = 2,
        stall: float = 30.0,
    ) -> None:
        self.llm = llm
        self.mode = mode
        self.status = status
        self.failures = failures
        self.stall = stall
        self.bodies: list[dict[str, Any]] = []  # request bodies as received, in order
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def url(self) -> str:
        """The API root to give a client."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        """Requests received so far (models listing excluded)."""
        with self._lock:
            return len(self.bodies)

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()  # releases stalled handlers, so closing does not wait for them
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the handler threads
        self._thread.join()

    # -- answers ----------------------------------------------------------------------------------

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and JSON answer for one POST."""
        with self._lock:
            self.bodies.append(body)
            count = len(self.bodies)
        if self.mode == "stall" and self._stopping.wait(self.stall):
            return 503, _error("shutting down", "server_error")
        if self.mode == "fail" or (self.mode == "flaky" and count <= self.failures):
            return self.status, _error(f"injected failure {count}", "server_error")
        if self.mode == "bad_request":
            return 400, _error("model 'nope' does not exist", "invalid_request_error")
        if path == "/v1/completions":
            if self.mode == "no_zero_max_tokens" and body.get("max_tokens") == 0:
                return 400, _error("max_tokens must be at least 1, got 0.", "invalid_request_error")
            return 200, self._completions(body)
        if path == "/v1/chat/completions":
            return 200, self._chat(body)
        return 404, _error(f"no route {path}", "invalid_request_error")

    def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        max_tokens = int(body.get("max_tokens", 16))
        if body.get("echo"):
            return self._echo(prompt, max_tokens)
        generations = self._generate(prompt, body)
        choices = [
            {"index": i, "text": t, "logprobs": None, "finish_reason": "stop"}
            for i, t in enumerate(generations[0])
        ]
        return _response(
            "text_completion",
            self.llm.name,
            choices,
            generations.usage.prompt_tokens,
            generations.usage.completion_tokens,
        )

    def _echo(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        """The prompt's tokens with their log-probabilities, then at most one greedy token."""
        if max_tokens > 1:
            raise ValueError("the test server echoes with at most one generated token")
        if self.mode == "no_logprobs":
            choice = {"index": 0, "text": prompt, "logprobs": None, "finish_reason": "length"}
            return _response("text_completion", self.llm.name, [choice], 0, 0)
        encoded = self.llm.tokenizer(prompt, add_special_tokens=True, return_offsets_mapping=True)
        ids: list[int] = encoded["input_ids"]
        offsets = [start for start, _ in encoded["offset_mapping"]]
        tokens = [prompt[start:end] for start, end in encoded["offset_mapping"]]
        with self._model_lock, torch.inference_mode():
            logits = self.llm.model(input_ids=torch.tensor([ids])).logits[0].float()
        table = torch.log_softmax(logits, dim=-1)
        values: list[float | None] = [None] + [table[i - 1, ids[i]].item() for i in range(1, len(ids))]
        text = prompt
        if max_tokens == 1:
            token = int(table[-1].argmax())
            piece = self.llm.tokenizer.decode([token])
            tokens.append(piece)
            values.append(table[-1, token].item())
            offsets.append(len(prompt))
            text += piece
        choice = {
            "index": 0,
            "text": text,
            "logprobs": {
                "tokens": tokens,
                "token_logprobs": values,
                "text_offset": offsets,
                "top_logprobs": None,
            },
            "finish_reason": "length",
        }
        return _response("text_completion", self.llm.name, [choice], len(ids), max_tokens)

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        generations = self._generate(body["messages"], body)
        choices = [
            {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
            for i, t in enumerate(generations[0])
        ]
        return _response(
            "chat.completion",
            self.llm.name,
            choices,
            generations.usage.prompt_tokens,
            generations.usage.completion_tokens,
        )

    def _generate(self, prompt: Any, body: dict[str, Any]) -> Any:
        return self.llm.generate(
            [prompt],
            n=int(body.get("n") or 1),
            max_tokens=int(body.get("max_tokens") or 16),
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            seed=body.get("seed"),
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True  # server_close waits for the handlers: nothing outlives the ``with``

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that gave up (timeouts) close their end; that is expected here, not an error."""


def _handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": server.llm.name, "object": "model", "created": 0, "owned_by": "tests"}
                        ],
                    },
                )
            else:
                self._send(404, _error(f"no route {self.path}", "invalid_request_error"))

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if server.mode in _GARBAGE:
                with server._lock:
                    server.bodies.append(body)
                kind, data = _GARBAGE[server.mode]
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            try:
                status, answer = server.answer(self.path, body)
            except (KeyError, ValueError) as e:
                status, answer = 400, _error(str(e), "invalid_request_error")
            self._send(status, answer)

        def _send(self, status: int, answer: dict[str, Any]) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest would show every request otherwise."""

    return Handler


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _response(
    kind: str, model: str, choices: list[dict[str, Any]], prompt: int, completion: int
) -> dict[str, Any]:
    return {
        "id": f"cmpl-{time.monotonic_ns()}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
