"""Provider adapters over real HTTP to the loopback replay server, with recorded bodies.

The provider is replaced only at the HTTP boundary: the SDKs build and send real requests
and parse the recorded JSON bodies in tests/fixtures/llm/. No socket may leave loopback
(the autouse guard in conftest.py); one test proves the guard bites.
"""

from __future__ import annotations

import json
import socket
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import anthropic
import openai
import pytest
from anthropic import _models as anthropic_models
from blake3 import blake3
from openai import _models as openai_models
from tests.fence.fallback_kit import LLM_FIXTURES, make_kit

from tracebound.errors import ConfigError
from tracebound.events.catalog import LeafReturned
from tracebound.integrations.llm import (
    AnthropicLeaf,
    LeafCallFailed,
    LeafMalformedResponse,
    OpenAICompatibleLeaf,
    RecordedExchange,
    ReplayServer,
    ScriptedLeaf,
    load_exchanges,
)
from tracebound.integrations.llm.anthropic_leaf import _token_usage as _anthropic_usage
from tracebound.integrations.llm.openai_leaf import _token_usage as _openai_usage
from tracebound.pipeline.fallback import (
    PRIOR_ATTEMPTS_HEADER,
    FenceWrapper,
    ModelPrice,
    RecipeBook,
    TokenUsage,
    build_attempt_summary,
)
from tracebound.pipeline.retry.models import FailingSignal

OPENAI = load_exchanges(LLM_FIXTURES / "openai_remediation.json")
ANTHROPIC = load_exchanges(LLM_FIXTURES / "anthropic_remediation.json")
ERRORS = load_exchanges(LLM_FIXTURES / "errors.json")


def _body(exchanges: list[RecordedExchange], name: str) -> dict[str, Any]:
    return dict(next(e for e in exchanges if e.name == name).response)


def _served_digest(exchanges: list[RecordedExchange], name: str) -> str:
    return blake3(json.dumps(_body(exchanges, name)).encode()).hexdigest()


@pytest.fixture
def server() -> Any:
    with ReplayServer([*ERRORS, *OPENAI, *ANTHROPIC]) as s:
        yield s


def test_openai_usage_mapping_and_request_shape(server: ReplayServer) -> None:
    leaf = OpenAICompatibleLeaf(
        server.url + "/v1", "sk-test-not-a-key", model="o4-mini", max_retries=0
    )
    answer = leaf.complete(f"x {PRIOR_ATTEMPTS_HEADER} y", model="o4-mini", max_tokens=512)
    usage = _body(OPENAI, "retry-with-fenced-summary")["usage"]
    assert answer.usage.input_tokens == usage["prompt_tokens"] == 1873
    assert answer.usage.cached_input_tokens == usage["prompt_tokens_details"]["cached_tokens"]
    assert answer.usage.output_tokens == usage["completion_tokens"]
    assert answer.usage.reasoning_tokens == usage["completion_tokens_details"]["reasoning_tokens"]
    assert answer.model == "o4-mini-2025-04-16"
    assert answer.raw_digest_blake3 == _served_digest(OPENAI, "retry-with-fenced-summary")
    assert "+requests==2.32.3" in answer.text
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test-not-a-key"
    assert request.body["messages"] == [{"role": "user", "content": f"x {PRIOR_ATTEMPTS_HEADER} y"}]
    assert request.body["max_completion_tokens"] == 512 and request.body["model"] == "o4-mini"
    leaf.close()


def test_openai_compatible_servers_may_want_max_tokens(server: ReplayServer) -> None:
    leaf = OpenAICompatibleLeaf(
        server.url + "/v1", "k", model="o4-mini", max_retries=0, token_limit_param="max_tokens"
    )
    leaf.complete("first", model="o4-mini", max_tokens=7)
    assert server.requests[-1].body["max_tokens"] == 7
    assert "max_completion_tokens" not in server.requests[-1].body
    leaf.close()


def test_anthropic_usage_mapping_cached_is_part_of_input(server: ReplayServer) -> None:
    leaf = AnthropicLeaf(
        "sk-ant-test-not-a-key", model="claude-sonnet-4", base_url=server.url, max_retries=0
    )
    first = leaf.complete("first attempt", model="claude-sonnet-4", max_tokens=256)
    # input_tokens 47 + cache_creation 1536 + cache_read 0: all of it is input.
    assert (first.usage.input_tokens, first.usage.cached_input_tokens) == (47 + 1536, 0)
    assert first.usage.cache_write_input_tokens == 1536 and first.usage.output_tokens == 88
    retry = leaf.complete(PRIOR_ATTEMPTS_HEADER, model="claude-sonnet-4", max_tokens=256)
    assert (retry.usage.input_tokens, retry.usage.cached_input_tokens) == (212 + 1536, 1536)
    assert retry.usage.cache_write_input_tokens == 0
    assert retry.raw_digest_blake3 == _served_digest(ANTHROPIC, "retry-with-fenced-summary")
    request = server.requests[-1]
    assert request.path == "/v1/messages" and request.body["max_tokens"] == 256
    assert request.body["messages"] == [{"role": "user", "content": PRIOR_ATTEMPTS_HEADER}]
    leaf.close()


