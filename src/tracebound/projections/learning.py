"""Stage 7 learning write-back: a knowledge graph of advisories, patches and attempts.

ADR-0034: "KG writes derive from SolutionFound + AttemptCompleted event streams. The KG
itself doesn't need to be append-only, only the events feeding it do." So the graph is two
plain tables a retrieval store can read (``kg_nodes``, ``kg_edges``) and can always be
rebuilt from the log.

Nodes are ``advisory:<id>``, ``patch:<blake3>`` and ``attempt:<uuid>``. Edges:

* ``advisory -solved_by-> patch`` (from ``solution_found``; attrs: outcome, workflow);
* ``attempt -produced-> patch`` (from ``solution_found``);
* ``advisory -attempted-> attempt`` (from ``attempt_completed``; attrs: outcome, verdict),
  so failures are learned from too.

Attributes merge key by key, later events winning, which keeps the result independent of
how the log was cut into batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tracebound.projections.base import Column, EventRecord, Rows, Table

__all__ = ["KG_EDGES", "KG_NODES", "LearningProjection", "solutions_for"]

KG_NODES = Table(
    "kg_nodes",
    (
        Column("node_id"),
        Column("node_type"),
        Column("attrs", "json"),
        Column("first_position", "integer"),
        Column("last_position", "integer"),
    ),
    key=("node_id",),
    narrow=True,
    indexes=(("node_type",),),
)
KG_EDGES = Table(
    "kg_edges",
    (
        Column("src"),
        Column("edge"),
        Column("dst"),
        Column("attrs", "json"),
        Column("position", "integer"),
    ),
    key=("src", "edge", "dst"),
    narrow=True,
    indexes=(("dst", "edge"),),
)


# Attributes are merged into the cached row's own dict, in place: the cache owns its rows
# (a row loaded from the sink is decoded afresh), so no other row can share that dict.


def _node(rows: Rows, node_id: str, node_type: str, position: int, **attrs: Any) -> None:
    key = (node_id,)
    row = rows.get(KG_NODES, key)
    if row is None:
        row = {
            "node_id": node_id,
            "node_type": node_type,
            "attrs": attrs,
            "first_position": position,
            "last_position": position,
        }
    else:
        if attrs:
            row["attrs"].update(attrs)
        row["last_position"] = position
    rows.put(KG_NODES, key, row)


def _edge(rows: Rows, src: str, edge: str, dst: str, position: int, **attrs: Any) -> None:
    key = (src, edge, dst)
    row = rows.get(KG_EDGES, key)
    if row is None:
        row = {"src": src, "edge": edge, "dst": dst, "attrs": attrs, "position": position}
    else:
        row["attrs"].update(attrs)
        row["position"] = position
    rows.put(KG_EDGES, key, row)


class LearningProjection:
    """``kg_nodes`` and ``kg_edges`` from ``solution_found`` and ``attempt_completed``."""

    name = "learning"
    version = 1
    tables = (KG_NODES, KG_EDGES)
    kinds: frozenset[str] | None = frozenset({"solution_found", "attempt_completed"})

    def apply(self, record: EventRecord, rows: Rows) -> None:
        p = record["payload"]
        pos: int = record["position"]
        wf = record["workflow_id"]
        advisory = f"advisory:{p['advisory_id']}"
        attempt = f"attempt:{p['attempt_id']}"
        _node(rows, advisory, "advisory", pos)
        if record["event_type"] == "solution_found":
            patch = f"patch:{p['patch_digest_blake3']}"
            _node(rows, patch, "patch", pos)
            _node(rows, attempt, "attempt", pos, workflow_id=wf, attempt_index=p["attempt_index"])
            _edge(rows, advisory, "solved_by", patch, pos, outcome=p["outcome"], workflow_id=wf)
            _edge(rows, attempt, "produced", patch, pos)
        else:
            _node(
                rows,
                attempt,
                "attempt",
                pos,
                workflow_id=wf,
                attempt_index=p["attempt_index"],
                outcome=p["outcome"],
                trust_outcome_passed=p["trust_outcome_passed"],
                cost_usd=p["cost_usd"],
                duration_ms=p["duration_ms"],
            )
            _edge(
                rows,
                advisory,
                "attempted",
                attempt,
                pos,
                outcome=p["outcome"],
                trust_outcome_passed=p["trust_outcome_passed"],
            )


def solutions_for(edges: Iterable[Mapping[str, Any]], advisory_id: str) -> list[str]:
    """The patch digests known to solve an advisory: what a retrieval store looks up."""
    src = f"advisory:{advisory_id}"
    return sorted(
        e["dst"].removeprefix("patch:")
        for e in edges
        if e["src"] == src and e["edge"] == "solved_by"
    )
