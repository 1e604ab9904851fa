"""Every code example in README.md and docs/*.md (not docs/adr/) runs here, or says why not.

The conventions the documents follow:

* **What runs.** A ```python block runs in a Python interpreter; a ```bash or ```sh block
  runs through bash; in a ```console block the lines starting with ``$ `` run (the others
  are output, not compared). ``tracebound`` and ``python`` are this venv's.
* **Sessions.** A document is one session, as for a reader following the page: its blocks
  run in document order in one fresh working directory, with a fresh HOME (keys, witness)
  and no ``TRACEBOUND_*`` variable set. Files carry over from block to block; shell
  variables do not (each shell block is its own bash). A document's Python blocks share one
  interpreter and namespace, like notebook cells: a later block may use what an earlier
  one defined. Once a block fails, the document's later blocks are not run (and fail).
* **Shell semantics.** ``set -euo pipefail``: the first failing command fails the block,
  naming its line. A command that is documented to fail says so in its trailing comment:
  ``# ... exit N`` makes N the exit code it must have (and any other a failure).
* **Files.** ```python file=NAME (any language) writes the block to NAME in the session's
  directory instead of running it.
* **Exemptions** are visible in the document: ``<!-- docs-test: skip (reason) -->`` on the
  line right before a fence skips that block, ``<!-- docs-test: skip-document (reason) -->``
  the whole document. A reason is required, and one that says ``covered by tests/PATH``
  (``::NAME``) must name a test that exists.
* **Not code.** Every fence has a language. ``text``, ``toml`` and the like are not run. A
  ```json block is parsed (one document, or JSON Lines) unless it elides with ``…``.
* **Offline.** Every Python process a block starts (the CLI too) may connect only to
  loopback addresses: a ``sitecustomize`` on PYTHONPATH refuses anything else.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs_kit import COVERED, DOCUMENTS, ROOT, Block, parse

RUNNABLE = {"python", "bash", "sh", "console"}
NOT_CODE = {"text", "json", "toml", "yaml", "ini", "diff", "sql"}  # sql needs a server
TIMEOUT = 300  # a hung example fails instead of blocking the suite; not a speed assertion

EXPECTED_EXIT = re.compile(r"\bexit (\d+)\b")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")

PARSED = {path.relative_to(ROOT).as_posix(): parse(path) for path in DOCUMENTS}
BLOCKS = [block for blocks, _ in PARSED.values() for block in blocks]
MARKERS = [marker for _, markers in PARSED.values() for marker in markers]


def runs(block: Block) -> bool:
    return block.lang in RUNNABLE and block.skip is None


# A test per block that runs or is JSON that can be parsed. Exempt blocks are not pytest
# skips: their reasons are in the documents, where the marker tests below check them, so
# the suite's report lists no skipped test that a reader would have to look into.
SKIPPED_DOCUMENTS = {m.doc: m.reason or "" for m in MARKERS if m.kind == "skip-document"}
CHECKED = [
    b
    for b in BLOCKS
    if b.doc not in SKIPPED_DOCUMENTS
    and b.skip is None
    and (b.lang in RUNNABLE or (b.lang == "json" and "…" not in b.body))
]


# -- running a session -----------------------------------------------------------------------

# Installed on PYTHONPATH for every Python process a block starts: only loopback sockets.
SITECUSTOMIZE = """
import ipaddress, socket

def _loopback(host):
    if host is None or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False

def _guard(original):
    def connect(self, address):
        if isinstance(address, tuple) and not _loopback(address[0]):
            raise ConnectionRefusedError(f"docs examples run offline; {address!r} refused")
        return original(self, address)
    return connect

_getaddrinfo = socket.getaddrinfo

def getaddrinfo(host, *args, **kwargs):
    if not _loopback(host.decode() if isinstance(host, bytes) else host):
        raise socket.gaierror(f"docs examples run offline; {host!r} not resolved")
    return _getaddrinfo(host, *args, **kwargs)

