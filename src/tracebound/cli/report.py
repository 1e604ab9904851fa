"""`tracebound report cost|roi|plugins|gates|trail`: read the materialised views.

Each report first catches the views up with the log (``--no-update`` skips that), so what
it prints is current. ``--json`` prints one document; ``--chart FILE.png|.svg`` (cost,
gates) draws with matplotlib, an optional extra: ``pip install 'tracebound[charts]'``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.table import Table

from tracebound.cli._common import (
    JsonOpt,
    StoreOpt,
    console,
    emit_json,
    err_console,
    handled,
    safe_text,
)
from tracebound.cli._tables import Give, fit, hoist_date, utc_text
from tracebound.cli.project import ViewsOpt, open_runner
from tracebound.errors import ConfigError
from tracebound.events.anchor import MONEY_CONTEXT
from tracebound.integrity.strict_json import loads_strict
from tracebound.projections import reports
from tracebound.projections.gates import BUCKET_BP
from tracebound.projections.runner import ProjectionRunner, ProjectionStatus
from tracebound.projections.trail import parse_langgraph_checkpoints, parse_temporal_history

__all__ = ["report_app"]

MAX_SCORE: Final = 10_000
"""The highest score in basis points; the top bucket holds it."""

report_app = typer.Typer(
    help="Reports from the views: cost, ROI, plugins, trust gates, audit trail.",
    no_args_is_help=True,
)

NoUpdateOpt = Annotated[
    bool, typer.Option("--no-update", help="Read the views as they are; do not catch up first.")
]
ChartOpt = Annotated[
    Path | None,
    typer.Option("--chart", help="Also draw a chart to this .png or .svg file (matplotlib)."),
]
WorkflowOpt = Annotated[str | None, typer.Option("--workflow", "-w", help="Only this workflow.")]

DEFAULT_LIMIT = 50
"""Rows per table on a terminal. A large ledger's cost ledger has a row per workflow, tier
and source (110,000 at 1M events): drawing them all took rich over three minutes, and no
one reads them on a screen. ``--json`` always has every row."""

LimitOpt = Annotated[
    int,
    typer.Option(
        "--limit",
        min=0,
        help="At most this many rows per table (the costliest or most frequent first when "
        "cut); 0 for all. --json always has every row.",
    ),
]


@contextmanager
def _views(
    store: str | None, views: str | None, *, no_update: bool, as_json: bool
) -> Iterator[ProjectionRunner[Any]]:
    """The views a report reads: caught up first (with a progress bar on a terminal), or,
    with ``--no-update``, as they are, and then they must exist (nothing is created).

    Caught up, a projection that fails on an event makes the report fail. With
    ``--no-update`` the report reads what is there, and says on stderr which projections
    stopped at a failure (their rows end before that event), and when the others are
    behind the log (a `project rebuild` killed half-way leaves them so). Views built from
    another log than this ledger's are refused either way (``ViewsOfAnotherLog``).
    """
    with open_runner(
        store, views, update=not no_update, existing=no_update, progress=not as_json
    ) as runner:
        if no_update:
            runner.check_log()  # views of another history would be reported as this one's
            _warn_stale(runner.status())
        yield runner


def _warn_stale(statuses: Sequence[ProjectionStatus]) -> None:
    """Say on stderr which views a ``--no-update`` report reads are not the whole log."""
    for s in statuses:
        if s.failed_position is not None:
            err_console.print(
                f"[bold yellow]warning:[/] projection {s.name!r} stopped at position "
                f"{s.failed_position:,} ({safe_text(s.error or '')}); its views end at "
                f"{s.position:,}"
            )
    behind = [s for s in statuses if s.failed_position is None and s.lag > 0]
    if behind:
        low = min(behind, key=lambda s: s.position)
        err_console.print(
            f"[bold yellow]warning:[/] the views are behind the log (down to position "
            f"{low.position:,} of {low.head:,}, in {', '.join(s.name for s in behind)}): "
            "this report leaves out the events after that; without --no-update it catches "
            "up first"
        )


def _require_workflow(views: Any, workflow: str | None, *, no_update: bool) -> None:
    """A ``--workflow`` that names no workflow in the views is an error, as for ``trail``,
    not an empty report that reads like one of a workflow that cost nothing."""
    if workflow is None or reports.workflow_state(views, workflow) is not None:
        return
    if reports.cost_rows(views, workflow):  # "" is the portfolio: costs of no workflow
        return
    raise ConfigError(
        f"no events for workflow {workflow!r}"
        + (" in the views (with --no-update they may be behind the log)" if no_update else "")
    )


def _sum(amounts: Iterable[Any]) -> Decimal:
    """Money summed in MONEY_CONTEXT: the thread's default 28 digits would round the sum."""
    total = Decimal(0)
    for amount in amounts:
        total = MONEY_CONTEXT.add(total, Decimal(amount))
    return total


