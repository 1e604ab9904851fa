"""Shared pieces of the CLI: options, how a ledger is opened, output and exit codes.

Exit codes (documented in the README):

* 0: success; for `verify`, every check agreed.
* 1: the ledger is damaged, or a proof does not verify.
* 2: usage or configuration error (bad option, missing store or key).
* 3: `verify` found no damage but could not check everything (no checkpoint, key or witness).
* 130, 143: stopped by Ctrl-C (SIGINT) or SIGTERM.
* 141: stdout's reader left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Final, NoReturn, Protocol, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from tracebound.errors import (
    ConfigError,
    IntegrityError,
    LedgerDamaged,
    SignatureInvalid,
    SigningKeyError,
    StoreNotFound,
    TraceboundError,
)
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.ledger import Ledger
from tracebound.store.files import write_file_atomic
from tracebound.store.keyfile import (
    check_key_pair,
    default_key_path,
    load_signer,
    load_verifier,
    missing_signer_error,
)
from tracebound.store.url import DEFAULT_STORE_DIR, is_postgres_url, open_store, store_path
from tracebound.store.witness import OriginMismatch, choose_witness
from tracebound.system import RandomIds, SystemClock

try:  # Typer bundles its own copy of Click since 0.2x; before, it used Click itself.
    from typer._click import Context
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - an older Typer
    from click import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        Context,
        get_current_context,
    )

EXIT_OK = 0
EXIT_DAMAGED = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130
"""Ctrl-C, as a shell reports a process SIGINT ended (128 + 2)."""
EXIT_TERMINATED = 143
"""SIGTERM (a supervisor, `kill`, `timeout`), as a shell reports a process it ended
(128 + 15)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, as Ctrl-C raises KeyboardInterrupt.

    A KeyboardInterrupt, so that everything that stops in order on Ctrl-C (``finally``
    blocks removing temporary files, a parallel rebuild stopping its workers, the pipeline
    runner recording how a run ended, `copy` saying how far it got) does so on SIGTERM too;
    SIGTERM's default action ends the process past all of them.
    """


def _raise_terminated(signum: int, frame: object) -> NoReturn:
    raise Terminated


def stop_on_sigterm() -> None:
    """Make SIGTERM end the command as Ctrl-C does, with its own exit code (143).

    For the CLI's process only: a library does not take over its host's signals.
    """
    signal.signal(signal.SIGTERM, _raise_terminated)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block has ended, then stop as they would have.

    For a write whose outcome the command reports: raised inside it, between the store's
    commit and its return, the interrupt would leave events in the ledger that the
    command's "written so far" leaves out. (SIGKILL still stops a write that hangs.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers run in the main thread only: nothing to hold here
        return
    held: list[signal.Signals] = []
    # Only signals a Python handler stops on (Ctrl-C's, stop_on_sigterm's): one ignored or
    # left to its default action stays so.
    before = {
        s: handler
        for s in (signal.SIGINT, signal.SIGTERM)
        if callable(handler := signal.getsignal(s))
    }
    for s in before:
        signal.signal(s, lambda signum, _frame: held.append(signal.Signals(signum)))
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    if held:
        before[held[0]](held[0], None)  # raises, as it would have inside the block


def interruption(exc: KeyboardInterrupt) -> tuple[str, int, dict[str, Any]]:
    """How a command stopped by ``exc`` says so: message, exit code, and the JSON's
    ``kind`` and ``signal``."""
    if isinstance(exc, Terminated):
        return "terminated (SIGTERM)", EXIT_TERMINATED, {"kind": "Interrupted", "signal": "SIGTERM"}
    return "interrupted (Ctrl-C)", EXIT_INTERRUPTED, {"kind": "Interrupted", "signal": "SIGINT"}


EXIT_BROKEN_PIPE = 141
"""The reader of stdout left (`| head -1`), as a shell reports a process SIGPIPE ended
(128 + 13). Python ignores SIGPIPE, and click and rich would exit 1: "damaged"."""


def reader_gone() -> NoReturn:
    """End the command quietly when stdout's reader has left.

    Not by restoring SIGPIPE's default action: a closed socket (a PostgreSQL server, the
    recorded model's loopback server) would then kill the process instead of raising.
    Stdout is pointed at /dev/null first, so the flush at exit does not fail again.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    raise SystemExit(EXIT_BROKEN_PIPE)