socket.socket.connect = _guard(socket.socket.connect)
socket.socket.connect_ex = _guard(socket.socket.connect_ex)
socket.getaddrinfo = getaddrinfo
"""

# One interpreter per session: it runs each Python block it is sent in one namespace, with
# stdout and stderr going to the block's log, and answers with whether the block succeeded.
KERNEL = r"""
import json, os, sys, traceback
requests = os.fdopen(os.dup(0))
reply = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
namespace = {"__name__": "__main__"}
for request in map(json.loads, requests):
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    saved = os.dup(1), os.dup(2)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    ok = True
    try:
        source = "\n" * request["offset"] + request["code"]
        exec(compile(source, request["filename"], "exec"), namespace)
    except SystemExit as stop:
        ok = stop.code in (None, 0)
        if not ok:
            traceback.print_exc()
    except BaseException:
        ok = False
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, saved_fd in zip((1, 2), saved):
        os.dup2(saved_fd, fd)
        os.close(saved_fd)
    reply.write(json.dumps(ok) + "\n")
    reply.flush()
"""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    detail: str = ""


class Session:
    """One document's blocks, run in order in one directory."""

    def __init__(self, root: Path) -> None:
        self.work = root / "work"
        self.scratch = root / "scratch"  # scripts and logs, kept out of the reader's cwd
        for folder in (self.work, self.scratch, root / "home", root / "tmp", root / "site"):
            folder.mkdir(parents=True)
        (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
        env = {k: v for k, v in env.items() if "proxy" not in k.lower()}
        env.update(
            HOME=str(root / "home"),
            TMPDIR=str(root / "tmp"),
            PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            PYTHONPATH=str(root / "site"),
            NO_COLOR="1",
            COLUMNS="100",
        )
        self.env = env
        self.kernel: subprocess.Popen[str] | None = None

    def run(self, block: Block) -> Outcome:
        if block.file is not None:
            (self.work / block.file).write_text(block.body, encoding="utf-8")
            return Outcome(ok=True)
        if block.lang == "python":
            return self._python(block)
        return self._shell(block)

    def close(self) -> None:
        if self.kernel is not None:
            assert self.kernel.stdin is not None
            self.kernel.stdin.close()
            try:
                self.kernel.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kernel.kill()
                self.kernel.wait()

    def _python(self, block: Block) -> Outcome:
        if self.kernel is None:
            self.kernel = subprocess.Popen(
                [sys.executable, "-c", KERNEL], cwd=self.work, env=self.env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
        assert self.kernel.stdin is not None and self.kernel.stdout is not None
        log = self.scratch / f"block-{block.index}.log"
        request = {
            "code": block.body,
            "offset": block.line,  # so a traceback names the line in the document
            "filename": str(ROOT / block.doc),
            "log": str(log),
        }
        self.kernel.stdin.write(json.dumps(request) + "\n")
        self.kernel.stdin.flush()
        ready, _, _ = select.select([self.kernel.stdout], [], [], TIMEOUT)
        answer = self.kernel.stdout.readline() if ready else ""
        output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        if not answer:
            self.kernel.kill()
            return Outcome(False, f"the interpreter died or hung (>{TIMEOUT}s)\n{output}")
        return Outcome(bool(json.loads(answer)), output)

    def _shell(self, block: Block) -> Outcome:
        script, doc_lines = shell_script(block)
        path = self.scratch / f"block-{block.index}.sh"
        path.write_text(script, encoding="utf-8")
        try:
            proc = subprocess.run(
                ["bash", str(path)], cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=TIMEOUT, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return Outcome(False, f"the block hung (>{TIMEOUT}s)")
        if proc.returncode == 0:
            return Outcome(ok=True)
        failed = re.search(r"^docs-test: failed at (\d+) with (\d+)$", proc.stderr, re.M)
        where = "the block"
        if failed is not None:
            line = doc_lines[int(failed.group(1)) - 1]
            where = f"line {line} ({_line_of(block, line)!r}) exited {failed.group(2)}"
            if "the document says exit" in proc.stderr:
                where += ", not the exit code its comment documents"
        return Outcome(False, f"{where}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")


def _line_of(block: Block, line: int) -> str:
    body = block.body.splitlines()
    return body[line - block.line - 1].strip() if 0 < line - block.line <= len(body) else ""


def shell_script(block: Block) -> tuple[str, list[int]]:
    """The block as a bash script, and for each script line the document's line number.

    A command whose comment says ``exit N`` runs as an ``if`` condition (where errexit does
    not apply) and its exit code is compared with N.
    """
    out = ["set -euo pipefail; trap 'echo \"docs-test: failed at $LINENO with $?\" >&2' ERR"]
    numbers = [block.line]
    for lines, expected in _commands(block):
        if expected is None:
            out += [text for _, text in lines]
            numbers += [number for number, _ in lines]
            continue
        first = len(out) + 1
        check = (
            f'if [ "$__rc" -ne {expected} ]; then echo "docs-test: failed at {first} with $__rc" '
            f'>&2; echo "docs-test: the document says exit {expected}" >&2; exit 97; fi'
        )
        out += [f"if {lines[0][1]}", *(text for _, text in lines[1:])]
        out += ["then __rc=0; else __rc=$?; fi", check]
        numbers += [number for number, _ in lines] + [lines[-1][0]] * 2
    return "\n".join(out) + "\n", numbers


def _commands(block: Block) -> Iterator[tuple[list[tuple[int, str]], int | None]]:
    """The block's commands: their lines (a continued line, a heredoc's body, with the
    command) with their numbers in the document, and the exit code a comment documents."""
    pending: list[tuple[int, str]] = []
    expected: int | None = None
    heredoc: str | None = None
    for number, line in enumerate(block.body.splitlines(), start=block.line + 1):
        if block.lang == "console" and heredoc is None and not pending:
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]  # noqa: PLW2901
        pending.append((number, line))
        if heredoc is not None:
            if line.strip() != heredoc:
                continue
            heredoc = None
        else:
            command, comment = _split_comment(line)
            said = EXPECTED_EXIT.search(comment)
            if said is not None and (command.strip() or len(pending) > 1):
                expected = int(said.group(1))
            opens = HEREDOC.search(command)
            if opens is not None:
                heredoc = opens.group(2)
                continue
            if command.rstrip().endswith(("\\", "|", "&&", "||")):
                continue
        yield pending, expected
        pending, expected = [], None
    if pending:
        yield pending, expected


def _split_comment(text: str) -> tuple[str, str]:
    """A shell line's command and its trailing comment (a ``#`` outside quotes, after a
    blank or at the start)."""
    quote: str | None = None
    for at, char in enumerate(text):
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or text[at - 1].isspace()):
            return text[:at], text[at:]
    return text, ""


class Sessions:
    """Each document's session, run once per test process on first use."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.outcomes: dict[str, dict[int, Outcome]] = {}

    def outcome(self, block: Block) -> Outcome:
        if block.doc not in self.outcomes:
            self.outcomes[block.doc] = self._run(block.doc)
        return self.outcomes[block.doc][block.index]

    def _run(self, doc: str) -> dict[int, Outcome]:
        session = Session(self.factory.mktemp(Path(doc).stem))
        outcomes: dict[int, Outcome] = {}
        broken: Block | None = None
        try:
            for block in PARSED[doc][0]:
                if not runs(block):
                    continue
                if broken is not None:
                    outcomes[block.index] = Outcome(False, f"not run: {broken.id} failed first")
                    continue
                outcomes[block.index] = session.run(block)
                if not outcomes[block.index].ok:
                    broken = block
        finally:
            session.close()
        return outcomes


@pytest.fixture(scope="session")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Sessions:
    return Sessions(tmp_path_factory)


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("block", CHECKED, ids=[b.id for b in CHECKED])
def test_example(block: Block, sessions: Sessions) -> None:
    if block.lang == "json":
        _parse_json(block)
        return
    outcome = sessions.outcome(block)
    assert outcome.ok, f"{block.where} ({block.lang}) failed: {outcome.detail}"


def _parse_json(block: Block) -> None:
    try:
        json.loads(block.body)
    except json.JSONDecodeError:
        for number, line in enumerate(block.body.splitlines(), start=block.line + 1):
            try:
                json.loads(line)
            except json.JSONDecodeError as error:
                pytest.fail(f"{block.doc}:{number}: not JSON (nor JSON Lines): {error}")


def test_the_documents_have_examples_that_run() -> None:
    """A guard on the extraction itself: it still finds what the documents hold."""
    assert {Path(d).name for d in PARSED} >= {"README.md", "jsonl.md", "projections.md"}
    running = [b for b in BLOCKS if runs(b)]
    assert {b.lang for b in running} >= {"python", "bash"}
    assert any(b.doc == "README.md" and "tracebound verify-proof" in b.body for b in running)


def test_every_fence_has_a_language() -> None:
    known = RUNNABLE | NOT_CODE
    unlabelled = [f"{b.where}: {b.first_line!r}" for b in BLOCKS if b.lang not in known]
    assert not unlabelled, (
        f"give these fences a language ({', '.join(sorted(known))}); runnable ones run here, "
        f"or say why not with <!-- docs-test: skip (reason) -->: {unlabelled}"
    )


def test_every_marker_is_well_formed_and_has_a_reason() -> None:
    problems = []
    for marker in MARKERS:
        where = f"{marker.doc}:{marker.line}: {marker.text}"
        if marker.kind not in {"skip", "skip-document"}:
            problems.append(f"{where}: unknown marker (skip or skip-document)")
        elif not (marker.reason or "").strip():
            problems.append(f"{where}: a skip needs a reason: (why it cannot run here)")
        elif marker.kind == "skip" and not marker.before_fence:
            problems.append(f"{where}: a skip goes on the line right before a fence")
    assert not problems, "\n".join(problems)


def test_every_skip_that_says_covered_names_a_test_that_exists() -> None:
    checked = 0
    for marker in MARKERS:
        for found in COVERED.finditer(marker.reason or ""):
            path = ROOT / found["path"]
            assert path.is_file(), f"{marker.doc}:{marker.line}: no {found['path']}"
            if found["name"]:
                assert f"def {found['name']}(" in path.read_text(encoding="utf-8"), (
                    f"{marker.doc}:{marker.line}: {found['path']} has no {found['name']}"
                )
            checked += 1
    assert checked, "no skip says what covers it; the pattern may have gone stale"


def _block(body: str, lang: str = "bash") -> Block:
    return Block("t.md", 0, 10, lang, "", body, None)


SHELL_CASES = {
    "documented-failure": ("true\nfalse  # the doc says this fails: exit 1\necho ok\n", ""),
    "documented-failure-that-passes": ("true  # exit 1\n", "line 11 ('true  # exit 1') exited 0"),
    "unexpected-failure": ("true\nfalse\ntrue\n", "line 12 ('false') exited 1"),
    "heredoc-body-is-not-a-command": (
        "cat > f <<'EOF'\nx  # exit 3\nEOF\ngrep -qx 'x  # exit 3' f\n",
        "",
    ),
    "continued-command": ("false \\\n  --flag  # exit 1\n", ""),
    "continued-command-that-passes": ("true \\\n  --flag  # exit 1\n", "line 11 ("),
    "pipeline-failure": ("false | cat\n", "line 11 ('false | cat') exited 1"),
    "console": ("$ true\noutput, not run\n$ false  # exit 1\n", ""),
    "console-failure": ("$ false\n", "line 11 ('$ false') exited 1"),
}


@pytest.mark.parametrize("case", SHELL_CASES)
def test_shell_conventions(tmp_path: Path, case: str) -> None:
    body, says = SHELL_CASES[case]
    outcome = Session(tmp_path).run(
        _block(body, "console" if case.startswith("console") else "bash")
    )
    assert outcome.ok is (says == ""), outcome.detail
    assert says in outcome.detail


def test_python_blocks_of_a_session_share_one_namespace(tmp_path: Path) -> None:
    session = Session(tmp_path)
    try:
        assert session.run(_block("x = 41\n", "python")).ok
        assert session.run(_block("import os\nprint(os.getcwd(), x + 1)\n", "python")).ok
        failed = session.run(_block("assert x == 0, 'no'\n", "python"))
        assert not failed.ok and 't.md", line 11' in failed.detail
        connect = "import socket\nsocket.create_connection(('192.0.2.1', 80))\n"
        offline = session.run(_block(connect, "python"))
        assert not offline.ok and "docs examples run offline" in offline.detail
    finally:
        session.close()
