"""ADR-0002 fence, end to end: injection strings in failing test output never reach the
prompt outside the fence.

Each attack in tests/fixtures/injection/corpus.txt is planted in parsed test output (a
``FailingSignal``'s subject and message), built into an ``AttemptSummary``, and fed to
attempt 2 of a real tier. The prompt is then parsed *independently of the fence code*:

* the text outside the fences is byte-identical to the prompt built from a benign failure,
  so nothing of the attack is outside;
* every line inside a fence is datamarked (starts with the mark, has no spaces);
* the only boundary lines are the tier's own, with this attempt's canary, correctly paired;
  nothing inside a fence contains a boundary token, ``<<<``/``>>>`` or a canary shape.

A second test sends the whole corpus through the OpenAI adapter to the loopback replay
server and checks the prompt the server actually received.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.fence.fallback_kit import LLM_FIXTURES, Kit, corpus, llm_patch, make_kit
from tracebound.integrations.llm import ReplayServer, ScriptedLeaf, load_exchanges
from tracebound.pipeline.fallback import (
    DATAMARK,
    PRIOR_ATTEMPTS_HEADER,
    FenceWrapper,
    PlanOutcome,
    RecipeBook,
    build_attempt_summary,
)
from tracebound.pipeline.retry.models import AttemptSummary, FailingSignal
from tracebound.sources import SequentialIds

ATTACKS = corpus()
BOUNDARY = re.compile(r"<<<TB-UNTRUSTED ([a-z][a-z0-9-]*) (BEGIN|END) (tbc-[a-z2-7]{24})>>>")


def test_the_corpus_is_big_and_varied() -> None:
    categories = {a.split("|", 1)[0] for a in ATTACKS}
    assert len(ATTACKS) >= 40
    assert {
        "override", "roleplay", "chat-token", "fence-forgery", "canary-forgery", "code-fence",
        "html", "markdown", "exfiltration", "unicode",
    } <= categories  # fmt: skip


def parse(prompt: str) -> tuple[list[str], list[tuple[str, list[str]]], str]:
    """Split a prompt into the lines outside fences and the fenced blocks."""
    canaries = {m[3] for m in BOUNDARY.finditer(prompt)}
    assert len(canaries) == 1, f"one canary per prompt, found {canaries}"
    (canary,) = canaries
    outside: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    current: tuple[str, list[str]] | None = None
    for line in prompt.split("\n"):
        m = BOUNDARY.fullmatch(line)
        if m and m[2] == "BEGIN":
            assert current is None, "nested BEGIN"
            current = (m[1], [])
        elif m:
            assert current is not None and current[0] == m[1], "END without its BEGIN"
            blocks.append(current)
            current = None
        elif current is not None:
            current[1].append(line)
        else:
            outside.append(line)
    assert current is None, "unterminated fence"
    return outside, blocks, canary


def check_contained(prompt: str, baseline: str) -> list[tuple[str, list[str]]]:
    outside, blocks, canary = parse(prompt)
    base_outside, base_blocks, base_canary = parse(baseline)
    assert canary == base_canary
    assert outside == base_outside, "text outside the fences differs from the benign prompt"
    assert [label for label, _ in blocks] == [label for label, _ in base_blocks]
    boundary_lines = [line for line in prompt.split("\n") if line.startswith("<<<")]
    assert len(boundary_lines) == 2 * len(blocks)
    assert all(BOUNDARY.fullmatch(line) for line in boundary_lines)
    for _, body in blocks:
        for line in body:
            assert line.startswith(DATAMARK) and " " not in line, line
            low = line.lower()
            assert "<<<" not in line and ">>>" not in line, line
            assert not re.search(r"tb[\W_]*untrusted", low), line
            assert canary not in low and not re.search(r"tbc[\W_]*[a-z2-7]{6}", low), line
    return blocks


def _summary(fence: FenceWrapper, attacks: list[str], attempt: int) -> AttemptSummary:
    signals = [
        FailingSignal(
            gate="tests",
            kind="test_failure",
            subject=f"tests/test_api.py::test_{i} {attack}"[:512],
            message=f"E   AssertionError: {attack}"[:1024],
            location="tests/test_api.py:12",
        )
        for i, attack in enumerate(attacks)
    ]
    return build_attempt_summary(
        attempt_id=UUID(int=attempt),
        sandbox_run_id=f"sbx-{attempt}",
        failing_signals=signals,
        fence=fence,
    )


def _attempt_two(root: Path, attacks: list[str], *, leaf: Any = None) -> tuple[Kit, PlanOutcome]:
    leaf = leaf or ScriptedLeaf(
        [(PRIOR_ATTEMPTS_HEADER, llm_patch("2.32.3")), (None, llm_patch("2.20.0"))]
    )
    kit = make_kit(root, leaf=leaf, recipes=RecipeBook([]))
    first = kit.tier.run(kit.ctx(), workflow_id="wf")
    # A separate fence instance summarises (as the verifying side would); the tier's fence
    # draws the canary from the ledger's ids, so both prompts below get the same canary.
    helper = FenceWrapper(SequentialIds(namespace=99))
    summaries = [
        _summary(helper, attacks[i : i + 6], n) for n, i in enumerate(range(0, len(attacks), 6))
    ]
    second = kit.tier.run(kit.ctx(), workflow_id="wf", attempt_index=1, prior_attempts=summaries)
    assert first.tag == second.tag == "AppliedFromLlm"
    return kit, second


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    kit, plan = _attempt_two(tmp_path_factory.mktemp("benign"), ["benign|assert 401 == 200"])
    yield plan.prompt or ""
    kit.close()


@pytest.mark.parametrize(
    "attack", ATTACKS, ids=[f"{i:02d}-{a.split('|')[0]}" for i, a in enumerate(ATTACKS)]
)
def test_attack_stays_inside_the_fence(tmp_path: Path, baseline: str, attack: str) -> None:
    payload = attack.split("|", 1)[1]
    kit, plan = _attempt_two(tmp_path, [payload])
    prompt = plan.prompt or ""
    blocks = check_contained(prompt, baseline)
    # Attempt 2's prompt demonstrably carries the fenced summary.
    prior = [body for label, body in blocks if label == "prior-attempt"]
    assert len(prior) == 1
    text = "\n".join(FenceWrapper.unmark(line) for line in prior[0])
    assert "failing signal(s) from sandbox run sbx-0" in text
    assert "tests/test_api.py::test_0" in text
    # The pattern layer neutralised something in every attack, and the anchor says so
    # whenever a marker reached the prompt.
    report = FenceWrapper(SequentialIds()).sanitize(payload)
    assert report.total >= 1, f"nothing neutralised in {payload!r}"
    if "[neutralised:" in text:
        assert int(plan.anchor.extras["phase4.fence_neutralised"]) >= 1
    kit.close()


def test_the_whole_corpus_over_http(tmp_path: Path, connections: list[Any]) -> None:
    from tracebound.integrations.llm import OpenAICompatibleLeaf

    payloads = [a.split("|", 1)[1] for a in ATTACKS]
    benign = ["benign|assert 401 == 200"] * len(payloads)
    with ReplayServer(load_exchanges(LLM_FIXTURES / "openai_remediation.json")) as server:
        leaf = OpenAICompatibleLeaf(
            server.url + "/v1", "sk-test-not-a-key", model="o4-mini", max_retries=0
        )
        kit, plan = _attempt_two(tmp_path / "attack", payloads, leaf=leaf)
        base_kit, base = _attempt_two(tmp_path / "benign", benign, leaf=leaf)
        wire = [r for r in server.requests if PRIOR_ATTEMPTS_HEADER in r.prompt]
        leaf.close()
    assert len(wire) == 2 and wire[0].prompt == plan.prompt  # what went over HTTP, exactly
    blocks = check_contained(wire[0].prompt, wire[1].prompt)
    assert sum(label == "prior-attempt" for label, _ in blocks) == -(-len(payloads) // 6)
    assert wire[0].answered_by == "retry-with-fenced-summary"
    assert int(plan.anchor.extras["phase4.fence_neutralised"]) >= len(payloads)
    assert connections and all(addr[0] in {"127.0.0.1", "::1"} for addr in connections)
    kit.close()
    base_kit.close()
    del base
