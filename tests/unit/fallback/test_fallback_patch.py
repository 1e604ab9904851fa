"""Unified diffs: written by recipes, dry-run for retrieved and model-written patches."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.pipeline.fallback import PatchRejected
from tracebound.pipeline.fallback.patch import (
    apply_patch,
    extract_patch,
    make_unified_diff,
    parse_patch,
)

_lines = st.lists(st.sampled_from(["a", "b", "c", "requests==1", "", "  x", "é"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(old=_lines, new=_lines, old_nl=st.booleans(), new_nl=st.booleans())
def test_diffs_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    old: list[str],
    new: list[str],
    old_nl: bool,
    new_nl: bool,
) -> None:
    old_text = "\n".join(old) + ("\n" if old and old_nl else "")
    new_text = "\n".join(new) + ("\n" if new and new_nl else "")
    if old_text == "" or old_text == new_text:
        return
    repo = tmp_path_factory.mktemp("repo")
    (repo / "f.txt").write_text(old_text)
    diff = make_unified_diff([("f.txt", old_text, new_text)])
    assert apply_patch(repo, diff) == {"f.txt": new_text}


def test_unchanged_files_are_left_out() -> None:
    assert make_unified_diff([("a", "x\n", "x\n")]) == ""


def test_hunks_apply_only_at_the_line_they_name(tmp_path: Path) -> None:
    # As strict as the verifying side's applier: no offset, no fuzz.
    (tmp_path / "r.txt").write_text("zero\none\ntwo\nthree\n")
    exact = "--- a/r.txt\n+++ b/r.txt\n@@ -2,2 +2,2 @@\n one\n-two\n+TWO\n"
    assert apply_patch(tmp_path, exact) == {"r.txt": "zero\none\nTWO\nthree\n"}
    moved = exact.replace("@@ -2,2 +2,2 @@", "@@ -1,2 +1,2 @@")
    with pytest.raises(PatchRejected, match="context"):
        apply_patch(tmp_path, moved)
    wrong = "--- a/r.txt\n+++ b/r.txt\n@@ -2,2 +2,2 @@\n uno\n-two\n+TWO\n"
    with pytest.raises(PatchRejected, match="context"):
        apply_patch(tmp_path, wrong)
    two_hunks = (
        "--- a/r.txt\n+++ b/r.txt\n@@ -1 +1,2 @@\n zero\n+half\n@@ -3,2 +4,2 @@\n two\n-three\n+3\n"
    )
    assert apply_patch(tmp_path, two_hunks) == {"r.txt": "zero\nhalf\none\ntwo\n3\n"}


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "/etc/passwd", "a/../../b", ".git/config", "dir\\file", ""],
)
def test_paths_must_stay_inside_the_repository(tmp_path: Path, path: str) -> None:
    patch = f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-x\n+y\n"
    with pytest.raises(PatchRejected):
        apply_patch(tmp_path, patch)


def test_symlinks_out_of_the_repository_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("x\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "link.txt").symlink_to(outside)
    with pytest.raises(PatchRejected, match="symlink"):
        apply_patch(repo, "--- a/link.txt\n+++ b/link.txt\n@@ -1 +1 @@\n-x\n+y\n")
    (repo / "real.txt").write_text("x\n")
    (repo / "inner").symlink_to(repo)  # even a link that stays inside is not followed
    with pytest.raises(PatchRejected, match="symlink"):
        apply_patch(repo, "--- a/inner/real.txt\n+++ b/inner/real.txt\n@@ -1 +1 @@\n-x\n+y\n")


def test_new_and_deleted_files(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("bye\n")
    patch = (
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n"
        "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    )
    assert apply_patch(tmp_path, patch) == {"new.txt": "hello\nworld\n", "old.txt": None}
    (tmp_path / "new.txt").write_text("exists\n")
    with pytest.raises(PatchRejected, match="already exists"):
        apply_patch(tmp_path, patch)


@pytest.mark.parametrize(
    "text",
    [
        "just prose",
        "--- a/x\nno plus line\n",
        "--- a/x\n+++ b/x\n@@ bogus @@\n",
        "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n",  # counts larger than the hunk
        "--- a/x\n+++ b/x\n",  # no hunks
    ],
)
def test_malformed_patches_are_rejected(text: str) -> None:
    with pytest.raises(PatchRejected):
        parse_patch(text)


def test_extract_patch_from_an_answer() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    assert extract_patch(f"Here you go:\n\n```diff\n{diff}```\nThanks") == diff
    assert extract_patch(diff) == diff
    assert extract_patch("```python\nprint(1)\n```") is None
    assert extract_patch("no diff here") is None


def test_extract_patch_takes_the_first_diff_block_in_linear_time() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    other = diff.replace("+b", "+c")
    answer = f"```diff\n{diff}```\n\n```diff\n{other}```\n"
    assert extract_patch(answer) == diff
    assert extract_patch(f"```diff\n{diff}") is None  # never closed: no block
    assert extract_patch(f"```diff\nnot a diff\n```\n```diff\n{diff}```\n") is None
    # An answer the provider made huge, with openers that never close: each used to
    # rescan the rest of the answer (quadratic; this size did not finish).
    assert extract_patch("a```diff\n" * 200_000) is None
