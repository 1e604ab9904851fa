"""The report charts and the per-workflow cost over time, reviewed by looking at them.

Found by drawing the charts of real ledgers: a month of hourly cost drew ~400 overlapping
text labels, two roles that spent the same hid one another, empty charts drew meaningless
axes (and matplotlib warned on stderr), retry counts had ticks at 0.2, and a long list of
causes made a chart taller than matplotlib can draw.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tracebound.cli import report
from tracebound.events import Event
from tracebound.events.catalog import CostIncurred
from tracebound.projections import ProjectionRunner, SQLiteViews
from tracebound.projections.reports import cost_over_time
from tracebound.store.sqlite import SQLiteStore

pytest.importorskip("matplotlib")


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the charts save (kept open, so their axes can be inspected)."""
    figures: list[Any] = []
    monkeypatch.setattr(report, "_save", lambda fig, path: figures.append(fig))
    return figures


def _hours(n: int, roles: tuple[str, ...] = ("Executor", "Planner")) -> list[dict[str, Any]]:
    t0 = datetime(2026, 5, 18)
    return [
        {"hour": f"{t0 + timedelta(hours=h):%Y-%m-%dT%H}", "role": role, "amount_usd": "0.01"}
        for h in range(n)
        for role in roles
    ]


def test_a_month_of_hourly_cost_has_readable_time_labels(drawn: list[Any]) -> None:
    report.cost_chart(_hours(24 * 30), Path("cost.png"))
    (ax,) = drawn[0].axes
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert 2 <= len(labels) <= 12  # before: one text label per hour, 720 of them
    assert ax.get_xlabel() == "day (UTC)"  # over two weeks: a bar per day
    assert len(ax.patches) == 2 * 30  # two roles stacked on each of 30 days
    assert ax.get_title().endswith(": 14.40 USD")


def test_roles_that_spent_the_same_are_both_visible(drawn: list[Any]) -> None:
    report.cost_chart(_hours(3), Path("cost.png"), workflow="wf-1")
    (ax,) = drawn[0].axes
    # Stacked: the second role's bars start on top of the first's instead of hiding behind.
    bottoms = sorted({round(p.get_y(), 6) for p in ax.patches})
    assert bottoms == [0.0, 0.01]
    assert ax.get_title() == "Cost over time by role (workflow wf-1): 0.06 USD"
    assert ax.get_xlabel() == "hour (UTC)"