def _money(value: Any) -> str:
    return "-" if value is None else format(Decimal(value), "f")


def _table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str | None = None
) -> Table:
    """A report table: the first column (a name or id) gives way on a narrow terminal."""
    table = _unfitted(title, columns, rows, caption)
    fit(table, give={columns[0]: "ellipsis"}, console=console)
    return table


def _limited(
    rows: Sequence[Any], limit: int, *, top: Callable[[Any], Any] | None = None, first: str
) -> tuple[list[Any], str | None]:
    """At most ``limit`` rows (0: all), and a caption saying so when rows were left out.

    A table that fits is printed as listed. One that does not keeps the rows with the
    largest ``top`` keys, largest first (ties in listed order, so the same views print the
    same table), or, without ``top``, its first rows as listed (a list ranked already).
    ``first`` says what comes first: "50 of 110,000 rows, costliest first".
    """
    if not limit or len(rows) <= limit:
        return list(rows), None
    kept = sorted(rows, key=top, reverse=True)[:limit] if top is not None else list(rows[:limit])
    return kept, _caption(limit, len(rows), first)


def _caption(shown: int, total: int, first: str) -> str:
    return f"{shown:,} of {total:,} rows, {first} first (--limit 0: all)"


def _gate_rows(
    data: dict[str, Any], limit: int
) -> tuple[list[Any], str | None, list[Any], str | None]:
    """The gates table and the score histogram, each with its caption when cut.

    The busiest gates (passed + failed) when there are more than ``limit``. A histogram
    of more than ``limit`` rows (a gate has up to 20) holds the rows of the busiest gates,
    busiest first, so it never shows a gate the table above left out.
    """

    def busy(g: dict[str, Any]) -> int:
        return int(g["passed"]) + int(g["failed"])

    gates, gates_caption = _limited(data["gates"], limit, top=busy, first="busiest gates")
    scores: list[Any] = list(data["scores"])
    if not limit or (gates_caption is None and len(scores) <= limit):
        return gates, gates_caption, scores, None
    rank = {g["gate"]: i for i, g in enumerate(sorted(gates, key=busy, reverse=True))}
    kept = sorted((s for s in scores if s["gate"] in rank), key=lambda s: rank[s["gate"]])
    return (
        gates,
        gates_caption,
        kept[:limit],
        _caption(min(len(kept), limit), len(scores), "busiest gates"),
    )


def _unfitted(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str | None = None
) -> Table:
    table = Table(title=title, caption=caption)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:  # escaped: recorded text such as "[/x]" is not rich markup
        table.add_row(*("-" if v is None else safe_text(str(v)) for v in row))
    return table


_COST_COLUMNS = ("workflow", "tier", "source", "USD", "events")
_TOKEN_COLUMNS = (
    "in\nuncached",
    "in\ncached",
    "uncached:\ncache write",
    "uncached:\nlong write",
    "out\nvisible",
    "out\nreasoning",
)


_COST_GIVE: Final[tuple[dict[str, Give], ...]] = (
    {"workflow": "ellipsis"},
    {"workflow": "ellipsis", "source": "ellipsis"},
)
"""What gives way in a cost table that is too wide: the workflow id, then the source too."""


def _cost_tables(
    title: str, rows: Sequence[Sequence[Any]], caption: str | None = None
) -> list[Table]:
    """The cost ledger in one table; on a terminal too narrow for it, the token counts go
    to a second table, keyed by the same workflow, tier and source.

    A number is never cut: a table that does not fit is cropped at the terminal's edge,
    which printed 3,000,000,000 tokens as "300". So when the tokens table is still too wide
    (a long source name, counts in the billions), the input and the output counts go to a
    table each.
    """
    table = _unfitted(title, _COST_COLUMNS + _TOKEN_COLUMNS, rows, caption)
    if fit(table, give=_COST_GIVE[0], console=console):
        return [table]
    key = len(_COST_COLUMNS)
    money, _ = _cost_table(title, _COST_COLUMNS, [row[:key] for row in rows], caption)
    keys = _COST_COLUMNS[:3]
    tokens, fits = _cost_table(
        "tokens", keys + _TOKEN_COLUMNS, [(*row[:3], *row[key:]) for row in rows], caption
    )
    if fits:
        return [money, tokens]
    halves = (("tokens in", slice(0, 4)), ("tokens out", slice(4, 6)))
    return [money] + [
        _cost_table(
            name, (*keys, *_TOKEN_COLUMNS[part]), [(*r[:3], *r[key:][part]) for r in rows], caption
        )[0]
        for name, part in halves
    ]


