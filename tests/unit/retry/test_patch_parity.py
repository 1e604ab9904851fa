"""The tier's dry run and the gate's on-disk apply agree on every patch, to the byte.

The planning side (``fallback.patch.apply_patch``) proposes only patches that apply; the
verifying side (``retry._patch.apply_patch``) applies them in the sandbox. If the two ever
disagreed, the tier would propose patches the gate refuses (wasted attempts) or refuse
patches the gate would have accepted. Both are fed the same patches here, valid and each
kind of invalid, hand-written and generated.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.errors import TraceboundError
from tracebound.pipeline.fallback import PatchRejected
from tracebound.pipeline.fallback.patch import apply_patch as dry_run
from tracebound.pipeline.retry._patch import PatchError
from tracebound.pipeline.retry._patch import apply_patch as apply_on_disk

_BASE = "one\ntwo\nthree\n"


def _snapshot(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = f"-> {path.readlink()}"
        elif path.is_file():
            out[rel] = path.read_bytes()
        else:
            out[rel] = "<dir>"
    return out


def _outcome(
    root: Path, patch: str
) -> tuple[bool, dict[str, str | None] | str, dict[str, bytes | str]]:
    """Run both entry points on the same tree; assert they agree; return what happened."""
    before = _snapshot(root)
    try:
        planned = dict(dry_run(root, patch))
    except PatchRejected as exc:
        dry: dict[str, str | None] | str = exc.reason
    else:
        dry = planned
    assert _snapshot(root) == before, "the dry run wrote to the tree"
    refusal: PatchError | None = None
    try:
        applied = apply_on_disk(root, patch)
    except PatchError as exc:
        refusal = exc
    if refusal is not None:
        assert isinstance(dry, str), f"dry run accepted, gate refused: {refusal}"
        assert refusal.reason == dry, "both refuse, but for different reasons"
        assert _snapshot(root) == before, "a refused patch changed the tree"
        return False, dry, before
    assert isinstance(dry, dict), f"gate accepted, dry run refused: {dry}"
    assert [f.path for f in applied.files] == list(dry)
    for rel, content in dry.items():
        target = root / rel
        if content is None:
            assert not target.exists()
        else:
            assert target.read_bytes() == content.encode("utf-8")
    return True, dry, before


def test_one_error_type_for_both_sides() -> None:
    assert PatchError is PatchRejected
    assert issubclass(PatchRejected, TraceboundError)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "a.txt").write_text(_BASE)
    (root / "crlf.txt").write_bytes(b"x\r\ny\r\n")
    (root / "noeol.txt").write_bytes(b"a\nb")
    (root / "blank.txt").write_text("a\n\nb\n")
    (root / "pkg" / "m.py").write_text("x = 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "t.txt").write_text("keep\n")
    (root / "link").symlink_to(outside)
    (root / "inner").symlink_to(root / "pkg")  # a link that stays inside is refused too
    (root / "dangling").symlink_to(tmp_path / "nowhere.txt")
    return root


_ACCEPTED = [
    "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n+2\n",
    "--- a/a.txt\n+++ b/a.txt\n@@ -1,0 +2 @@\n+half\n",  # pure insertion after line 1
    "--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+a\n+b\n",
    "--- /dev/null\n+++ b/fresh/dir/new.txt\n@@ -0,0 +1 @@\n+x\n",
    "--- a/pkg/m.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n",
    "--- a/crlf.txt\n+++ b/crlf.txt\n@@ -1,2 +1,2 @@\n x\r\n-y\r\n+z\r\n",
    "--- a/noeol.txt\n+++ b/noeol.txt\n@@ -2 +2 @@\n-b\n\\ No newline at end of file\n+c\n",
    (
        "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\t2024-01-01\n+++ b/a.txt\n"
        "@@ -3 +3 @@ context\n-three\n+3\n"
    ),
    "--- a/blank.txt\n+++ b/blank.txt\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n",  # stripped blank context
]

_REFUSED = [
    # does not apply exactly
    "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-TWO\n+2\n",
    "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-two\n+2\n",  # right text, wrong line (no offset)
    "--- a/a.txt\n+++ b/a.txt\n@@ -2 +3 @@\n-two\n+2\n",  # wrong new-side line number
    "--- a/a.txt\n+++ b/a.txt\n@@ -0,1 +0,1 @@\n-one\n+1\n",  # line 0 is not line 1
    "--- a/a.txt\n+++ b/a.txt\n@@ -9,0 +4 @@\n+x\n",  # past the end of the file
    "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n+2\n@@ -1 +1 @@\n-one\n+1\n",  # out of order
    "--- a/crlf.txt\n+++ b/crlf.txt\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n",  # LF patch, CRLF file
    "--- a/noeol.txt\n+++ b/noeol.txt\n@@ -2 +2 @@\n-b\n+c\n",  # the file has no final newline
    "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n\\ No newline at end of file\n+1\n",
    "--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-one\n",  # partial deletion
    # malformed
    "just prose\n",
    "--- a/a.txt\nno plus line\n",
    "--- a/a.txt\n+++ b/a.txt\n",
    "--- a/a.txt\n+++ b/a.txt\n@@ bogus @@\n",
    "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n",  # counts too big
    "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n+2\n+extra\n",  # counts too small
    "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n\\ Pas de fin de ligne\n+2\n",
    "--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+x\n",
    "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n+2\n" * 2,  # patched twice
    "x" * (256 * 1024 + 1),
    # formats the applier does not speak
    "--- a.txt\n+++ a.txt\n@@ -2 +2 @@\n-two\n+2\n",  # no a/ b/ prefixes
    "--- a/a.txt\n+++ b/b.txt\n@@ -2 +2 @@\n-two\n+2\n",  # rename
    "diff --git a/a.txt b/c.txt\nrename from a.txt\nrename to c.txt\n",
    "diff --git a/x.bin b/x.bin\nGIT binary patch\nliteral 0\n",
    "Binary files a/x.bin and b/x.bin differ\n--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n+2\n",
    # paths
    "--- a/../evil\n+++ b/../evil\n@@ -0,0 +1 @@\n+x\n",
    "--- /dev/null\n+++ b//etc/passwd\n@@ -0,0 +1 @@\n+x\n",
    "--- /dev/null\n+++ b/./a2.txt\n@@ -0,0 +1 @@\n+x\n",
    "--- /dev/null\n+++ b/pkg//n.txt\n@@ -0,0 +1 @@\n+x\n",
    "--- /dev/null\n+++ b/pkg\\n.txt\n@@ -0,0 +1 @@\n+x\n",
    "--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+x\n",
    "--- /dev/null\n+++ b/pkg/.git/config\n@@ -0,0 +1 @@\n+x\n",
    "--- /dev/null\n+++ b/\n@@ -0,0 +1 @@\n+x\n",
    # symlinks, existence, file types
    "--- a/link/t.txt\n+++ b/link/t.txt\n@@ -1 +1 @@\n-keep\n+gone\n",
    "--- /dev/null\n+++ b/link/new.txt\n@@ -0,0 +1 @@\n+x\n",  # create through a link
    "--- a/inner/m.py\n+++ b/inner/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n",
    "--- /dev/null\n+++ b/dangling\n@@ -0,0 +1 @@\n+x\n",  # create over a dangling link
    "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n",  # create what exists
    "--- a/missing.txt\n+++ b/missing.txt\n@@ -1 +1 @@\n-x\n+y\n",
    "--- a/pkg\n+++ b/pkg\n@@ -1 +1 @@\n-x\n+y\n",  # a directory
    "--- /dev/null\n+++ b/a.txt/sub.txt\n@@ -0,0 +1 @@\n+x\n",  # parent is a file
    # all or nothing: the first file applies, the second does not
    (
        "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n+2\n"
        "--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-x = 0\n+x = 2\n"
    ),
    "--- /dev/null\n+++ b/z\n@@ -0,0 +1 @@\n+x\n--- /dev/null\n+++ b/z/y\n@@ -0,0 +1 @@\n+x\n",
]


@pytest.mark.parametrize("patch", _ACCEPTED)
def test_both_sides_accept_the_same_patches(tmp_path: Path, patch: str) -> None:
    accepted, result, _before = _outcome(_tree(tmp_path), patch)
    assert accepted, result


@pytest.mark.parametrize("patch", _REFUSED)
def test_both_sides_refuse_the_same_patches(tmp_path: Path, patch: str) -> None:
    accepted, result, _before = _outcome(_tree(tmp_path), patch)
    assert not accepted, result


_LINES = st.lists(
    st.sampled_from(["a\n", "b\n", "c\n", "\n", "e f\n", "x\r\n", "\x0c\n", "é\n"]), max_size=12
)


def _mutate(patch: str, kind: str, where: int) -> str:
    lines = patch.splitlines(keepends=True)
    if not lines:
        return patch
    k = where % len(lines)
    if kind == "drop_line":
        del lines[k]
    elif kind == "dup_line":
        lines.insert(k, lines[k])
    elif kind == "edit_line":
        lines[k] = lines[k][:1] + "Z" + lines[k][1:]
    elif kind == "crlf":
        return patch.replace("\n", "\r\n")
    elif kind == "shift_old":
        return patch.replace("@@ -", "@@ -1", 1)
    elif kind == "shift_new":
        return patch.replace(" +", " +1", 1)
    elif kind == "strip_prefixes":
        return patch.replace("--- a/", "--- ", 1).replace("+++ b/", "+++ ", 1)
    elif kind == "bad_path":
        return patch.replace("f.txt", ["../f.txt", ".git/f.txt", "./f.txt", "link/f"][k % 4])
    elif kind == "as_creation":
        return patch.replace("--- a/f.txt", "--- /dev/null", 1)
    elif kind == "as_deletion":
        return patch.replace("+++ b/f.txt", "+++ /dev/null", 1)
    elif kind == "no_eol_marker":
        lines.insert(k, "\\ No newline at end of file\n")
    return "".join(lines)


_MUTATIONS = st.sampled_from(
    [
        "none",
        "drop_line",
        "dup_line",
        "edit_line",
        "crlf",
        "shift_old",
        "shift_new",
        "strip_prefixes",
        "bad_path",
        "as_creation",
        "as_deletion",
        "no_eol_marker",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    old=_LINES,
    new=_LINES,
    old_eol=st.booleans(),
    context=st.integers(0, 3),
    kind=_MUTATIONS,
    where=st.integers(0, 1000),
)
def test_generated_patches_get_the_same_verdict(
    tmp_path_factory: pytest.TempPathFactory,
    old: list[str],
    new: list[str],
    old_eol: bool,
    context: int,
    kind: str,
    where: int,
) -> None:
    if old and not old_eol:
        old = [*old[:-1], old[-1].rstrip("\r\n") or "q"]
    if old == new:
        return
    root = tmp_path_factory.mktemp("parity")
    (root / "f.txt").write_bytes("".join(old).encode())
    (root / "link").symlink_to(root)
    lines = list(difflib.unified_diff(old, new, "a/f.txt", "b/f.txt", n=context))
    patch = "".join(
        line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines
    )
    accepted, result, _before = _outcome(root, _mutate(patch, kind, where))
    if kind == "none":
        assert accepted, result
        assert (root / "f.txt").read_bytes() == "".join(new).encode()