def stdout_failed(exc: OSError) -> NoReturn:
    """End the command, said on stderr, when stdout cannot take what it prints (a full
    disk, ``> /dev/full``, an I/O error): exit 2, not a traceback and exit 120.

    As in :func:`reader_gone`, stdout is pointed at /dev/null first, so the flush at exit
    (of what is still buffered) does not fail again.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    with contextlib.suppress(OSError, ValueError):  # stderr may be just as full
        sys.stderr.write(
            f"error: cannot write to stdout: {exc.strerror or exc}; the output is incomplete "
            "(what the command recorded before stays recorded)\n"
        )
        sys.stderr.flush()
    raise SystemExit(EXIT_USAGE)


def stdout_broken(exc: OSError) -> None:
    """Call :func:`stdout_failed` if ``exc`` is stdout's, not a named file's: what a failed
    write left in stdout's buffer fails again when flushed."""
    if exc.filename is not None:
        return
    try:
        sys.stdout.flush()
    except OSError as again:
        stdout_failed(again)


# Recorded text reaches an auditor's terminal. ESC starts a control sequence (clear the
# screen, move the cursor up over "OK", an OSC 8 hyperlink), C1 bytes do the same on some
# terminals, CR and backspace overwrite what was printed, bidi overrides reorder it, and
# U+2028/U+2029 break lines. Each is shown as a visible escape instead.
_TERMINAL_UNSAFE = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
)
_UNSAFE_ANYWHERE = re.compile(f"[{_TERMINAL_UNSAFE}]")
# Tab and newline are the CLI's own layout, but inside one id or reason a newline would
# make one table row look like two, or put a forged line under the real ones.
_UNSAFE_IN_DATA = re.compile(f"[\t\n{_TERMINAL_UNSAFE}]")


_NAMED_ESCAPES: Final = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control, bidi and line-breaking character as a visible escape
    (``\\x1b``, ``\\u202e``): safe to print on a terminal, as plain text."""
    return _UNSAFE_IN_DATA.sub(_escape_char, text)


def safe_text(text: object) -> str:
    """Recorded or user-given text for a rich markup string: :func:`visible`, and its
    ``[`` escaped, so ``[red]OK[/red]`` in the data prints as written."""
    return escape(visible(str(text)))


class _Console(Console):
    """rich's console, with :func:`reader_gone` for a stdout whose reader left (rich's own
    ends the process with exit 1, which the exit-code table reads as damage), and no
    terminal control character in anything it prints."""

    def on_broken_pipe(self) -> None:
        if not self.quiet:
            reader_gone()

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # Every string printed, a table cell or title too, passes here: recorded text a
        # message forgot to pass through safe_text() still cannot drive the terminal.
        return super().render_str(_UNSAFE_ANYWHERE.sub(_escape_char, text), **kwargs)


# emoji=False: ":warning:" in recorded text is printed as written, not as an emoji.
console = _Console(emoji=False)
err_console = _Console(stderr=True, emoji=False)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        "-s",
        envvar="TRACEBOUND_STORE",
        help="Store: sqlite:///path/ledger.db, jsonl:///dir, "
        "postgresql://user@host/db[?schema=name], or a directory (SQLite). "
        "Default: ./.tracebound",
        metavar="URL",
        show_default=False,
    ),
]
KeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--key",
        envvar="TRACEBOUND_KEY",
        help="Private signing key file. Default: ~/.config/tracebound/keys/tracebound.key",
        show_default=False,
    ),
]
VerifierOpt = Annotated[
    str | None,
    typer.Option(
        "--verifier-key",
        envvar="TRACEBOUND_VERIFIER_KEY",
        help="Public verifier key (file or text `name+hash+key`). Default: from --key's .pub",
        show_default=False,
    ),
]
# The commands an auditor runs with the public key alone (`verify-evidence`, `verify-proof`):
# `--key` still finds the `.pub` beside a signing key, for scripts on the owner's machine,
# but is not shown, so that nothing in their help asks an auditor for a private key.
OfflineKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--key",
        envvar="TRACEBOUND_KEY",
        hidden=True,
        help="On the owner's machine: check with the .pub beside this signing key file.",
        show_default=False,
    ),
]
OfflineVerifierOpt = Annotated[
    str | None,
    typer.Option(
        "--verifier-key",
        envvar="TRACEBOUND_VERIFIER_KEY",
        help="The ledger's public verifier key: the text `tracebound keys show` prints "
        "(name+hash+key), or a file holding it; nothing else is needed. Default: this "
        "machine's own, when it holds the ledger's signing key.",
        show_default=False,
    ),
]
WitnessOpt = Annotated[
    Path | None,
    typer.Option(
        "--witness",
        envvar="TRACEBOUND_WITNESS",
        help="Witness file holding the newest checkpoint, outside the store. "
        "Default: ~/.local/state/tracebound/witness/<origin>.note (the origin made a "
        "file name: other characters than A-Z a-z 0-9 . _ - as _, plus 8 hex digits of "
        "its SHA-256 when any were)",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document for scripts.")]
MIN_FOLLOW_INTERVAL: Final = 0.01
"""The shortest pause between a follower's polls: 0 polled in a busy loop, a core at 100 %
for as long as nothing new came."""
GiveUpAfterOpt = Annotated[
    float,
    typer.Option(
        "--give-up-after",
        min=0,
        metavar="SECONDS",
        help="With --follow: how long to wait for a database server that went away (a "
        "restart, a failover), reconnecting, before ending with exit 2 (0: for ever).",
    ),
]


def give_up_after(seconds: float) -> float | None:
    """``--give-up-after``'s value for :class:`~tracebound.store.reconnect.Outage`."""
    return None if seconds == 0 else seconds