def _cost_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str | None
) -> tuple[Table, bool]:
    """A cost table, and whether it fits once the workflow, then the source, gave way."""
    for give in _COST_GIVE:
        table = _unfitted(title, columns, rows, caption)  # fit marks the columns it keeps
        if fit(table, give=give, console=console):
            return table, True
    return table, False


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or a clear error if the extra is missing."""
    try:
        import matplotlib  # noqa: PLC0415 - optional extra, imported only for --chart

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigError("charts need matplotlib: pip install 'tracebound[charts]'") from exc
    return plt


def _check_suffix(path: Path) -> None:
    if path.suffix.lower() not in {".png", ".svg"}:
        raise ConfigError(f"a chart is written as .png or .svg, not {path.suffix or 'no suffix'}")


def _save(fig: Any, path: Path) -> None:
    _check_suffix(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A fixed date in the SVG metadata, so the same views draw the same file.
        fig.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
    except OSError as exc:
        raise ConfigError(f"cannot write the chart {path}: {_unwritable(path, exc)}") from exc


def _unwritable(path: Path, exc: OSError) -> str:
    """Why a chart cannot be written, in the terms of the path given: mkdir's "File exists"
    means a folder on the way is a file, and "Is a directory" that the chart's name is a
    folder's."""
    if isinstance(exc, FileExistsError | NotADirectoryError):
        blocking = next((p for p in path.parents if p.is_file()), None)
        if blocking is not None:
            return f"{blocking} is a file, not a folder"
    if isinstance(exc, IsADirectoryError):
        return f"{path} is a folder"
    return exc.strerror or str(exc)


