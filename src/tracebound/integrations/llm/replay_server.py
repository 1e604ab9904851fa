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

``load_exchanges`` checks every field (an ``endpoint`` path, a ``response`` object, a
string or null ``match``, an HTTP ``status``), so a broken fixture fails where it is read.
The server binds loopback only; it is a test and demo tool, not a proxy.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tracebound.errors import ConfigError, short_repr

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

    Every field is checked as it is read, so a typo in a fixture is an error naming the
    file and the exchange, not a server that quietly answers something else: ``endpoint``
    a path (``/...``), ``response`` a JSON object, ``match`` a string or null, ``status``
    an HTTP status (100 to 599), ``name`` a string.

    Raises:
        ConfigError: a file is missing or unreadable, not JSON, or not in the exchanges
            format; or a directory holds no ``*.json`` file.
    """
    root = Path(path)
    if root.is_dir():
        files = sorted(root.glob("*.json"))
        if not files:
            raise ConfigError(f"{root}: no *.json recorded-exchanges file in this folder")
    else:
        files = [root]
    out: list[RecordedExchange] = []
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise ConfigError(f"{file}: not a recorded-exchanges file: {exc}") from exc
        items = data.get("exchanges") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise ConfigError(f'{file}: not a recorded-exchanges file: no "exchanges" list')
        out.extend(_exchange(file, index, item) for index, item in enumerate(items))
    return out


def _exchange(file: Path, index: int, item: object) -> RecordedExchange:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{file}: exchanges[{index}]: {why}")

    if not isinstance(item, dict):
        raise bad("not a JSON object")
    endpoint, response = item.get("endpoint"), item.get("response")
    match, status, name = item.get("match"), item.get("status", 200), item.get("name", "")
    if not isinstance(endpoint, str) or not endpoint.startswith("/"):
        raise bad(f"endpoint must be a path such as /v1/messages, not {short_repr(endpoint)}")
    if not isinstance(response, dict):
        raise bad(f"response must be a JSON object, not {short_repr(response)}")
    if match is not None and not isinstance(match, str):
        raise bad(f"match must be a string or null, not {short_repr(match)}")
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise bad(f"status must be an HTTP status (100 to 599), not {short_repr(status)}")
    if not isinstance(name, str):
        raise bad(f"name must be a string, not {short_repr(name)}")
    return RecordedExchange(endpoint, response, match=match, status=status, name=name)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def prompt_of(body: Mapping[str, Any]) -> str:
    """The prompt text of a chat-completions or Messages request (system and messages).

    Any JSON object is accepted: what is not in the shape of a request adds no text.
    """
    messages = body.get("messages")
    parts = [_text_of(body.get("system"))]
    if isinstance(messages, list):
        parts.extend(
            _text_of(message.get("content")) for message in messages if isinstance(message, dict)
        )
    return "\n".join(p for p in parts if p)


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class ReplayServer:
    """Serves recorded exchanges on ``127.0.0.1`` from a background thread.

    Use as a context manager (or ``start()``/``stop()``); ``url`` is the base URL to give
    an adapter (append ``/v1`` for the OpenAI SDK, which expects the version in its base).
    ``host`` may be any loopback IP address (``::1`` too), never a name: a name is
    resolved elsewhere, so it could not be checked to be loopback. Once stopped, a server
    cannot be started again.

    A request it cannot read (no or a bad ``Content-Length``, a body that is not a JSON
    object) gets a 4xx answer and the connection is closed; it is not recorded.

    Raises:
        ConfigError: ``host`` is not a loopback IP address, or the port cannot be bound.
    """

    def __init__(
        self,
        exchanges: Sequence[RecordedExchange],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(
                f"the replay server binds a loopback IP address, not {short_repr(host)}"
            ) from None
        if not address.is_loopback:
            raise ConfigError("the replay server binds loopback addresses only")
        self.exchanges = tuple(exchanges)
        self.requests: list[ReceivedRequest] = []
        self._lock = threading.Lock()
        server_class = _IPv6Server if address.version == 6 else ThreadingHTTPServer
        try:
            self._server = server_class((str(address), port), self._handler())
        except (OSError, OverflowError) as exc:
            raise ConfigError(
                f"the replay server cannot listen on {host} port {port}: {exc}"
            ) from exc
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"

    def start(self) -> Self:
        """Serve from a background thread (a no-op while already serving).

        Raises:
            ConfigError: the server was stopped; make a new one.
        """
        if self._closed:
            raise ConfigError("this replay server was stopped; make a new one")
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
        """Stop serving and close the listening socket; calling it again does nothing."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        if not self._closed:
            self._closed = True
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
            # Headers and body go out in two writes: without TCP_NODELAY the body waits
            # for the client's delayed ACK of the headers (~40 ms per request).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: tests assert on `requests`, not on stderr

            def _send(self, status: int, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-request-id", "req_replay")
                if self.close_connection:
                    self.send_header("Connection", "close")
                try:
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up waiting; nothing to do

            def _refuse(self, status: int, message: str) -> None:
                # The body was not read (or not whole): the connection cannot carry
                # another request, so it is closed after this answer.
                self.close_connection = True
                self._send(status, {"error": {"type": "invalid_request_error", "message": message}})

            def _read_body(self) -> dict[str, Any] | None:
                """The request's JSON object, or None once a 4xx has been sent."""
                given = self.headers.get("Content-Length")
                if given is None:
                    self._refuse(411, "a Content-Length is required")
                    return None
                try:
                    length = int(given)
                except ValueError:
                    length = -1
                if length < 0:
                    self._refuse(400, "the Content-Length is not a number of bytes")
                    return None
                if length > _MAX_BODY:
                    self._refuse(413, "request too large")
                    return None
                data = self.rfile.read(length)
                if len(data) < length:
                    self.close_connection = True  # the client hung up mid-body: no one to answer
                    return None
                try:
                    body = json.loads(data or b"{}")
                except (ValueError, RecursionError):
                    body = None
                if not isinstance(body, dict):
                    self._refuse(400, "the request body is not a JSON object")
                    return None
                return body

            def do_POST(self) -> None:
                body = self._read_body()
                if body is None:
                    return
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