def say_on_stderr(message: str) -> None:
    """A follower's line about its connection (lost, back): stderr, so stdout stays data.

    One line whatever the width (a service's log is no terminal): libpq's messages hold
    newlines and tabs, and rich would wrap at 80 columns."""
    line = " ".join(message.split())
    err_console.print(f"[bold yellow]warning:[/] {safe_text(line)}", soft_wrap=True)


FollowIntervalOpt = Annotated[
    float,
    typer.Option(
        "--interval", min=MIN_FOLLOW_INTERVAL, help="Seconds between polls with --follow."
    ),
]
RedactionKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--redaction-key",
        envvar="TRACEBOUND_REDACTION_KEY",
        help="Redaction HMAC key (32 bytes, created on first use). "
        "Default: ~/.config/tracebound/keys/redaction.key",
        show_default=False,
    ),
]
ProofOutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write the proof here.", show_default=False)
]
OriginOpt = Annotated[
    str | None,
    typer.Option(
        "--origin",
        help="Require the checkpoint to name this log (one key may sign several logs).",
        show_default=False,
    ),
]

T = TypeVar("T")


JSON_SCHEMA_VERSION: Final = 1
"""The version of the shape of every `--json` document, its ``schema_version``.

Raised when a key a script may read is renamed or removed, or its value changes type or
meaning; a new key does not raise it. Scripts check it with ``command`` (which document
this is) before they read the rest.
"""


def command_path(ctx: Context | None) -> str | None:
    """The command a context runs, as typed after `tracebound` (`report cost`), or None at
    the top level (no command was recognised)."""
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names)) or None


def emit_json(data: dict[str, Any], *, one_line: bool = False, command: str | None = None) -> None:
    """One JSON document on stdout; ``one_line`` for a JSON Lines stream (a follow mode).

    Every document says which command printed it and the version of its shape
    (``command``, ``schema_version``): a script reading stored outputs, or a newer
    tracebound's, can tell them apart. ``command``: the running command's by default.
    """
    if command is None:
        command = command_path(get_current_context(silent=True))
    document = {"command": command, "schema_version": JSON_SCHEMA_VERSION, **data}
    indent = None if one_line else 2
    write_stdout(json.dumps(document, indent=indent, sort_keys=True, default=str) + "\n")


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout and flush it here, where a reader that left is handled
    (:func:`reader_gone`), not at exit."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()
    except OSError as exc:
        stdout_failed(exc)


def fail(
    message: str,
    *,
    code: int,
    as_json: bool,
    kind: str = "error",
    one_line: bool = False,
    **extra: Any,
) -> NoReturn:
    """Report an error the same way everywhere: JSON on stdout, or red text on stderr.

    ``one_line``: the command prints JSON Lines (``tail --follow --json``), so the error is
    one more line of the stream, which a reader of lines can parse.
    """
    if as_json:
        error = {"kind": kind, "message": message, **extra}
        emit_json({"ok": False, "error": error}, one_line=one_line)
    else:
        # escape: messages quote what files hold ("[/x]" would be read as markup and raise)
        err_console.print(f"[bold red]error:[/] {safe_text(message)}")
    raise typer.Exit(code)


