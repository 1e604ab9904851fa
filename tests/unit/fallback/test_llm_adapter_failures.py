"""How the provider adapters fail: always a typed LeafCallFailed, and the subclass says why.

Providers are replaced only at the HTTP boundary: the replay server with recorded (or, for
the fuzz, mutated) bodies, a listening socket that never answers, a closed port, and for
bodies the replay server cannot produce (not JSON at all) a minimal loopback HTTP server.
"""

from __future__ import annotations

import copy
import json
import pickle
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.fence.fallback_kit import LLM_FIXTURES, make_kit

from tracebound.errors import ConfigError, TraceboundError
from tracebound.integrations.llm import (
    AnthropicLeaf,
    LeafCallFailed,
    LeafConnectionError,
    LeafMalformedResponse,
    LeafRateLimited,
    LeafStatusError,
    LeafTimeout,
    OpenAICompatibleLeaf,
    RecordedExchange,
    ReplayServer,
    load_exchanges,
)
from tracebound.pipeline.fallback import RecipeBook

ERRORS = load_exchanges(LLM_FIXTURES / "errors.json")
OPENAI = load_exchanges(LLM_FIXTURES / "openai_remediation.json")
ANTHROPIC = load_exchanges(LLM_FIXTURES / "anthropic_remediation.json")
CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"

Leaf = OpenAICompatibleLeaf | AnthropicLeaf


def _leaf(kind: str, url: str, **kw: Any) -> Leaf:
    kw.setdefault("max_retries", 0)
    if kind == "openai":
        return OpenAICompatibleLeaf(url + "/v1", "sk-test", model="o4-mini", **kw)
    return AnthropicLeaf("sk-ant-test", model="claude-sonnet-4", base_url=url, **kw)


def _body(exchanges: list[RecordedExchange], name: str) -> dict[str, Any]:
    return copy.deepcopy(dict(next(e for e in exchanges if e.name == name).response))


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer([*ERRORS, *OPENAI, *ANTHROPIC]) as s:
        yield s


# --- the kind of failure is in the type --------------------------------------------------


def test_a_rate_limit_is_typed_with_its_status(server: ReplayServer) -> None:
    leaf = _leaf("openai", server.url)
    with pytest.raises(LeafRateLimited, match="RateLimitError") as caught:
        leaf.complete("TRIGGER-RATE-LIMIT", model="o4-mini", max_tokens=10)
    assert caught.value.status_code == 429
    assert isinstance(caught.value, LeafStatusError)
    leaf.close()


@pytest.mark.parametrize(
    ("kind", "prompt", "status"),
    [("anthropic", "TRIGGER-OVERLOADED", 529), ("openai", "nothing matches", 404)],
)
def test_an_error_status_is_typed_with_its_status(
    server: ReplayServer, kind: str, prompt: str, status: int
) -> None:
    server.exchanges = tuple(ERRORS)  # no catch-all answer: an unmatched prompt is a 404
    leaf = _leaf(kind, server.url)
    with pytest.raises(LeafStatusError) as caught:
        leaf.complete(prompt, model=leaf.model, max_tokens=10)
    assert caught.value.status_code == status
    assert not isinstance(caught.value, LeafRateLimited)
    leaf.close()


@pytest.mark.parametrize("prompt", ["TRIGGER-NO-USAGE", "TRIGGER-NO-CHOICES"])
def test_unusable_bodies_are_malformed_responses(server: ReplayServer, prompt: str) -> None:
    leaf = _leaf("openai", server.url)
    with pytest.raises(LeafMalformedResponse):
        leaf.complete(prompt, model="o4-mini", max_tokens=10)
    leaf.close()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_server_that_never_answers_is_a_timeout(kind: str) -> None:
    with socket.socket() as listener:  # the kernel accepts the connection; nobody answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        host, port = listener.getsockname()
        leaf = _leaf(kind, f"http://{host}:{port}", timeout=0.2)
        with pytest.raises(LeafTimeout, match="APITimeoutError"):
            leaf.complete("hi", model=leaf.model, max_tokens=1)
        leaf.close()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_closed_port_is_a_connection_error(kind: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    leaf = _leaf(kind, f"http://127.0.0.1:{port}")
    with pytest.raises(LeafConnectionError) as caught:
        leaf.complete("hi", model=leaf.model, max_tokens=1)
    assert not isinstance(caught.value, LeafTimeout)
    leaf.close()


def test_typed_failures_survive_pickling() -> None:
    for exc in (LeafRateLimited("slow down", status_code=429), LeafTimeout("late")):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and vars(back) == vars(exc)


def test_the_anchor_records_which_kind_of_failure_it_was(tmp_path: Path) -> None:
    limited = next(e for e in ERRORS if e.name == "openai-rate-limited")
    every_prompt = RecordedExchange(CHAT, limited.response, status=429, name="limited")
    with ReplayServer([every_prompt]) as server:
        leaf = _leaf("openai", server.url)
        kit = make_kit(tmp_path, leaf=leaf, recipes=RecipeBook([]))
        plan = kit.tier.run(kit.ctx(), workflow_id="wf")
        leaf.close()
    assert (plan.tag, plan.refusal_reason) == ("Refused", "leaf_error")
    assert plan.anchor.extras["phase4.leaf_error"] == "LeafRateLimited"
    kit.close()


# --- settings are checked where they are given --------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"api_key": ""},
        {"model": ""},
        {"timeout": 0},
        {"timeout": float("nan")},
        {"timeout": True},
        {"max_retries": -1},
    ],
)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_bad_settings_are_config_errors(kind: str, kw: dict[str, Any]) -> None:
    args: dict[str, Any] = {"api_key": "k", "model": "m", **kw}
    with pytest.raises(ConfigError):
        _leaf_with(kind, args)