def _nothing_to_draw(ax: Any, message: str) -> None:
    """An empty chart says so, instead of drawing meaningless axes."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=12, transform=ax.transAxes)


_PLAIN_BELOW = 1e15
"""Y labels are written out in full below this; above it in powers of ten. A float holds
about 15 significant digits, and written out a larger one shows its noise
(1200000000000000003793529864192). The title keeps the exact total."""

_HOURLY_SPAN = timedelta(days=14)
"""Up to two weeks of cost is drawn per hour; a longer span per day (a bar per hour of a
month is too thin to read), per month, or per year."""


@dataclass(frozen=True, slots=True)
class _Step:
    """A bucket of the cost chart: its name, the longest span it is used for, how an hour
    is cut to it, and its length (a bar's width; a month and a year by their shortest)."""

    name: str
    up_to: timedelta
    cut: Callable[[datetime], datetime]
    length: timedelta


_STEPS: Final = (
    _Step("hour", _HOURLY_SPAN, lambda at: at, timedelta(hours=1)),
    _Step("day", timedelta(days=2 * 366), lambda at: at.replace(hour=0), timedelta(days=1)),
    _Step("month", timedelta(days=100 * 366), lambda at: at.replace(day=1, hour=0),
          timedelta(days=28)),
    _Step("year", timedelta.max, lambda at: at.replace(month=1, day=1, hour=0),
          timedelta(days=365)),
)  # fmt: skip
"""At most about 730 bars whatever the span: a host whose clock came back at 1970 beside
the right time was 20 000 empty daily slots (seconds of drawing, and no bar to be seen)."""


def _step(first: datetime, last: datetime) -> _Step:
    return next(s for s in _STEPS if last - first <= s.up_to)


_AXIS_END: Final = datetime(9999, 12, 31)
"""The last instant an axis may end at: matplotlib rounds datetime.max to year 10000,
which it refuses."""


def _shifted(at: datetime, by: timedelta) -> datetime:
    """``at + by``, kept within year 1 to 9999 (the axis of a chart at either end)."""
    try:
        return min(at + by, _AXIS_END)
    except OverflowError:
        return datetime.min if by < timedelta(0) else _AXIS_END


def cost_chart(rows: Sequence[dict[str, Any]], path: Path, *, workflow: str | None = None) -> None:
    """Cost over time by role: a bar per hour (per day, month or year over longer spans),
    stacked by role.

    Stacked bars on a time axis, not a line per role on a text axis: roles that spent the
    same amount stay visible, an hour with no cost shows as a gap rather than being left
    out, and the axis labels stay readable however long the span.
    """
    plt = _pyplot()
    _check_suffix(path)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    scope = "all workflows" if workflow is None else f"workflow {_as_text(workflow)}"
    if not rows:
        ax.set_title(f"Cost over time by role ({scope})")
        _nothing_to_draw(ax, "no cost recorded")
    else:
        _cost_bars(ax, rows)
        total = _sum(r["amount_usd"] for r in rows)
        # wrap: a long workflow id or an exact total must not run off the figure
        ax.set_title(f"Cost over time by role ({scope}): {format(total, 'f')} USD", wrap=True)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _cost_bars(ax: Any, rows: Sequence[dict[str, Any]]) -> None:
    mdates: Any = importlib.import_module("matplotlib.dates")  # untyped; with the extra

    hours = {r["hour"]: datetime.strptime(r["hour"], "%Y-%m-%dT%H") for r in rows}
    step = _step(min(hours.values()), max(hours.values()))
    amounts: dict[str, dict[datetime, Decimal]] = {}
    for r in rows:
        by_time = amounts.setdefault(r["role"], {})
        at = step.cut(hours[r["hour"]])
        by_time[at] = MONEY_CONTEXT.add(by_time.get(at, Decimal(0)), Decimal(r["amount_usd"]))
    # Only the buckets with cost: the empty ones between are gaps on the time axis anyway.
    slots = sorted({at for by_time in amounts.values() for at in by_time})
    # The biggest spender at the bottom; ties by name, so the same views draw the same.
    roles = sorted(amounts, key=lambda role: (-_sum(amounts[role].values()), role))
    bottom = [0.0] * len(slots)
    width = step.length.total_seconds() / 86_400 * 0.9  # matplotlib's date unit is a day
    for role in roles:
        heights = [float(amounts[role].get(t, 0)) for t in slots]
        bars = ax.bar(slots, heights, width=width, bottom=bottom, align="edge", label=role)
        for bar in bars:  # an edge of its own colour: a bar of a day on a long axis shows
            bar.set_edgecolor(bar.get_facecolor())
            bar.set_linewidth(0.8)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xlabel(f"{step.name} (UTC)")
    ax.set_ylabel(f"USD per {step.name}")
    locator = mdates.AutoDateLocator(minticks=3, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    # A margin of a fiftieth of the span at least: a bar at either end stays off the spine.
    margin = (slots[-1] - slots[0]) / 50
    ax.set_xlim(
        _shifted(slots[0], -max(step.length / 2, margin)),
        _shifted(slots[-1], max(step.length * 1.5, margin)),
    )
    ax.set_ylim(0, max(bottom) * 1.1 or 1)
    plain = max(bottom) < _PLAIN_BELOW
    ax.ticklabel_format(axis="y", style="plain" if plain else "sci", useOffset=False)
    ax.legend(title="role", loc="upper left", bbox_to_anchor=(1.01, 1))  # off the bars


_MAX_CAUSES = 25
_MAX_LABEL = 50


def _short(label: str) -> str:
    """A long cause (a test id, say) cut in the middle: its start and its end both tell."""
    if len(label) <= _MAX_LABEL:
        return _as_text(label)
    keep = (_MAX_LABEL - 1) // 2
    return _as_text(f"{label[:keep]}…{label[-keep:]}")


def _as_text(recorded: str) -> str:
    """Recorded text drawn as written: matplotlib reads "$...$" as math (a signal such as
    "budget $5 over" came out garbled, and an unbalanced one raised while saving)."""
    return recorded.replace("$", r"\$")


def causes_chart(causes: Sequence[tuple[str, int]], path: Path) -> None:
    """Retry causes as a horizontal bar chart, most frequent on top: the top 25, and a note
    of how many more there are (a bar of their sum would dwarf the rest)."""
    plt = _pyplot()
    ticker: Any = importlib.import_module("matplotlib.ticker")  # untyped; with the extra

    _check_suffix(path)
    shown, rest = list(causes[:_MAX_CAUSES]), causes[_MAX_CAUSES:]
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.35 * len(shown) + 1.4)))
    title = "Retry causes (failing signals)"
    if rest:
        title += f": the {len(shown)} most frequent of {len(causes)}"
    ax.set_title(title)
    if not shown:
        _nothing_to_draw(ax, "no retries recorded")
    else:
        labels = [_short(c) for c, _ in reversed(shown)]
        counts = [n for _, n in reversed(shown)]
        bars = ax.barh(range(len(shown)), counts)
        ax.set_yticks(range(len(shown)), labels)
        ax.bar_label(bars, padding=3)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.set_xlim(0, max(counts) * 1.15)
        xlabel = "retries"
        if rest:
            more = sum(n for _, n in rest)
            xlabel += f"  ({len(rest)} other causes: {more} retries, not drawn)"
        ax.set_xlabel(xlabel)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