def _serve_usage(server: ReplayServer, endpoint: str, body: dict[str, Any]) -> None:
    server.exchanges = (RecordedExchange(endpoint, body),)


def test_anthropic_one_hour_cache_writes_are_kept_apart(server: ReplayServer) -> None:
    """The 1-hour cache's writes cost 2x input against 1.25x for 5 minutes; the adapter
    read only the total, so no pricing table could charge them right."""
    body = _body(ANTHROPIC, "first-attempt")
    body["usage"] = {
        **body["usage"],
        "cache_creation_input_tokens": 1536,
        "cache_creation": {"ephemeral_5m_input_tokens": 512, "ephemeral_1h_input_tokens": 1024},
    }
    _serve_usage(server, "/v1/messages", body)
    leaf = AnthropicLeaf("k", model="claude-sonnet-4", base_url=server.url, max_retries=0)
    usage = leaf.complete("hi", model="claude-sonnet-4", max_tokens=256).usage
    assert (usage.cache_write_input_tokens, usage.cache_write_long_input_tokens) == (1536, 1024)
    body["usage"]["cache_creation"] = {
        "ephemeral_5m_input_tokens": 512,
        "ephemeral_1h_input_tokens": 512,
    }
    _serve_usage(server, "/v1/messages", body)
    with pytest.raises(LeafMalformedResponse, match="512 5-minute and 512 1-hour"):
        leaf.complete("hi", model="claude-sonnet-4", max_tokens=256)
    leaf.close()


def test_openai_cache_writes_are_read(server: ReplayServer) -> None:
    body = _body(OPENAI, "first-attempt")
    body["usage"] = {
        **body["usage"],
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 1024},
    }
    _serve_usage(server, "/v1/chat/completions", body)
    leaf = OpenAICompatibleLeaf(server.url + "/v1", "k", model="o4-mini", max_retries=0)
    usage = leaf.complete("hi", model="o4-mini", max_tokens=512).usage
    assert usage.cache_write_input_tokens == 1024 and usage.input_tokens == 1391
    leaf.close()


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ("TRIGGER-RATE-LIMIT", "RateLimitError"),
        ("TRIGGER-NO-USAGE", "no usage block"),
        ("TRIGGER-NO-CHOICES", "unusable chat completion"),
    ],
)
def test_openai_failures_are_typed(server: ReplayServer, prompt: str, message: str) -> None:
    leaf = OpenAICompatibleLeaf(server.url + "/v1", "k", model="o4-mini", max_retries=0)
    with pytest.raises(LeafCallFailed, match=message):
        leaf.complete(prompt, model="o4-mini", max_tokens=10)
    leaf.close()


def test_anthropic_failure_is_typed(server: ReplayServer) -> None:
    leaf = AnthropicLeaf("k", model="claude-sonnet-4", base_url=server.url, max_retries=0)
    with pytest.raises(LeafCallFailed, match=r"529|[Oo]verloaded"):
        leaf.complete("TRIGGER-OVERLOADED", model="claude-sonnet-4", max_tokens=10)
    leaf.close()


def test_unmatched_prompt_is_a_404_and_a_typed_failure() -> None:
    with ReplayServer(ERRORS) as server:
        leaf = OpenAICompatibleLeaf(server.url + "/v1", "k", model="o4-mini", max_retries=0)
        with pytest.raises(LeafCallFailed, match="NotFound"):
            leaf.complete("nothing matches this", model="o4-mini", max_tokens=10)
        assert server.requests[-1].answered_by is None
        leaf.close()


# --- the network guard --------------------------------------------------------------------


def test_the_guard_refuses_anything_but_loopback(connections: list[Any]) -> None:
    with pytest.raises(ConnectionRefusedError, match="loopback only"):
        socket.create_connection(("203.0.113.7", 443), timeout=1)
    sock = socket.socket()
    try:
        with pytest.raises(ConnectionRefusedError, match="loopback only"):
            sock.connect(("api.openai.com", 443))
    finally:
        sock.close()
    leaf = OpenAICompatibleLeaf(
        "https://203.0.113.7/v1", "k", model="o4-mini", max_retries=0, timeout=2
    )
    with pytest.raises(LeafCallFailed, match="Connection"):
        leaf.complete("hi", model="o4-mini", max_tokens=1)
    leaf.close()
    assert ("203.0.113.7", 443) in connections


