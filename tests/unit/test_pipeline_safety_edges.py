"""Review findings in the safety layer's parts: path spellings, redaction evasions, contract
errors, and the attempt that must close with its anchor whatever its model did."""

from __future__ import annotations

import unicodedata
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.fence.fallback_kit import make_kit
from tests.integration.pipeline_kit import POLICY, diff, tpc

from tracebound.contract import validate_tpc
from tracebound.errors import ValidationFailed
from tracebound.pipeline.fallback.fence import FenceWrapper, build_attempt_summary
from tracebound.pipeline.fallback.leaf import LeafResponse
from tracebound.pipeline.fallback.recipes import RecipeBook
from tracebound.pipeline.policy import Policy, normalise_path, request_from_artifact
from tracebound.pipeline.redaction import CONFUSABLES, Redactor
from tracebound.pipeline.retry.models import FailingSignal
from tracebound.sources import SequentialIds

AWS = "AKIAIOSFODNN7EXAMPLE"
GHP = "ghp_" + "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xYz12"
REDACTOR = Redactor(b"review-pipeline-redaction-key-01")
POLICY_OBJ = Policy.from_dict(POLICY)


def gated_paths(**overrides: Any) -> tuple[tuple[str, ...], set[str]]:
    request = request_from_artifact("Executor", validate_tpc(tpc("Executor", **overrides)))
    return request.paths, {r.rule for r in POLICY_OBJ.evaluate(request)}


# -- policy: one spelling per path ------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "normal"),
    [
        ("./.github/workflows/ci.yml", ".github/workflows/ci.yml"),
        ("src/../.github/workflows/ci.yml", ".github/workflows/ci.yml"),
        (".github//workflows/./ci.yml", ".github/workflows/ci.yml"),
        (".github\\workflows\\ci.yml", ".github/workflows/ci.yml"),
        ("/.github/workflows/ci.yml", ".github/workflows/ci.yml"),
        ("requirements.txt", "requirements.txt"),
    ],
)
def test_every_spelling_of_a_sensitive_path_is_gated(spelling: str, normal: str) -> None:
    assert normalise_path(spelling) == normal
    for overrides in ({"diffs": [diff(spelling)]}, {"actions": [f"write:{spelling}"]}):
        paths, rules = gated_paths(**overrides)
        assert paths == (normal,) and rules == {"sensitive_paths"}


def test_git_quoted_renamed_and_copied_paths_are_seen() -> None:
    quoted = '--- "a/.github/workflows/c i.yml"\n+++ "b/.github/workflows/c i.yml"\n-x\n+y\n'
    assert gated_paths(diffs=[quoted]) == (
        (".github/workflows/c i.yml",),
        {"sensitive_paths"},
    )
    octal = '--- /dev/null\n+++ "b/.github/caf\\303\\251.yml"\n+y\n'
    assert gated_paths(diffs=[octal])[0] == (".github/café.yml",)
    rename = (
        "diff --git a/docs/x.yml b/.github/workflows/x.yml\nsimilarity index 100%\n"
        "rename from docs/x.yml\nrename to .github/workflows/x.yml\n"
    )
    paths, rules = gated_paths(diffs=[rename])
    assert ".github/workflows/x.yml" in paths and rules == {"sensitive_paths"}
    copy = (
        "diff --git a/a.txt b/requirements-dev.txt\ncopy from a.txt\ncopy to requirements-dev.txt\n"
    )
    assert gated_paths(diffs=[copy])[1] == {"sensitive_paths"}
    mode = "diff --git a/requirements.txt b/requirements.txt\nold mode 100644\nnew mode 100755\n"
    assert gated_paths(diffs=[mode]) == (("requirements.txt",), {"sensitive_paths"})


def test_a_case_variant_of_a_sensitive_path_is_gated() -> None:
    assert gated_paths(diffs=[diff(".GitHub/workflows/ci.yml")])[1] == {"sensitive_paths"}
    assert gated_paths(actions=["write:REQUIREMENTS.TXT"])[1] == {"sensitive_paths"}


def test_a_path_outside_the_root_is_always_gated() -> None:
    paths, rules = gated_paths(diffs=[diff("src/../../etc/cron.d/x")])
    assert paths == ("../etc/cron.d/x",) and "path_outside_root" in rules


def test_ordinary_paths_are_unchanged_and_ungated() -> None:
    assert gated_paths(diffs=[diff("src/app.py")]) == (("src/app.py",), set())
    assert gated_paths(diffs=["--- /dev/null\n+++ b/src/new.py\n+x\n"]) == (("src/new.py",), set())


# -- redaction: disguised secrets, and lists under a secret-named key -------------------

