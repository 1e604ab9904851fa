"""The `tracebound` command group: tidy `--help` pages, and usage errors as JSON.

Typer's help shows a type after every parameter, flags included (`--json <bool>`, even
`--help <bool>`, as if they took a value), and writes required arguments as `{stream}`.
:class:`RootGroup` walks the command tree once, when it is built, and gives flags no type
and arguments an upper-case name (`STREAM`, `[FILE]` when optional), as Click does. It
also sorts the commands into help panels, in the order a new user needs them.

With `--json` on the command line, a usage error (an unknown option, a value out of range,
a missing argument) is printed as `{"ok": false, "error": {"kind": "UsageError", ...}}` on
stdout and exits 2, like every other error in JSON mode, instead of Click's box on stderr.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import typer
import typer.rich_utils
from rich.text import Text
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from tracebound.cli._common import EXIT_USAGE, command_path, emit_json

try:  # Typer bundles its own copy of Click since 0.2x; before, it used Click itself.
    from typer._click import Command, Context
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover - an older Typer
    from click import Command, Context  # type: ignore[no-redef,import-not-found,unused-ignore]
    from click.exceptions import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        ClickException,
        UsageError,
    )

__all__ = ["OTHER_PANEL", "RootGroup", "UsageError"]

OTHER_PANEL = "More"
"""The help panel of a command that :attr:`RootGroup.panels` does not list."""


class _Flag(TyperOption):
    """A flag (`--json`, `--follow`, `--help`): it takes no value, so shows no type."""

    def display_type_rich(self, ctx: Context) -> str | None:
        return None


class _Argument(TyperArgument):
    """An argument written as Click writes it: `STREAM` when required, `[FILE]` when not."""

    def get_usage_pieces(self, ctx: Context) -> list[str]:
        name = self.metavar or (self.name or "").upper()
        piece = name if self.required else f"[{name}]"
        return [piece + ("..." if self.nargs != 1 else "")]


def _tidy_help_option(option: Any) -> Any:
    if isinstance(option, TyperOption) and not isinstance(option, _Flag):
        option.__class__ = _Flag
    return option


def _folding(parameter_help: Callable[..., Any]) -> Callable[..., Any]:
    def fold(**kwargs: Any) -> Any:
        cell = parameter_help(**kwargs)
        for item in getattr(cell, "renderables", ()):
            if isinstance(item, Text):
                item.overflow = "fold"
        return cell

    return fold


@contextmanager
def _long_words_folded() -> Iterator[None]:
    """Fold, not cut, a word wider than an option's help column while a page is printed.

    Rich's tables end such a word with "…": at 80 columns `--key`'s default read
    `~/.config/tracebound/keys/trace…`, the one thing the user looked for. Folded, it goes
    on over the next line and can be read whole. Typer builds each help cell in
    ``rich_utils._get_parameter_help``; a Typer without it prints its own way.
    """
    original = getattr(typer.rich_utils, "_get_parameter_help", None)
    if original is None:  # pragma: no cover - another Typer
        yield
        return
    typer.rich_utils._get_parameter_help = _folding(original)
    try:
        yield
    finally:
        typer.rich_utils._get_parameter_help = original


class _Command(TyperCommand):
    def get_help_option(self, ctx: Context) -> Any:
        return _tidy_help_option(super().get_help_option(ctx))

    def format_help(self, ctx: Context, formatter: Any) -> None:
        with _long_words_folded():
            super().format_help(ctx, formatter)


class _Group(TyperGroup):
    def get_help_option(self, ctx: Context) -> Any:
        return _tidy_help_option(super().get_help_option(ctx))

    def format_help(self, ctx: Context, formatter: Any) -> None:
        with _long_words_folded():
            super().format_help(ctx, formatter)


def _unwrap(text: str | None) -> str | None:
    """Each paragraph of a docstring on one line, for the console to wrap.

    Typer 0.2x keeps the source's line breaks in every paragraph after the first, and rich
    then wraps those lines again at the terminal's width: ragged half-lines at 80 columns.
    A paragraph that starts with Click's no-rewrap marker ``\\b`` is left as it is.
    """
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs)


def _tidy(command: Command) -> None:
    """Give flags no type, arguments an upper-case name, help one line a paragraph; the
    same for every subcommand."""
    command.help = _unwrap(command.help)
    if type(command) is TyperCommand:
        command.__class__ = _Command
    elif type(command) is TyperGroup:
        command.__class__ = _Group
    for param in command.params:
        if isinstance(param, TyperArgument) and not isinstance(param, _Argument):
            if param.metavar is None:
                param.metavar = (param.name or "").upper()
            param.__class__ = _Argument
        elif isinstance(param, TyperOption) and param.is_flag:
            param.__class__ = _Flag
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _tidy(sub)


def _json_error(kind: str, message: str, ctx: Context | None) -> None:
    # Click has left the command's context when its error arrives here: the command the
    # error names comes from the one the exception carries (None before one was chosen).
    error = {"kind": kind, "message": message}
    emit_json({"ok": False, "error": error}, command=command_path(ctx))


class RootGroup(_Group):
    """The top-level `tracebound` group (`typer.Typer(cls=...)`)."""

    panels: ClassVar[Mapping[str, Sequence[str]]] = {}
    """Help panels in order, each with its commands in order; others go to "More"."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        _tidy(self)
        order = [name for names in self.panels.values() for name in names]
        rank = {name: i for i, name in enumerate(order)}
        panel_of = {name: panel for panel, names in self.panels.items() for name in names}
        # Typer keeps registration order, groups last; `--help` lists them in this order.
        self.commands = dict(
            sorted(self.commands.items(), key=lambda item: rank.get(item[0], len(rank)))
        )
        for name, command in self.commands.items():
            setattr(command, "rich_help_panel", panel_of.get(name, OTHER_PANEL))  # noqa: B010

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv:
            return super().main(
                argv, prog_name, complete_var, standalone_mode, windows_expand_args, **extra
            )
        try:
            code = super().main(
                argv,
                prog_name,
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except UsageError as exc:
            _json_error("UsageError", exc.format_message(), exc.ctx)
            code = EXIT_USAGE
        except ClickException as exc:  # a file option that cannot be opened, say
            _json_error(type(exc).__name__, exc.format_message(), None)
            code = exc.exit_code
        except typer.Abort:
            if not standalone_mode:
                raise
            sys.stderr.write("Aborted!\n")
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)