@report_app.command("cost")
def cost_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    workflow: WorkflowOpt = None,
    chart: ChartOpt = None,
    limit: LimitOpt = DEFAULT_LIMIT,
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """The cost ledger by workflow, tier and source, with the token breakdown.

    The table shows at most --limit rows (the costliest, when there are more); the title's
    total is over every row.
    """
    with handled(as_json), _views(store, views, no_update=no_update, as_json=as_json) as runner:
        _require_workflow(runner.views, workflow, no_update=no_update)
        rows = reports.cost_rows(runner.views, workflow)
        over_time = reports.cost_over_time(runner.views, workflow, runner.store)
        if chart is not None:
            cost_chart(over_time, chart, workflow=workflow)
    total = _sum(r["amount_usd"] for r in rows)
    if as_json:
        emit_json(
            {
                "ok": True,
                "total_usd": _money(total),
                "rows": reports.json_rows(rows),
                "by_role_and_hour": reports.json_rows(over_time),
                "chart": None if chart is None else str(chart),
            }
        )
        return
    shown, caption = _limited(rows, limit, top=lambda r: r["amount_usd"], first="costliest")
    for table in _cost_tables(
        f"cost ledger: {_money(total)} USD",
        [
            (
                r["workflow_id"] or "(portfolio)",
                r["tier"],
                r["source"],
                _money(r["amount_usd"]),
                r["events"],
                r["input_uncached"],
                r["input_cached"],
                r["input_cache_write"],
                r["input_cache_write_long"],
                r["output_visible"],
                r["output_reasoning"],
            )
            for r in shown
        ],
        caption,
    ):
        console.print(table)
    if chart is not None:
        console.print(f"Chart written to [bold]{safe_text(chart)}[/]")


@report_app.command("roi")
def roi_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    workflow: WorkflowOpt = None,
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Cost per merged PR, merge and modification rates, and their diagnostics."""
    with handled(as_json), _views(store, views, no_update=no_update, as_json=as_json) as runner:
        _require_workflow(runner.views, workflow, no_update=no_update)
        summary = reports.roi_report(runner.views, workflow)
    data = summary.to_dict()
    if as_json:
        emit_json({"ok": True, **data})
        return
    console.print(_table("ROI", ("measure", "value"), list(data.items())))


@report_app.command("plugins")
def plugins_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    limit: LimitOpt = DEFAULT_LIMIT,
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Per plugin: workflows, merge rate, fallback rate and cost per PR."""
    with handled(as_json), _views(store, views, no_update=no_update, as_json=as_json) as runner:
        stats = reports.plugin_report(runner.views)
    if as_json:
        emit_json({"ok": True, "plugins": [s.to_dict() for s in stats]})
        return
    shown, caption = _limited(stats, limit, top=lambda s: s.workflows, first="most used")
    console.print(
        _table(
            "plugin telemetry",
            ("plugin", "workflows", "merge rate", "fallback rate", "cost/PR USD", "PRs landed"),
            [
                (
                    s.plugin_id,
                    s.workflows,
                    s.merge_rate,
                    s.fallback_rate,
                    _money(s.cost_per_pr_usd) if s.cost_per_pr_usd is not None else None,
                    s.landed_prs,
                )
                for s in shown
            ],
            caption,
        )
    )


