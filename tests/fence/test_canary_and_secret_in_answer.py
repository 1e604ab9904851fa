"""The model's answer is judged as the model wrote it: redaction must not hide a canary or
let a secret-bearing patch through with a marker in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fence.fallback_kit import Kit, llm_patch, make_kit
from tracebound.integrations.llm import ScriptedLeaf
from tracebound.pipeline.fallback import DATAMARK, FenceWrapper, RecipeBook
from tracebound.pipeline.fallback.fence import CANARY_PATTERN
from tracebound.pipeline.fallback.leaf import LeafResponse
from tracebound.sources import SequentialIds

AWS = "AKIAIOSFODNN7EXAMPLE"
_CYRILLIC = str.maketrans("aceopxy", "\u0430\u0441\u0435\u043e\u0440\u0445\u0443")


class Echo(ScriptedLeaf):
    """Answers with ``template``, filled with this attempt's canary and a valid patch."""

    def __init__(self, template: str) -> None:
        super().__init__([])
        self.template = template

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        match = re.search(CANARY_PATTERN, prompt)
        assert match is not None
        answer = self.template.format(canary=match.group(0), patch=llm_patch("2.20.0"))
        self._script = ((None, answer),)
        return super().complete(prompt, model=model, max_tokens=max_tokens)


def _kit(tmp_path: Path, leaf: ScriptedLeaf) -> Kit:
    return make_kit(tmp_path, leaf=leaf, retrieval=False, recipes=RecipeBook([]))


@pytest.mark.parametrize(
    "template",
    [
        "{patch}\ntoken: {canary}\n",  # the redactor took the canary for a credential
        "{patch}\nAuthorization: Bearer {canary}\n",
        "{patch}\napi_key={canary}\n",
    ],
)
def test_a_canary_the_redactor_would_hide_is_still_caught(tmp_path: Path, template: str) -> None:
    kit = _kit(tmp_path, Echo(template))
    try:
        plan = kit.tier.run(kit.ctx(), workflow_id="wf")
        assert (plan.tag, plan.refusal_reason) == ("Refused", "canary_leaked")
        assert kit.kinds("wf").count("attempt_anchor_recorded") == 1
    finally:
        kit.close()


def _disguises(canary: str) -> dict[str, str]:
    return {
        "datamarks": DATAMARK.join(canary),
        "look-alikes": canary.translate(_CYRILLIC),
        "combining marks": "".join(ch + "\u0308" for ch in canary),
        "look-alikes, spaced": " ".join(canary.translate(_CYRILLIC).upper()),
    }


@pytest.mark.parametrize("name", list(_disguises("tbc-x")))
def test_leaked_sees_through_disguises(name: str) -> None:
    canary = FenceWrapper(SequentialIds()).new_canary()
    assert FenceWrapper.leaked(f"here: {_disguises(canary)[name]} done", canary)
    assert not FenceWrapper.leaked(f"here: {canary[:-1]} done", canary)


def test_an_llm_patch_carrying_a_secret_is_refused_not_applied_redacted(tmp_path: Path) -> None:
    patch = (
        "```diff\n--- a/requirements.txt\n+++ b/requirements.txt\n@@ -1,3 +1,4 @@\n"
        " flask==2.0.1\n-requests==2.19.1\n+requests==2.20.0\n"
        f"+# aws_access_key_id = {AWS}\n urllib3==1.23\n```\n"
    )
    kit = _kit(tmp_path, ScriptedLeaf([(None, patch)], model="o4-mini"))
    try:
        plan = kit.tier.run(kit.ctx(), workflow_id="wf")
        assert (plan.tag, plan.refusal_reason, plan.patch) == (
            "Refused",
            "patch_contains_secret",
            None,
        )
        assert "transform_built" not in kit.kinds("wf")
        assert AWS not in str(plan.anchor.model_dump())
    finally:
        kit.close()