@contextmanager
def handled(as_json: bool, *, one_line: bool = False) -> Iterator[None]:
    """Turn tracebound errors into a clean message and the documented exit code (as one
    JSON line with ``one_line``: see :func:`fail`)."""

    def out(message: str, code: int, kind: str, **extra: Any) -> NoReturn:
        fail(message, code=code, as_json=as_json, one_line=one_line, kind=kind, **extra)

    try:
        yield
    except (StoreNotFound, ConfigError, SigningKeyError) as exc:
        out(str(exc), EXIT_USAGE, type(exc).__name__)
    except SignatureInvalid as exc:
        # Forged, or checked with the wrong key: only the caller can tell which.
        out(
            f"{exc} (checked with the verifier key from --verifier-key, or --key's .pub; if the "
            "ledger was signed with another key, pass that one)",
            EXIT_DAMAGED,
            type(exc).__name__,
        )
    except LedgerDamaged as exc:  # met before verify could report it (a file SQLite refuses)
        out(str(exc), EXIT_DAMAGED, "LedgerDamaged", damage=exc.as_dict())
    except IntegrityError as exc:
        out(str(exc), EXIT_DAMAGED, type(exc).__name__)
    except TraceboundError as exc:
        out(str(exc), EXIT_USAGE, type(exc).__name__)
    except UnicodeEncodeError as exc:
        # Python keeps an argument's bytes that are not UTF-8 as lone surrogates ("\udcff");
        # SQLite and PostgreSQL cannot take them, and the traceback did not say which.
        out(
            f"not UTF-8 text: {safe_text(repr(exc.object)[1:-1])} (an argument with bytes "
            "that are not UTF-8, e.g. typed in a terminal whose locale is not UTF-8?)",
            EXIT_USAGE,
            "UsageError",
        )
    except BrokenPipeError:  # an OSError, but of stdout's reader, not of a file named
        reader_gone()
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        # Said, as every other way a command ends: with --json, one document on stdout.
        # (`copy` and `append` say more: how far they got; the runner has recorded what a
        # run did.)
        message, code, extra = interruption(exc)
        fail(message, code=code, as_json=as_json, one_line=one_line, **extra)
    except OSError as exc:  # a file named on the command line: missing, a folder, no access
        stdout_broken(exc)
        where = f": {exc.filename}" if exc.filename else ""
        out(f"{exc.strerror or exc}{where}", EXIT_USAGE, type(exc).__name__)


DEFAULT_KEY_NAME = "tracebound"


def resolve_key_path(key: Path | None) -> Path:
    """The signing key file: ``--key``'s, else the default one.

    Raises:
        SigningKeyError: ``--key`` is empty (an unset variable in a script: the folder
            ``.``) or ends in ``..``: no file name to put a ``.pub`` beside.
    """
    if key is None:
        return default_key_path(DEFAULT_KEY_NAME)
    if key.name in {"", ".."}:
        raise SigningKeyError(
            f"--key {str(key)!r} is empty or names a folder; give the key file's own path "
            f"(default: {default_key_path(DEFAULT_KEY_NAME)})"
        )
    return key


def try_signer(key: Path | None) -> NoteSigner | None:
    path = resolve_key_path(key)
    if not path.exists():
        if key is not None:
            raise SigningKeyError(f"no signing key at {path}")
        return None
    return load_signer(path)  # a key inside the store is refused when it is created


def try_verifier(verifier_key: str | None, key: Path | None) -> NoteVerifier | None:
    if verifier_key is not None:
        return load_verifier(verifier_key)
    private = resolve_key_path(key)
    pub = private.with_suffix(".pub")
    if pub.exists():
        verifier = load_verifier(pub)
        check_key_pair(private, pub, verifier)
        return verifier
    signer = try_signer(key)
    return None if signer is None else signer.verifier


def open_ledger(
    store: str | None,
    *,
    key: Path | None = None,
    verifier_key: str | None = None,
    witness: Path | None = None,
    need_signer: bool = False,
) -> Ledger:
    """Open the ledger with whatever keys and witness are configured.

    Raises:
        LedgerDamaged: FORK, the store names another origin than its witness follows
            (:func:`open_ledger_checked`); nothing is read from or written to it then.
    """
    ledger, mismatch = open_ledger_checked(
        store, key=key, verifier_key=verifier_key, witness=witness, need_signer=need_signer
    )
    if mismatch is not None:
        ledger.close()
        raise mismatch.damage()
    return ledger