def _leaf_with(kind: str, args: dict[str, Any]) -> Leaf:
    if kind == "openai":
        return OpenAICompatibleLeaf("http://127.0.0.1:9/v1", **args)
    return AnthropicLeaf(**args, base_url="http://127.0.0.1:9")


# --- bodies that are not what a provider sends --------------------------------------------


class _RawBodyServer:
    """Answers every POST with 200 and the given bytes, as a broken provider might."""

    def __init__(self, body: bytes) -> None:
        payload = body

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the JSON decoder's recursion limit
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b"<html>502 Bad Gateway</html>",
        b"",
        b'{"choices": null, "usage": null}',
        b'{"choices": {"0": {}}}',
    ],
    ids=["deep-array", "deep-object", "html", "empty", "null-choices", "dict-choices"],
)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_any_unusable_body_is_a_malformed_response(kind: str, body: bytes) -> None:
    with _RawBodyServer(body) as url:
        leaf = _leaf(kind, url)
        with pytest.raises(LeafMalformedResponse):
            leaf.complete("hi", model=leaf.model, max_tokens=5)
        leaf.close()


def test_a_boolean_token_count_is_not_one(server: ReplayServer) -> None:
    body = _body(ANTHROPIC, "first-attempt")
    body["usage"]["input_tokens"] = True
    server.exchanges = (RecordedExchange(MESSAGES, body),)
    leaf = _leaf("anthropic", server.url)
    with pytest.raises(LeafMalformedResponse, match="input_tokens"):
        leaf.complete("hi", model=leaf.model, max_tokens=5)
    leaf.close()


# --- fuzz: a mutated provider body is either read exactly or refused as malformed -----------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


def _mutated(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``base`` with one node replaced by arbitrary JSON, or deleted from its object."""

    def apply(path: tuple[Any, ...], value: Any, delete: bool) -> dict[str, Any]:
        body = copy.deepcopy(base)
        if not path:
            return value if isinstance(value, dict) else {"unexpected": value}
        node = body
        for key in path[:-1]:
            node = node[key]
        if delete and isinstance(node, dict):
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return body

    return st.builds(apply, st.sampled_from(_paths(base)), _JSON, st.booleans())


def _fuzz(server: ReplayServer, leaf: Leaf, endpoint: str, body: dict[str, Any]) -> None:
    server.exchanges = (RecordedExchange(endpoint, body),)
    try:
        answer = leaf.complete("hi", model=leaf.model, max_tokens=5)
    except LeafMalformedResponse:
        return
    except TraceboundError as exc:
        pytest.fail(f"a 200 body must be read or refused as malformed, not {exc!r}")
    # Read: the digest is of the bytes served, and the counts are the catalog's reading.
    assert answer.raw_digest_blake3 == blake3(json.dumps(body).encode()).hexdigest()
    usage = answer.usage
    assert usage.cached_input_tokens + usage.cache_write_input_tokens <= usage.input_tokens
    assert usage.cache_write_long_input_tokens <= usage.cache_write_input_tokens
    assert usage.reasoning_tokens <= usage.output_tokens


_FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture
def leaves(server: ReplayServer) -> Iterator[dict[str, Leaf]]:
    made = {kind: _leaf(kind, server.url) for kind in ("openai", "anthropic")}
    yield made
    for leaf in made.values():
        leaf.close()


@_FUZZ
@given(body=_mutated(_body(OPENAI, "retry-with-fenced-summary")))
def test_fuzzed_chat_completions(
    server: ReplayServer, leaves: dict[str, Leaf], body: dict[str, Any]
) -> None:
    _fuzz(server, leaves["openai"], CHAT, body)


@_FUZZ
@given(body=_mutated(_body(ANTHROPIC, "retry-with-fenced-summary")))
def test_fuzzed_messages(
    server: ReplayServer, leaves: dict[str, Leaf], body: dict[str, Any]
) -> None:
    _fuzz(server, leaves["anthropic"], MESSAGES, body)


def test_every_failure_is_a_leaf_call_failed() -> None:
    for cls in (
        LeafConnectionError,
        LeafTimeout,
        LeafStatusError,
        LeafRateLimited,
        LeafMalformedResponse,
    ):
        assert issubclass(cls, LeafCallFailed) and issubclass(cls, TraceboundError)
