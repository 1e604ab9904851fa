"""The replay server and its fixture loader take bad input without crashing or hanging.

Requests are sent over real loopback sockets, byte for byte, as a broken client would.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.fence.fallback_kit import LLM_FIXTURES

from tracebound.errors import ConfigError
from tracebound.integrations.llm import (
    OpenAICompatibleLeaf,
    RecordedExchange,
    ReplayServer,
    load_exchanges,
)

ANSWER = RecordedExchange("/v1/messages", {"ok": True}, name="any")
GUARD_S = 10  # a hung server fails the test instead of blocking it; never asserted on


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer([ANSWER]) as s:
        yield s


def _exchange(server: ReplayServer, request: bytes) -> bytes:
    """Send raw bytes; everything the server answers until it closes (or goes quiet)."""
    host, port = server._server.server_address[:2]
    with socket.create_connection((str(host), port), timeout=GUARD_S) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)  # no more bytes will come: a blocked read ends
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _post(body: bytes, *, length: str | None = None) -> bytes:
    header = (
        "" if length == "" else f"Content-Length: {len(body) if length is None else length}\r\n"
    )
    return b"POST /v1/messages HTTP/1.1\r\nHost: replay\r\n" + header.encode() + b"\r\n" + body


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (_post(b"{}", length="abc"), 400),
        (_post(b"{}", length="-1"), 400),
        (_post(b"{}", length=""), 411),
        (_post(b"", length=str(64 << 20)), 413),
        (_post(b"[" * 100_000 + b"]" * 100_000), 400),
        (_post(b"[1, 2]"), 400),
        (_post(b"\xff\xfe"), 400),
        (_post(b'{"messages": 5, "system": {"x": 1}}'), 200),
        (_post(b'{"messages": [{"content": [{"text": 1}, "x", {"type": "image"}]}]}'), 200),
    ],
    ids=[
        "length-not-a-number",
        "negative-length",
        "no-length",
        "too-large",
        "too-deep",
        "not-an-object",
        "not-utf8",
        "odd-shape",
        "odd-parts",
    ],
)
def test_a_bad_request_gets_an_answer_and_the_server_keeps_serving(
    server: ReplayServer, request_bytes: bytes, status: int
) -> None:
    answer = _exchange(server, request_bytes)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:80]
    if status >= 400:
        assert b"Connection: close" in answer
        assert server.requests == []
    else:
        assert [r.answered_by for r in server.requests] == ["any"]
    # The server is still up and answers the next, well-formed request.
    assert _exchange(server, _post(b"{}")).startswith(b"HTTP/1.1 200 ")


def test_a_loopback_name_is_refused_as_a_config_error() -> None:
    for host in ("localhost", "replay.invalid", "10.0.0.1", "0.0.0.0"):
        with pytest.raises(ConfigError, match="loopback"):
            ReplayServer([], host=host)


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this host has no IPv6 loopback")
def test_ipv6_loopback_serves_and_its_url_works() -> None:
    recorded = load_exchanges(LLM_FIXTURES / "openai_remediation.json")
    with ReplayServer(recorded, host="::1") as s:
        assert s.url.startswith("http://[::1]:")
        leaf = OpenAICompatibleLeaf(s.url + "/v1", "k", model="o4-mini", max_retries=0)
        answer = leaf.complete("first", model="o4-mini", max_tokens=1)
        leaf.close()
    assert "+requests==" in answer.text
    assert [r.answered_by for r in s.requests] == ["first-attempt"]


def test_a_port_in_use_is_a_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=str(port)):
            ReplayServer([], port=port)


def test_a_stopped_server_cannot_be_restarted() -> None:
    s = ReplayServer([ANSWER]).start()
    s.stop()
    s.stop()  # idempotent
    with pytest.raises(ConfigError, match="stopped"):
        s.start()


# --- the fixture loader ------------------------------------------------------------------


def _write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "exchanges.json"
    path.write_text(json.dumps(document))
    return path


GOOD = {"endpoint": "/v1/messages", "response": {"ok": True}}


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"response": {}}, "endpoint"),
        ({**GOOD, "endpoint": 5}, "endpoint"),
        ({**GOOD, "endpoint": "v1/messages"}, "endpoint"),
        ({**GOOD, "response": [["a", 1]]}, "response"),
        ({**GOOD, "response": "text"}, "response"),
        ({**GOOD, "match": 5}, "match"),
        ({**GOOD, "status": True}, "status"),
        ({**GOOD, "status": 2000}, "status"),
        ({**GOOD, "status": "200"}, "status"),
        ({**GOOD, "name": ["x"]}, "name"),
        ("not an object", "object"),
    ],
)
def test_a_bad_exchange_names_its_index_and_field(tmp_path: Path, item: Any, field: str) -> None:
    path = _write(tmp_path, {"exchanges": [GOOD, item]})
    with pytest.raises(ConfigError, match=rf"exchanges\[1\].*{field}"):
        load_exchanges(path)


def test_undecodable_files_and_empty_folders_are_config_errors(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="not a recorded-exchanges file"):
        load_exchanges(deep)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"no \*\.json"):
        load_exchanges(empty)
    with pytest.raises(ConfigError):
        load_exchanges(tmp_path / "missing.json")


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(["endpoint", "response", "match", "status", "name", "exchanges"]),
            inner,
            max_size=6,
        ),
    ),
    max_leaves=12,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=st.one_of(_JSON, st.builds(lambda xs: {"exchanges": xs}, st.lists(_JSON))))
def test_any_json_document_loads_or_is_a_config_error(tmp_path: Path, document: Any) -> None:
    path = _write(tmp_path, document)
    try:
        loaded = load_exchanges(path)
    except ConfigError:
        return
    for exchange in loaded:  # what loads is what the server can serve
        assert exchange.endpoint.startswith("/") and isinstance(exchange.response, dict)
        assert 100 <= exchange.status <= 599 and not isinstance(exchange.status, bool)
        assert exchange.match is None or isinstance(exchange.match, str)
