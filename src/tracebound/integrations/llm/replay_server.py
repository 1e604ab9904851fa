"""A loopback HTTP server that plays recorded provider responses back to the real adapters.

Tests and the reference demo replace a model provider *only* at the HTTP boundary: the
adapters (and the provider SDKs under them) build real requests, send them over a real
socket to ``127.0.0.1``, and parse real response bodies. What comes back is a recorded
response, chosen by the prompt: the first exchange whose ``endpoint`` equals the request
path and whose ``match`` substring occurs in the request's prompt text (``None`` matches any
prompt). That is how a retry's prompt, which carries the fenced failure summary, gets a
different recorded answer than the first attempt's.

Recorded exchanges are JSON files::

    {"exchanges": [
        {"name": "...", "endpoint": "/v1/chat/completions", "match": "...",
         "status": 200, "response": { ...the provider's JSON body... }}
    ]}

The server binds loopback only; it is a test and demo tool, not a proxy.
"""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tracebound.errors import ConfigError

__all__ = ["ReceivedRequest", "RecordedExchange", "ReplayServer", "load_exchanges", "prompt_of"]

_MAX_BODY = 16 << 20


@dataclass(frozen=True, slots=True)
class RecordedExchange:
    """One recorded response and the requests it answers."""

    endpoint: str
    response: Mapping[str, Any]
    match: str | None = None
    status: int = 200
    name: str = ""


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """A request the server got, for tests to assert on."""

    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    prompt: str
    answered_by: str | None


def load_exchanges(path: str | Path) -> list[RecordedExchange]:
    """Read exchanges from a JSON file, or from every ``*.json`` in a directory (sorted).

    Raises:
        ConfigError: a file is missing, not JSON, or not in the exchanges format.
    """
    root = Path(path)
    files = sorted(root.glob("*.json")) if root.is_dir() else [root]
    out: list[RecordedExchange] = []
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            out.extend(
                RecordedExchange(
                    endpoint=str(item["endpoint"]),
                    response=dict(item["response"]),
                    match=None if item.get("match") is None else str(item["match"]),
                    status=int(item.get("status", 200)),
                    name=str(item.get("name", "")),
                )
                for item in data["exchanges"]
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{file}: not a recorded-exchanges file: {exc}") from exc
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def prompt_of(body: Mapping[str, Any]) -> str:
    """The prompt text of a chat-completions or Messages request (system and messages)."""
    parts = [_text_of(body.get("system"))]
    parts.extend(
        _text_of(message.get("content"))
        for message in body.get("messages") or []
        if isinstance(message, dict)
    )
    return "\n".join(p for p in parts if p)


class ReplayServer:
    """Serves recorded exchanges on ``127.0.0.1`` from a background thread.

    Use as a context manager (or ``start()``/``stop()``); ``url`` is the base URL to give
    an adapter (append ``/v1`` for the OpenAI SDK, which expects the version in its base).
    """

    def __init__(
        self,
        exchanges: Sequence[RecordedExchange],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ConfigError("the replay server binds loopback addresses only")
        self.exchanges = tuple(exchanges)
        self.requests: list[ReceivedRequest] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="tracebound-replay",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def choose(self, path: str, prompt: str) -> RecordedExchange | None:
        """The first exchange for ``path`` whose ``match`` occurs in ``prompt``."""
        want = path.split("?", 1)[0].rstrip("/")
        for exchange in self.exchanges:
            if exchange.endpoint.rstrip("/") == want and (
                exchange.match is None or exchange.match in prompt
            ):
                return exchange
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: tests assert on `requests`, not on stderr

            def _send(self, status: int, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-request-id", "req_replay")
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > _MAX_BODY:
                    self._send(413, {"error": {"message": "request too large"}})
                    return
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                body = body if isinstance(body, dict) else {}
                prompt = prompt_of(body)
                exchange = server.choose(self.path, prompt)
                with server._lock:
                    server.requests.append(
                        ReceivedRequest(
                            path=self.path,
                            headers={k.lower(): v for k, v in self.headers.items()},
                            body=body,
                            prompt=prompt,
                            answered_by=None if exchange is None else exchange.name,
                        )
                    )
                if exchange is None:
                    self._send(
                        404,
                        {
                            "type": "error",
                            "error": {
                                "type": "not_found_error",
                                "message": f"no recorded exchange for {self.path}",
                            },
                        },
                    )
                    return
                self._send(exchange.status, exchange.response)

        return Handler