def test_empty_charts_say_so_without_warnings(drawn: list[Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: "No artists with labels found to put in legend"
        report.cost_chart([], Path("cost.png"))
        report.causes_chart([], Path("retries.png"))
    texts = [t.get_text() for fig in drawn for ax in fig.axes for t in ax.texts]
    assert texts == ["no cost recorded", "no retries recorded"]
    assert not any(ax.axison for fig in drawn for ax in fig.axes)


def test_retry_causes_have_whole_counts_and_at_most_25_bars(drawn: list[Any]) -> None:
    causes = [
        (f"test_failure:tests/{'deep/' * 20}test_{i}.py::test_case_{i}", 90 - i) for i in range(80)
    ]
    report.causes_chart(causes, Path("retries.png"))
    (ax,) = drawn[0].axes
    assert len(ax.patches) == 25
    assert ax.get_title() == "Retry causes (failing signals): the 25 most frequent of 80"
    assert "55 other causes: " in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert max(map(len, labels)) <= 50 and labels[-1].endswith("test_case_0")
    report.causes_chart([("tests", 1), ("lint", 1)], Path("retries.png"))
    ticks = drawn[1].axes[0].get_xticks()
    assert all(float(t).is_integer() for t in ticks)  # before: 0.2, 0.4, ... retries


def test_cost_from_a_clock_that_came_back_at_1970_shows_beside_todays(drawn: list[Any]) -> None:
    # A VM whose RTC reset wrote one cost at 1970: the chart was 20 000 daily slots (15 s of
    # drawing), each bar a fraction of a pixel wide, the 1970 one on the axis's spine.
    rows = [
        {"hour": "1970-01-01T00", "role": "Executor", "amount_usd": "1"},
        {"hour": "2026-05-18T12", "role": "Executor", "amount_usd": "1"},
    ]
    report.cost_chart(rows, Path("cost.png"))
    (ax,) = drawn[0].axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("month (UTC)", "USD per month")
    assert len(ax.patches) == 2  # the months with cost, not every month between
    left, right = ax.get_xlim()
    assert all(left < p.get_x() < p.get_x() + p.get_width() < right for p in ax.patches)
    assert all(p.get_linewidth() > 0 for p in ax.patches)  # at least a line, however long
    report.cost_chart([{**rows[0], "hour": "0001-01-01T00"}, {**rows[1], "hour": "9999-12-31T23"}],
                      Path("cost.png"))  # fmt: skip
    assert drawn[1].axes[0].get_xlabel() == "year (UTC)"  # was an OverflowError


def test_an_unknown_chart_suffix_is_refused_before_drawing(drawn: list[Any]) -> None:
    from tracebound.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\.png or \.svg"):
        report.cost_chart(_hours(1), Path("cost.gif"))
    assert drawn == []


def test_cost_over_time_of_one_workflow_counts_only_its_events(tmp_path: Path) -> None:
    t0 = datetime(2026, 5, 18, 9, tzinfo=UTC)
    store = SQLiteStore(tmp_path / "ledger", create=True)
    views = SQLiteViews(tmp_path / "views.db")
    try:
        for i, (wf, role, amount) in enumerate(
            [("wf-a", "Planner", "0.1"), ("wf-b", "Planner", "0.2"), ("wf-a", None, "0.3")]
        ):
            cost = CostIncurred.model_validate(
                {"tier": "direct", "amount_usd": amount, "source": "x", "role": role}
            )
            store.append(
                f"s-{i}",
                [Event.create(cost, event_id=UUID(int=i + 1), timestamp=t0, workflow_id=wf)],
            )
        ProjectionRunner(store, views).run()
        rows = cost_over_time(views, "wf-a", store)
        assert [(r["role"], r["amount_usd"], r["events"]) for r in rows] == [
            ("Planner", Decimal("0.1"), 1),
            ("unattributed", Decimal("0.3"), 1),
        ]
        every = cost_over_time(views)
        assert [(r["role"], r["amount_usd"]) for r in every] == [
            ("Planner", Decimal("0.3")),
            ("unattributed", Decimal("0.3")),
        ]
        assert cost_over_time(views, "wf-none", store) == []
    finally:
        views.close()
        store.close()


def test_an_axis_of_vast_amounts_shows_no_float_noise(drawn: list[Any]) -> None:
    amount = "123456789012345678901234567890.123456789"
    report.cost_chart([{"hour": "2026-05-18T09", "role": "Executor", "amount_usd": amount}],
                      Path("cost.png"))  # fmt: skip
    fig = drawn[0]
    fig.canvas.draw()  # tick labels are formatted when drawn
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    # Before: plain labels of the floats, "1200000000000000003793529864192" and the like.
    assert labels and all(len(label) <= 8 for label in labels), labels
    assert ax.yaxis.get_offset_text().get_text()  # the power of ten, above the axis
    assert ax.get_title().endswith(f": {amount} USD")  # the title keeps the exact sum


def test_a_long_title_stays_inside_the_chart(drawn: list[Any]) -> None:
    workflow = "wf-remediate-2cfd95df-21f0-41d4-abd0-03a907d435d9"
    amount = "123456789012345678901234567890.123456789"
    report.cost_chart([{"hour": "2026-05-18T09", "role": "Executor", "amount_usd": amount}],
                      Path("cost.png"), workflow=workflow)  # fmt: skip
    fig = drawn[0]
    fig.canvas.draw()
    (ax,) = fig.axes
    box = ax.title.get_window_extent()
    width = fig.get_figwidth() * fig.dpi
    # Before: one line wider than the figure, cut off at both ends.
    assert box.x0 >= 0 and box.x1 <= width, (box, width)
    assert workflow in ax.get_title() and amount in ax.get_title()


def test_recorded_text_with_dollar_signs_is_drawn_as_written(drawn: list[Any]) -> None:
    cause = r"budget $\frac{1$ over"  # a signal is free text; "$" starts matplotlib math
    report.causes_chart([(cause, 2), ("price $5 or $6", 1)], Path("retries.png"))
    report.cost_chart(_hours(1), Path("cost.png"), workflow="wf-$x$")
    for fig in drawn:
        fig.canvas.draw()  # before: ParseSyntaxException (a traceback from report gates)
    labels = {t.get_text() for t in drawn[0].axes[0].get_yticklabels()}
    assert {label.replace(r"\$", "$") for label in labels} == {cause, "price $5 or $6"}
    assert (
        drawn[1]
        .axes[0]
        .get_title()
        .replace(r"\$", "$")
        .startswith("Cost over time by role (workflow wf-$x$)")
    )