INVISIBLES = ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\ufeff", "\u202e", "\U000e0041"]


@settings(max_examples=200, deadline=None)
@given(
    secret=st.sampled_from([AWS, GHP]),
    cuts=st.lists(st.tuples(st.integers(1, 19), st.sampled_from(INVISIBLES)), max_size=3),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
)
def test_a_secret_with_invisible_characters_in_it_is_redacted(
    secret: str, cuts: list[tuple[int, str]], before: str, after: str
) -> None:
    disguised = secret
    for at, char in sorted(cuts, reverse=True):
        disguised = disguised[:at] + char + disguised[at:]
    text = f"{before} {disguised} {after}"
    out = REDACTOR.redact_text(text).value
    # What a prompt would show after FenceWrapper.sanitize must not hold the secret either.
    shown = FenceWrapper(SequentialIds()).sanitize(out).text
    assert secret not in shown
    assert REDACTOR.redact_text(out).redactions == ()  # still idempotent


@pytest.mark.parametrize(
    "disguised",
    [
        "".join(chr(ord(c) + 0xFEE0) if c.isalnum() else c for c in AWS),  # fullwidth
        AWS.replace("A", "\u0410", 1),  # Cyrillic A
        GHP.replace("a", "\u0430"),  # Cyrillic a
    ],
)
def test_fullwidth_and_lookalike_secrets_are_redacted(disguised: str) -> None:
    out = REDACTOR.redact_text(f"key: {disguised} end").value
    assert "[REDACTED:" in out
    seen = unicodedata.normalize("NFKC", out).translate(CONFUSABLES)
    assert AWS not in seen and GHP not in seen


def test_ascii_and_genuine_foreign_text_is_untouched() -> None:
    for text in ("plain words, nothing secret", "Привет, мир: ответ готов", "naïve café"):
        assert REDACTOR.redact_text(text).value == text


def test_a_list_under_a_secret_named_key_is_redacted() -> None:
    value = {
        "creds": {"api_key": ["abc123def456xyz", "zyx987wvu654tsr"]},
        "github_token": ("x9Y8z7W6v5U4",),
    }
    out = REDACTOR.redact(value).value
    assert all(v.startswith("[REDACTED:secret-keyword:") for v in out["creds"]["api_key"])
    assert out["github_token"][0].startswith("[REDACTED:")
    # A nested dict's own keys decide below it: an ordinary key keeps its value.
    assert REDACTOR.redact({"api_key": [{"name": "prod"}]}).value == {"api_key": [{"name": "prod"}]}


def test_a_disguised_secret_in_a_failing_signal_stays_out_of_the_summary() -> None:
    """Before the fix, gate output redacted first and sanitised second reassembled the key."""
    signal = FailingSignal(
        gate="tests",
        kind="test_failure",
        subject="tests/test_api.py::test_get",
        message=REDACTOR.redact_text("env leaked AKIA\u200dIOSFODNN7EXAMPLE here").value,
    )
    summary = build_attempt_summary(
        attempt_id=SequentialIds().new_id(),
        sandbox_run_id="sbx-1",
        failing_signals=[signal],
        fence=FenceWrapper(SequentialIds()),
    )
    assert AWS not in summary.prior_failure_summary


# -- the contract: every bad input is a typed error -------------------------------------


@pytest.mark.parametrize("bad", [Decimal("NaN"), Decimal("sNaN")])
def test_an_uncomparable_value_is_a_typed_error(bad: Decimal) -> None:
    with pytest.raises(ValidationFailed):
        validate_tpc(tpc("Planner", input_refs=["input://a", bad]))


# -- the attempt closes with its anchor, whatever the model leaf did ---------------------


class CrashingLeaf:
    """A leaf that does not translate its SDK's error into LeafCallFailed."""

    model = "o4-mini"

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        raise RuntimeError(f"provider SDK failure; prompt was {prompt[:20]}")


def test_a_crashing_leaf_is_a_refusal_closed_by_one_anchor(tmp_path: Path) -> None:
    kit = make_kit(tmp_path, leaf=CrashingLeaf(), retrieval=False, recipes=RecipeBook([]))
    try:
        available = kit.budget.available_usd
        plan = kit.tier.run(kit.ctx(), workflow_id="wf-crash")
        assert (plan.tag, plan.refusal_reason) == ("Refused", "leaf_error")
        assert plan.anchor.extras["phase4.leaf_error"] == "RuntimeError"
        kinds = kit.kinds("wf-crash")
        assert kinds[-1] == "attempt_anchor_recorded"
        assert kinds.count("attempt_anchor_recorded") == 1
        assert "budget_reconciled" in kinds
        assert kit.budget.available_usd == available  # the reservation was released
    finally:
        kit.close()