class _Proof(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


_P = TypeVar("_P", bound=_Proof)


def prove_into(
    store: str | None,
    key: Path | None,
    verifier_key: str | None,
    output: Path | None,
    build: Callable[[Ledger], _P],
) -> tuple[_P, str]:
    """Build a proof file's content from the ledger (`prove`, `prove-consistency`) and
    write it to ``output`` when given (atomically, never inside the store); return it and
    its JSON text, which the caller prints when there is no ``output``."""
    if output is not None:
        refuse_inside_store(output, store, "--output")
    ledger = open_ledger(store, key=key, verifier_key=verifier_key)
    try:
        proof = build(ledger)
    finally:
        ledger.close()
    text = json.dumps(proof.as_dict(), indent=2, sort_keys=True) + "\n"
    if output is not None:
        write_output(output, text.encode("utf-8"), "--output")
    return proof, text


def open_ledger_checked(
    store: str | None,
    *,
    key: Path | None = None,
    verifier_key: str | None = None,
    witness: Path | None = None,
    need_signer: bool = False,
) -> tuple[Ledger, OriginMismatch | None]:
    """Open the ledger, and say whether the store still names the origin its witness follows.

    On a mismatch the ledger's witness is the one of the origin the store is bound to (or
    the explicit ``--witness`` file's), so ``verify`` still compares the log with it.
    """
    signer = try_signer(key)
    if need_signer and signer is None:
        raise missing_signer_error(resolve_key_path(key))
    # An explicit --verifier-key is what the caller wants the log checked against, even
    # on a machine that also holds a signing key: an auditor asking "signed by X?" must
    # not be answered with "signed by whatever key is here".
    if verifier_key is not None or signer is None:
        verifier = try_verifier(verifier_key, key)
    else:
        verifier = signer.verifier
    backend = open_store(store)
    ledger = Ledger(backend, clock=SystemClock(), ids=RandomIds(), signer=signer, verifier=verifier)
    try:
        origin = ledger.origin
        ledger.witness, mismatch = choose_witness(
            backend, origin, store_dir(store), explicit=witness, binding=need_signer
        )
    except BaseException:
        ledger.close()
        raise
    return ledger, mismatch


def store_dir(store: str | None) -> Path:
    """The local state directory: the store itself, or ``./.tracebound`` for a remote ledger.

    A PostgreSQL ledger keeps its views, anchor files and remediation runs in the local
    directory (its blobs go where ``--blobs`` says: no default is shared by every machine
    that writes to one server), and keys and the witness must stay out of it all the same.
    """
    if is_postgres_url(store):
        return DEFAULT_STORE_DIR
    path = store_path(store)
    return path if path.suffix == "" else path.parent


def refuse_inside_store(path: Path, store: str | None, option: str) -> None:
    """Refuse an output file that is the store's, before anything is written.

    Exports (a proof, a dataset) are for elsewhere: `prove -o .tracebound/ledger.db`
    replaced the ledger with a proof. A store that is a directory (the default
    ``./.tracebound``, a JSONL store) is guarded whole; a SQLite store named by its file,
    that file and SQLite's files beside it (its folder may be the working directory).

    Raises:
        ConfigError: ``path`` is the store's.
    """
    target = path.resolve()
    where = store_dir(store) if is_postgres_url(store) else store_path(store)
    if where.suffix == "":
        if target.is_relative_to(where.resolve()):
            raise ConfigError(
                f"{option} {path} is inside the store directory {where.resolve()}: write "
                "exports elsewhere (a file there can be the ledger itself)"
            )
        return
    ledger = where.resolve()
    if target in {ledger, *(ledger.with_name(ledger.name + s) for s in _SQLITE_SIDE_FILES)}:
        raise ConfigError(f"{option} {path} is the ledger's own file: write exports elsewhere")


_SQLITE_SIDE_FILES: Final = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside a database, named after it."""


def write_output(path: Path, data: bytes, option: str) -> None:
    """Write an export (a proof, a dataset) to ``path``: whole, or not at all.

    Through a temporary file, fsynced, then renamed over ``path``: a command killed while
    writing (or a power cut after it) leaves the previous file as it was, never a
    truncated one under its name that a checker would call a bad proof. A pipe or a
    device is written into instead.

    Raises:
        ConfigError: the file cannot be written; the message names ``path``, not the
            temporary file.
    """
    try:
        if path.exists() and not path.is_file():
            # A pipe or a device (`-o /dev/stdout`, `>(gzip)`) is written into: renaming a
            # file over it would replace it, and as root replace /dev/stdout itself.
            with path.open("wb") as fh:
                fh.write(data)
            return
        write_file_atomic(path, data, mode=0o644, overwrite=True)
    except OSError as exc:
        raise ConfigError(f"cannot write {option} {path}: {exc.strerror or exc}") from exc


@contextmanager
def progress_bar(label: str, *, enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr; a no-op in --json mode or without a terminal."""
    show = enabled and err_console.is_terminal and not os.environ.get("CI")
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        # Not "{task.total:,}": the total is None until the first update, and the bar is
        # drawn once before it (a TypeError on every terminal).
        TextColumn("{task.fields[count]} events"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not show,
    ) as bar:
        task = bar.add_task(label, total=None, count="0")

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, count=f"{done:,}/{total:,}")

        yield update
