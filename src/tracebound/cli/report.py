"""`tracebound report cost|roi|plugins|gates|trail`: read the materialised views.

Each report first catches the views up with the log (``--no-update`` skips that), so what
it prints is current. ``--json`` prints one document; ``--chart FILE.png|.svg`` (cost,
gates) draws with matplotlib, an optional extra: ``pip install 'tracebound[charts]'``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from tracebound.cli._common import JsonOpt, StoreOpt, console, emit_json, handled
from tracebound.cli._tables import fit, hoist_date
from tracebound.cli.project import ViewsOpt, open_runner
from tracebound.errors import ConfigError
from tracebound.projections import reports
from tracebound.projections.trail import parse_langgraph_checkpoints, parse_temporal_history

__all__ = ["report_app"]

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


def _money(value: Any) -> str:
    return "-" if value is None else format(Decimal(value), "f")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A report table: the first column (a name or id) gives way on a narrow terminal."""
    table = _unfitted(title, columns, rows)
    fit(table, give={columns[0]: "ellipsis"}, console=console)
    return table


def _unfitted(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    return table


_COST_COLUMNS = ("workflow", "tier", "source", "USD", "events")
_TOKEN_COLUMNS = ("in\nuncached", "in\ncached", "out\nvisible", "out\nreasoning")


def _cost_tables(title: str, rows: Sequence[Sequence[Any]]) -> list[Table]:
    """The cost ledger in one table; on a terminal too narrow for it, the token counts go
    to a second table, keyed by the same workflow, tier and source."""
    table = _unfitted(title, _COST_COLUMNS + _TOKEN_COLUMNS, rows)
    if fit(table, give={"workflow": "ellipsis"}, console=console):
        return [table]
    key = len(_COST_COLUMNS)
    return [
        _table(title, _COST_COLUMNS, [row[:key] for row in rows]),
        _table(
            "tokens", _COST_COLUMNS[:3] + _TOKEN_COLUMNS, [(*row[:3], *row[key:]) for row in rows]
        ),
    ]


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or a clear error if the extra is missing."""
    try:
        import matplotlib  # noqa: PLC0415 - optional extra, imported only for --chart

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigError("charts need matplotlib: pip install 'tracebound[charts]'") from exc
    return plt


def _save(fig: Any, path: Path) -> None:
    if path.suffix.lower() not in {".png", ".svg"}:
        raise ConfigError(f"a chart is written as .png or .svg, not {path.suffix or 'no suffix'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # A fixed date in the SVG metadata, so the same views draw the same file.
    fig.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)


def cost_chart(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Cost over time, one line per role (hourly buckets)."""
    plt = _pyplot()
    hours = sorted({r["hour"] for r in rows})
    roles = sorted({r["role"] for r in rows})
    fig, ax = plt.subplots(figsize=(8, 4))
    for role in roles:
        by_hour = {r["hour"]: Decimal(r["amount_usd"]) for r in rows if r["role"] == role}
        ax.plot(hours, [float(by_hour.get(h, 0)) for h in hours], marker="o", label=role)
    ax.set_title("Cost over time by role")
    ax.set_xlabel("hour (UTC)")
    ax.set_ylabel("USD")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def causes_chart(causes: Sequence[tuple[str, int]], path: Path) -> None:
    """Retry causes as a horizontal bar chart, most frequent on top."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, max(2.0, 0.4 * len(causes) + 1)))
    labels = [c for c, _ in reversed(causes)]
    ax.barh(labels, [n for _, n in reversed(causes)])
    ax.set_title("Retry causes (failing signals)")
    ax.set_xlabel("retries")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


@report_app.command("cost")
def cost_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    workflow: WorkflowOpt = None,
    chart: ChartOpt = None,
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """The cost ledger by workflow, tier and source, with the token breakdown."""
    with handled(as_json), open_runner(store, views, update=not no_update) as runner:
        rows = reports.cost_rows(runner.views, workflow)
        over_time = reports.cost_over_time(runner.views)
        if chart is not None:
            cost_chart(over_time, chart)
    total = sum((r["amount_usd"] for r in rows), Decimal(0))
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
                r["output_visible"],
                r["output_reasoning"],
            )
            for r in rows
        ],
    ):
        console.print(table)
    if chart is not None:
        console.print(f"Chart written to [bold]{chart}[/]")


@report_app.command("roi")
def roi_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    workflow: WorkflowOpt = None,
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Cost per merged PR, merge and modification rates, and their diagnostics."""
    with handled(as_json), open_runner(store, views, update=not no_update) as runner:
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
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Per plugin: workflows, merge rate, fallback rate and cost per PR."""
    with handled(as_json), open_runner(store, views, update=not no_update) as runner:
        stats = reports.plugin_report(runner.views)
    if as_json:
        emit_json({"ok": True, "plugins": [s.to_dict() for s in stats]})
        return
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
                for s in stats
            ],
        )
    )


@report_app.command("gates")
def gates_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    chart: ChartOpt = None,
    no_update: NoUpdateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Trust gates: verdicts, score histograms, failing signals and retry causes."""
    with handled(as_json), open_runner(store, views, update=not no_update) as runner:
        data = reports.gate_report(runner.views)
        if chart is not None:
            causes_chart(data["retry_causes"], chart)
    if as_json:
        emit_json({"ok": True, **data, "chart": None if chart is None else str(chart)})
        return
    console.print(
        _table(
            "trust gates",
            ("gate", "passed", "failed", "retries"),
            [(g["gate"], g["passed"], g["failed"], g["retries"]) for g in data["gates"]],
        )
    )
    console.print(
        _table(
            "score histogram (basis points)",
            ("gate", "verdict", "bucket", "count"),
            [
                (s["gate"], s["verdict"], f"{s['bucket']}-{s['bucket'] + 999}", s["count"])
                for s in data["scores"]
            ],
        )
    )
    for title, key in (
        ("failing signals", "failing_signals"),
        ("retry causes", "retry_causes"),
        ("refusal causes", "refusal_causes"),
    ):
        console.print(_table(title, ("cause", "count"), data[key]))
    if chart is not None:
        console.print(f"Chart written to [bold]{chart}[/]")


def _engine_rows(workflow: str, temporal: Path | None, langgraph: Path | None) -> list[Any]:
    rows: list[Any] = []
    for path, parse in (
        (temporal, parse_temporal_history),
        (langgraph, parse_langgraph_checkpoints),
    ):
        if path is None:
            continue
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        rows += parse(document, workflow_id=workflow)
    return rows


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
    with handled(as_json), open_runner(store, views, update=not no_update) as runner:
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
    day, times = hoist_date([e.timestamp for e in entries], sep="T")
    title = f"audit trail of {workflow}" + ("" if day is None else f", on {day}")
    table = Table(title=title)
    for col in ("time (UTC)", "source", "seq", "event", "detail"):
        table.add_column(col, justify="right" if col == "seq" else "left")
    for e, time_ in zip(entries, times, strict=True):
        detail = json.dumps(e.detail, sort_keys=True, default=str) if e.detail is not None else ""
        table.add_row(
            time_, e.source, str(e.seq), e.event_type,
            detail if len(detail) <= 120 else detail[:117] + "...",
        )  # fmt: skip
    fit(table, give={"detail": "fold"}, console=console)
    console.print(table)