def test_adapters_only_ever_reach_loopback(server: ReplayServer, connections: list[Any]) -> None:
    OpenAICompatibleLeaf(server.url + "/v1", "k", model="o4-mini", max_retries=0).complete(
        "first", model="o4-mini", max_tokens=5
    )
    AnthropicLeaf("k", model="claude-sonnet-4", base_url=server.url, max_retries=0).complete(
        "first", model="claude-sonnet-4", max_tokens=5
    )
    assert connections
    assert all(address[0] in {"127.0.0.1", "::1", "localhost"} for address in connections)


def test_the_scripted_double_makes_no_connection(connections: list[Any]) -> None:
    ScriptedLeaf([(None, "x")]).complete("p", model="m", max_tokens=5)
    assert connections == []


def test_replay_server_is_loopback_only_and_fixtures_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="loopback"):
        ReplayServer([], host="0.0.0.0")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "exchanges"}')
    with pytest.raises(ConfigError, match="recorded-exchanges"):
        load_exchanges(bad)
    assert len(load_exchanges(LLM_FIXTURES)) == len(OPENAI) + len(ANTHROPIC) + len(ERRORS)


# --- the tier over HTTP: ADR-0002's exit criterion ---------------------------------------------


def test_the_tier_charges_one_hour_cache_writes_at_their_rate(tmp_path: Path) -> None:
    """Through the tier: the anchor keeps both cache-write counts and the attempt's cost
    prices each class once, the 1-hour writes at the long rate."""
    body = _body(ANTHROPIC, "first-attempt")
    body["usage"] = {
        "input_tokens": 47,
        "cache_creation_input_tokens": 1536,
        "cache_read_input_tokens": 0,
        "output_tokens": 88,
        "cache_creation": {"ephemeral_5m_input_tokens": 512, "ephemeral_1h_input_tokens": 1024},
    }
    price = ModelPrice(
        input_per_mtok=Decimal("3.00"),
        cached_input_per_mtok=Decimal("0.30"),
        output_per_mtok=Decimal("15.00"),
        cache_write_per_mtok=Decimal("3.75"),
        cache_write_long_per_mtok=Decimal("6.00"),
    )
    with ReplayServer([RecordedExchange("/v1/messages", body)]) as server:
        leaf = AnthropicLeaf("k", model="claude-sonnet-4", base_url=server.url, max_retries=0)
        kit = make_kit(
            tmp_path, leaf=leaf, recipes=RecipeBook([]), prices={"claude-sonnet-4": price}
        )
        plan = kit.tier.run(kit.ctx(), workflow_id="wf")
        leaf.close()
    anchor = plan.anchor
    assert anchor.extras["phase4.cache_write_input_tokens"] == "1536"
    assert anchor.extras["phase4.cache_write_long_input_tokens"] == "1024"
    expected = (47 * 3 + 512 * Decimal("3.75") + 1024 * 6 + 88 * 15) / Decimal(1_000_000)
    assert anchor.cost_usd == expected


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_retry_prompt_carries_the_summary_and_yields_a_different_patch(
    tmp_path: Path, provider: str
) -> None:
    exchanges = OPENAI if provider == "openai" else ANTHROPIC
    with ReplayServer(exchanges) as server:
        leaf: OpenAICompatibleLeaf | AnthropicLeaf
        if provider == "openai":
            leaf = OpenAICompatibleLeaf(server.url + "/v1", "k", model="o4-mini", max_retries=0)
        else:
            leaf = AnthropicLeaf("k", model="claude-sonnet-4", base_url=server.url, max_retries=0)
        kit = make_kit(tmp_path, leaf=leaf, recipes=RecipeBook([]))
        first = kit.tier.run(kit.ctx(), workflow_id="wf")
        signal = FailingSignal(
            gate="tests",
            kind="test_failure",
            subject="tests/test_api.py::test_session_redirect",
            message="AssertionError: Authorization header sent on https->http redirect",
        )
        summary = build_attempt_summary(
            attempt_id=first.attempt_id,
            sandbox_run_id="sbx-1",
            failing_signals=[signal],
            fence=kit.fence,
        )
        second = kit.tier.run(
            kit.ctx(), workflow_id="wf", attempt_index=1, prior_attempts=[summary]
        )
        prompts = [r.prompt for r in server.requests]
        leaf.close()
    assert first.tag == second.tag == "AppliedFromLlm"
    assert first.patch_blake3 != second.patch_blake3
    assert prompts == [first.prompt, second.prompt]
    assert PRIOR_ATTEMPTS_HEADER not in prompts[0] and PRIOR_ATTEMPTS_HEADER in prompts[1]
    fenced = FenceWrapper.unmark(
        next(line for line in prompts[1].split("\n") if "test_session_redirect" in line)
    )
    assert fenced.startswith("- [tests] test_failure tests/test_api.py::test_session_redirect")
    assert [r.answered_by for r in server.requests] == [
        "first-attempt",
        "retry-with-fenced-summary",
    ]
    returned = [e.payload for e in kit.events("wf") if isinstance(e.payload, LeafReturned)]
    assert returned[1].response_digest_blake3 == _served_digest(
        exchanges, "retry-with-fenced-summary"
    )
    assert second.anchor.response_digest_blake3 == returned[1].response_digest_blake3
    price = kit.tier._pricing.price(leaf.model)
    usage = returned[1]
    expected = (
        (usage.tokens_in - usage.cached_input_tokens) * price.input_per_mtok
        + usage.cached_input_tokens * price.cached_input_per_mtok
        + usage.tokens_out * price.output_per_mtok
    ) / Decimal(1_000_000)
    assert second.anchor.cost_usd == expected
    assert second.anchor.attempt_id != first.anchor.attempt_id != UUID(int=0)
    kit.close()