@report_app.command("gates")
def gates_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    chart: ChartOpt = None,
    limit: LimitOpt = DEFAULT_LIMIT,
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Trust gates: verdicts, score histograms, failing signals and retry causes."""
    with handled(as_json), _views(store, views, no_update=no_update, as_json=as_json) as runner:
        data = reports.gate_report(runner.views)
        if chart is not None:
            causes_chart(data["retry_causes"], chart)
    if as_json:
        emit_json({"ok": True, **data, "chart": None if chart is None else str(chart)})
        return
    gates, caption, scores, scores_caption = _gate_rows(data, limit)
    console.print(
        _table(
            "trust gates",
            ("gate", "passed", "failed", "retries"),
            [(g["gate"], g["passed"], g["failed"], g["retries"]) for g in gates],
            caption,
        )
    )
    console.print(
        _table(
            "score histogram (basis points)",
            ("gate", "verdict", "bucket", "count"),
            [(s["gate"], s["verdict"], _bucket_label(s["bucket"]), s["count"]) for s in scores],
            scores_caption,
        )
    )
    for title, key in (
        ("failing signals", "failing_signals"),
        ("retry causes", "retry_causes"),
        ("refusal causes", "refusal_causes"),
    ):
        causes, caption = _limited(data[key], limit, first="most frequent")  # ranked already
        console.print(_table(title, ("cause", "count"), causes, caption))
    if chart is not None:
        console.print(f"Chart written to [bold]{safe_text(chart)}[/]")


def _bucket_label(bucket: int) -> str:
    """The scores a bucket holds: the top one holds a perfect 10 000 too (``bucket_of``)."""
    top = BUCKET_BP - 1 if bucket < MAX_SCORE - BUCKET_BP else BUCKET_BP
    return f"{bucket}-{bucket + top}"


def _engine_rows(workflow: str, temporal: Path | None, langgraph: Path | None) -> list[Any]:
    rows: list[Any] = []
    for path, parse in (
        (temporal, parse_temporal_history),
        (langgraph, parse_langgraph_checkpoints),
    ):
        if path is None:
            continue
        try:
            # Strict: not UTF-8, NaN (stored as null), a key twice, nesting past the stack
            # are refused by name rather than lost or raised as a traceback.
            document = loads_strict(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        except ValueError as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from None
        rows += parse(document, workflow_id=workflow)
    return rows


def _detail_text(detail: Any) -> str:
    """A trail entry's detail for the table: the payload without its ``kind`` (the event
    column has it) and without empty fields, so the 120 characters go to what was recorded.
    ``--json`` keeps the whole payload."""
    if detail is None:
        return ""
    if isinstance(detail, dict):
        detail = {k: v for k, v in detail.items() if k != "kind" and v is not None}
    return json.dumps(detail, sort_keys=True, default=str)


@report_app.command("trail")
def trail_cmd(
    workflow: Annotated[str, typer.Argument(help="The workflow whose trail to show.")],
    store: StoreOpt = None,
    views: ViewsOpt = None,
    temporal: Annotated[
        Path | None,
        typer.Option("--temporal", help="Merge this Temporal history (JSON export) in."),
    ] = None,
    langgraph: Annotated[
        Path | None,
        typer.Option("--langgraph", help="Merge these LangGraph checkpoints (JSON list) in."),
    ] = None,
    save_history: Annotated[
        bool,
        typer.Option("--save-history", help="Also import the given histories into the views."),
    ] = False,
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """One workflow's audit trail: ledger and engine events in one chronological order.

    Order: (timestamp, source rank, sequence), the engine before the ledger at the same
    instant; see docs/projections.md.
    """
    with handled(as_json), _views(store, views, no_update=no_update, as_json=as_json) as runner:
        engine = _engine_rows(workflow, temporal, langgraph)
        if save_history and engine:
            runner.views.import_engine_history(engine)
            engine = []
        entries = reports.trail(runner.views, runner.store, workflow, extra_engine_rows=engine)
        if not entries:
            raise ConfigError(f"no events for workflow {workflow!r}")
    if as_json:
        emit_json({"ok": True, "workflow_id": workflow, "entries": [e.to_dict() for e in entries]})
        return
    # The nine digits of the order key stay in the JSON; the table shows milliseconds.
    day, times = hoist_date([utc_text(datetime.fromisoformat(e.timestamp)) for e in entries])
    title = f"audit trail of {safe_text(workflow)}" + ("" if day is None else f", on {day}")
    table = Table(title=title)
    for col in ("time (UTC)", "source", "seq", "event", "detail"):
        table.add_column(col, justify="right" if col == "seq" else "left")
    for e, time_ in zip(entries, times, strict=True):
        detail = _detail_text(e.detail)
        cells = (
            time_, e.source, str(e.seq), e.event_type.removeprefix("EVENT_TYPE_"),
            detail if len(detail) <= 120 else detail[:117] + "...",
        )  # fmt: skip
        table.add_row(*(safe_text(c) for c in cells))  # recorded text, not rich markup
    # A Temporal event type is long even without its EVENT_TYPE_ prefix (the JSON keeps
    # it): on a narrow terminal it gives way too, or the detail would be left no width.
    fit(table, give={"detail": "fold", "event": "ellipsis"}, console=console)
    console.print(table)
