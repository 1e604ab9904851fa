"""The strict unified-diff applier: exact or nothing, never outside the copy."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.pipeline.retry._patch import PatchError, apply_patch


def _diff(path: str, old: list[str], new: list[str], *, n: int = 3) -> str:
    lines = difflib.unified_diff(old, new, f"a/{path}", f"b/{path}", n=n)
    return "".join(lines)


def test_modify_create_delete_in_one_patch(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "gone.txt").write_text("bye\n")
    patch = (
        _diff("a.txt", ["one\n", "two\n", "three\n"], ["one\n", "2\n", "three\n", "four\n"])
        + "--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n"
        + "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    )
    applied = apply_patch(tmp_path, patch)
    assert (tmp_path / "a.txt").read_text() == "one\n2\nthree\nfour\n"
    assert (tmp_path / "pkg" / "new.py").read_text() == "x = 1\ny = 2\n"
    assert not (tmp_path / "gone.txt").exists()
    by_path = {f.path: f for f in applied.files}
    assert by_path["a.txt"].added_lines == (2, 4)
    assert by_path["pkg/new.py"].created and by_path["pkg/new.py"].added_lines == (1, 2)
    assert by_path["gone.txt"].deleted and by_path["gone.txt"].added_lines == ()


def test_no_newline_at_end_of_file_round_trips(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a\nb")
    patch = _diff("f", ["a\n", "b"], ["a\n", "c"]).replace(
        "\n-b+c", "\n-b\n\\ No newline at end of file\n+c"
    )
    patch += "\n\\ No newline at end of file\n"
    apply_patch(tmp_path, patch)
    assert (tmp_path / "f").read_bytes() == b"a\nc"


def test_crlf_files_keep_their_line_endings(tmp_path: Path) -> None:
    (tmp_path / "w.txt").write_bytes(b"x\r\ny\r\n")
    patch = "--- a/w.txt\n+++ b/w.txt\n@@ -1,2 +1,2 @@\n x\r\n-y\r\n+z\r\n"
    apply_patch(tmp_path, patch)
    assert (tmp_path / "w.txt").read_bytes() == b"x\r\nz\r\n"


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        ("--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-TWO\n+2\n", "does not match"),
        # right text, wrong place: a fuzzy applier would find it, this one must not
        ("--- a/a.txt\n+++ b/a.txt\n@@ -2,1 +2,1 @@\n-three\n+3\n", "does not match"),
        ("--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n", "holds"),
        ("--- a/../evil\n+++ b/../evil\n@@ -0,0 +1 @@\n+x\n", "'..'"),
        ("--- /dev/null\n+++ b//etc/passwd\n@@ -0,0 +1 @@\n+x\n", "relative"),
        ("--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+x\n", ".git"),
        ("--- a.txt\n+++ a.txt\n@@ -1 +1 @@\n-one\n+1\n", "must start with 'a/'"),
        ("--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n", "already exists"),
        ("--- a/missing\n+++ b/missing\n@@ -1 +1 @@\n-x\n+y\n", "does not exist"),
        ("--- a/a.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-one\n+1\n", "renames"),
        ("diff --git a/x b/x\nGIT binary patch\nliteral 0\n", "unsupported"),
        ("just some text\n", "no file patches"),
        ("--- a/a.txt\n+++ b/a.txt\n", "without hunks"),
        ("--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-one\n", "remove every line"),
    ],
)
def test_refuses_what_it_cannot_apply_exactly(tmp_path: Path, patch: str, reason: str) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    with pytest.raises(PatchError, match=reason):
        apply_patch(tmp_path, patch)
    assert (tmp_path / "a.txt").read_text() == "one\ntwo\nthree\n"


def test_all_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    (tmp_path / "b.txt").write_text("bee\n")
    good = _diff("a.txt", ["one\n"], ["1\n"])
    bad = _diff("b.txt", ["BEE\n"], ["b\n"])
    with pytest.raises(PatchError):
        apply_patch(tmp_path, good + bad)
    assert (tmp_path / "a.txt").read_text() == "one\n"


def test_never_writes_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text("keep\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(PatchError, match="symlink"):
        apply_patch(
            root, "--- a/link/target.txt\n+++ b/link/target.txt\n@@ -1 +1 @@\n-keep\n+gone\n"
        )
    assert (outside / "target.txt").read_text() == "keep\n"


def test_a_file_patched_twice_is_ambiguous(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    once = _diff("a.txt", ["one\n"], ["1\n"])
    with pytest.raises(PatchError, match="twice"):
        apply_patch(tmp_path, once + once)


_LINES = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "\n", "e f\n"]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(old=_LINES, new=_LINES, context=st.integers(0, 3))
def test_applies_any_difflib_diff_exactly(
    tmp_path_factory: pytest.TempPathFactory, old: list[str], new: list[str], context: int
) -> None:
    if old == new:
        return  # difflib writes nothing for equal inputs: there is no patch to apply
    root = tmp_path_factory.mktemp("prop")
    (root / "f.txt").write_text("".join(old))
    applied = apply_patch(root, _diff("f.txt", old, new, n=context))
    result = (root / "f.txt").read_text()
    assert result == "".join(new)
    added = set(applied.files[0].added_lines)
    # Every added line number points at a line of the new text, and the count matches
    # what difflib says was inserted.
    inserted = sum(
        j2 - j1
        for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new).get_opcodes()
        if tag in ("replace", "insert")
    )
    assert len(added) == inserted
    assert all(1 <= n <= len(new) for n in added)