# --- usage as the oldest supported SDKs parse it ------------------------------------------------


class _Anthropic034Usage(anthropic_models.BaseModel):
    """``anthropic.types.Usage`` as anthropic 0.34 (the oldest pyproject allows) declares it:
    no cache fields. The SDK keeps a field it does not declare as the raw JSON (a block is a
    dict), and one the body omits is no attribute at all."""

    input_tokens: int
    output_tokens: int


class _OpenAI140Usage(openai_models.BaseModel):
    """``openai.types.CompletionUsage`` as openai 1.40 declares it: no details blocks."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def test_usage_is_read_as_the_oldest_supported_sdks_give_it() -> None:
    """With anthropic 0.34 every answer that wrote to the cache was refused as malformed
    (the 5-minute/1-hour breakdown came as a dict, read as 0 + 0 writes), and one without the
    cache fields too (no attribute); with openai 1.40 every answer was refused (no
    prompt_tokens_details attribute, or a dict without .cached_tokens)."""
    anthropic_body: dict[str, Any] = {
        "input_tokens": 47,
        "cache_creation_input_tokens": 1536,
        "cache_read_input_tokens": 100,
        "output_tokens": 88,
        "cache_creation": {"ephemeral_5m_input_tokens": 512, "ephemeral_1h_input_tokens": 1024},
    }
    expected = TokenUsage(
        input_tokens=47 + 100 + 1536,
        cached_input_tokens=100,
        cache_write_input_tokens=1536,
        cache_write_long_input_tokens=1024,
        output_tokens=88,
    )
    assert _anthropic_usage(_Anthropic034Usage.construct(**anthropic_body)) == expected
    assert _anthropic_usage(anthropic.types.Usage.construct(**anthropic_body)) == expected
    bare = _Anthropic034Usage.construct(input_tokens=5, output_tokens=3)
    assert _anthropic_usage(bare) == TokenUsage(input_tokens=5, output_tokens=3)

    openai_body: dict[str, Any] = {
        "prompt_tokens": 1873,
        "completion_tokens": 300,
        "total_tokens": 2173,
        "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 512},
        "completion_tokens_details": {"reasoning_tokens": 200},
    }
    expected = TokenUsage(
        input_tokens=1873,
        cached_input_tokens=1024,
        cache_write_input_tokens=512,
        output_tokens=300,
        reasoning_tokens=200,
    )
    assert _openai_usage(_OpenAI140Usage.construct(**openai_body)) == expected
    assert _openai_usage(openai.types.CompletionUsage.construct(**openai_body)) == expected
    bare_openai = _OpenAI140Usage.construct(prompt_tokens=5, completion_tokens=3, total_tokens=8)
    assert _openai_usage(bare_openai) == TokenUsage(input_tokens=5, output_tokens=3)


def test_a_cache_breakdown_that_is_not_counts_is_malformed() -> None:
    bad = _Anthropic034Usage.construct(
        input_tokens=1,
        output_tokens=1,
        cache_creation_input_tokens=2,
        cache_creation={"ephemeral_5m_input_tokens": "2", "ephemeral_1h_input_tokens": 0},
    )
    with pytest.raises(TypeError, match="ephemeral_5m_input_tokens is not a token count"):
        _anthropic_usage(bad)
