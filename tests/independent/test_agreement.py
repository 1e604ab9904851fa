"""The independent verifier (tests/independent/verify_evidence.py, written from
docs/evidence-format.md) and tracebound's own accept and refuse the same files.

Each file is made for real (a recorded run's evidence, `tracebound prove` output, a log copied
to JSONL by `tracebound copy`), then edited as a forger or a damaged disk would. Any verdict the
two verifiers disagree on is a bug in one of them, or a gap in the spec.
"""

# ruff: noqa: F811 - ``world`` is the forgeries module's fixture, imported to be shared

from __future__ import annotations

import base64
import contextlib
import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import CLI, ready_cli
from tests.independent import verify_evidence as iv
from tests.unit.export.test_evidence import VERIFIER
from tests.unit.export.test_evidence_forgeries import (
    World,
    _cut_to_gate,
    _reseal,
    world,  # noqa: F401 - the module fixture, shared
)
from tests.unit.export.test_evidence_spend import (
    IMPOSTOR,
    Spent,
    spent,  # noqa: F401 - the module fixture, shared
)
from tracebound.errors import TraceboundError
from tracebound.export.evidence import EvidenceInvalid, verify_evidence
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.stream_head import open_stream_head, sign_stream_head
from tracebound.ledger import InclusionBundle, verify_bundle

KEY = iv.Key.parse(VERIFIER.format())
Doc = dict[str, Any]


def _tracebound(data: bytes, tmp: Path, **kw: Any) -> str:
    """tracebound's verdict, reading the bytes from a file as `verify-evidence` does."""
    path = tmp / "evidence.json"
    path.write_bytes(data)
    try:
        verify_evidence(path, VERIFIER, **kw)
    except EvidenceInvalid as exc:
        return exc.part
    return "ok"


def _independent(data: bytes, **kw: Any) -> str:
    try:
        iv.verify_evidence(data, KEY, **kw)
    except iv.Refused as exc:
        return exc.part
    return "ok"


def _flip_body(doc: Doc) -> Doc:
    body = bytearray(base64.b64decode(doc["events"][1]["body"]))
    body[body.index(b'"event_type":"') + 15] ^= 0x01
    doc["events"][1]["body"] = base64.b64encode(bytes(body)).decode()
    return doc


def _drop_middle(doc: Doc) -> Doc:
    gone = doc["events"].pop(2)["position"]
    doc["proofs"] = [p for p in doc["proofs"] if p["position"] != gone]
    return doc


def _swap_proofs(doc: Doc) -> Doc:
    a, b = doc["proofs"][0], doc["proofs"][1]
    a["proof"], b["proof"] = b["proof"], a["proof"]
    return doc


def _edit_checkpoint(doc: Doc) -> Doc:
    origin, size, root, rest = doc["checkpoint"].split("\n", 3)
    doc["checkpoint"] = "\n".join(
        [origin, size, root[:-2] + ("A=" if root[-2] != "A" else "B="), rest]
    )
    return doc


def _strip_head(doc: Doc) -> Doc:
    doc["run_head"] = None
    return doc


def _status(doc: Doc) -> Doc:
    doc["status"] = "failed" if doc["status"] != "failed" else "completed"
    return doc


def _extra_member(doc: Doc) -> Doc:
    doc["approved_by"] = "alice"
    return doc


def _tree_size_true(doc: Doc) -> Doc:
    doc["tree_size"] = True
    return doc


def _unsigned(doc: Doc) -> Doc:
    doc.update(checkpoint=None, tree_size=None, proofs=[], run_head=None)
    doc["costs"].update(proofs=[], head=None)
    return doc


def _digest(doc: Doc) -> Doc:
    doc["artifacts"][0]["digest"] = "sha256:" + "0" * 64
    return doc


def _v1(doc: Doc) -> Doc:
    doc["format"] = "tracebound-evidence/1"
    del doc["run_head"], doc["costs"]
    return doc


def _v2(doc: Doc) -> Doc:
    """The downgrade: the spend stream dropped, relabelled as the format that lacks it."""
    doc["format"] = "tracebound-evidence/2"
    del doc["costs"]
    return doc


def _proof_too_long(doc: Doc) -> Doc:
    doc["proofs"][0]["proof"] = doc["proofs"][0]["proof"] + ["00" * 32] * 65
    return doc


def _cosigned(doc: Doc) -> Doc:
    doc["checkpoint"] += "\u2014 witness " + "A" * 92 + "==\n"  # another key's line
    return doc


def _bad_key_name(doc: Doc) -> Doc:
    doc["checkpoint"] += "\u2014 wit+ness " + "A" * 92 + "==\n"  # a name C2SP forbids
    return doc


def _surrogate_origin(doc: Doc) -> Doc:
    doc["checkpoint"] = "\ud800" + doc["checkpoint"]
    return doc


def _head_as_checkpoint(doc: Doc) -> Doc:
    doc["checkpoint"] = doc["run_head"]
    return doc


MUTATIONS: dict[str, Callable[[Doc], Doc]] = {
    "genuine": lambda d: d,
    "flipped byte in a record": _flip_body,
    "dropped event": _drop_middle,
    "swapped proofs": _swap_proofs,
    "edited checkpoint": _edit_checkpoint,
    "stripped run head": _strip_head,
    "edited status": _status,
    "extra member": _extra_member,
    "tree_size true": _tree_size_true,
    "unsigned": _unsigned,
    "edited digest": _digest,
    "relabelled v1": _v1,
    "relabelled v2": _v2,
    "proof too long": _proof_too_long,
    "cut to the gate": _cut_to_gate,
    "a witness cosignature": _cosigned,
    "a key name with +": _bad_key_name,
    "a lone surrogate in the checkpoint": _surrogate_origin,
    "the run head as checkpoint": _head_as_checkpoint,
}


def _files(world: World) -> list[tuple[str, bytes]]:
    out = []
    for label, doc in world._asdict().items():
        for name, edit in MUTATIONS.items():
            if name == "cut to the gate" and label != "resumed":
                continue
            edited = edit(copy.deepcopy(doc))
            with contextlib.suppress(TraceboundError):  # some edits cannot be canonicalised
                _reseal(edited)
            out.append((f"{label}: {name}", json.dumps(edited).encode()))
        raw = json.dumps(doc).encode()
        out.append(
            (
                f"{label}: flipped byte, not resealed",
                raw.replace(b'"run_id": "', b'"run_id": "x', 1),
            )
        )
        out.append((f"{label}: a key twice", raw[:-1] + b', "status": "completed"}'))
        out.append((f"{label}: not UTF-8", raw[:-1] + b', "x": "\xff"}'))
    head_of_first = world.first["run_head"]
    out.append(
        (
            "head of another file",
            json.dumps(_reseal({**copy.deepcopy(world.again), "run_head": head_of_first})).encode(),
        )
    )
    return out


@pytest.mark.parametrize("require_head", [False, True])
@pytest.mark.parametrize("require_signed", [True, False])
def test_both_verifiers_agree_on_every_evidence_file(
    world: World, require_head: bool, require_signed: bool, tmp_path: Path
) -> None:
    kw = {"require_head": require_head, "require_signed": require_signed}
    verdicts = {
        name: (_tracebound(data, tmp_path, **kw), _independent(data, **kw))
        for name, data in _files(world)
    }
    disagree = {name: v for name, v in verdicts.items() if v[0] != v[1]}
    assert disagree == {}
    # And the verdicts are not all one: the genuine files pass, the damaged ones do not.
    assert verdicts["resumed: genuine"] == ("ok", "ok")
    assert verdicts["resumed: flipped byte in a record"][0] == "record"
    assert verdicts["resumed: cut to the gate"][0] == "head"
    assert verdicts["head of another file"][0] == "head"


# -- the spend stream (tracebound-evidence/3) and committed older files -----------------------

FIXTURES = Path(__file__).parents[1] / "fixtures" / "evidence"


def _drop_last_cost(doc: Doc) -> Doc:
    gone = doc["costs"]["events"].pop()["position"]
    doc["costs"]["proofs"] = [p for p in doc["costs"]["proofs"] if p["position"] != gone]
    return doc


def _edit_amount(doc: Doc) -> Doc:
    entry = doc["costs"]["events"][0]
    body = base64.b64decode(entry["body"]).replace(b'"0.0213"', b'"0.0013"')
    entry["body"] = base64.b64encode(body).decode()
    return doc


def _forged_cost_head(doc: Doc) -> Doc:
    head = open_stream_head(doc["costs"]["head"], VERIFIER)
    doc["costs"]["head"] = sign_stream_head(head, IMPOSTOR)
    return doc


def _strip_cost_head(doc: Doc) -> Doc:
    doc["costs"]["head"] = None
    return doc


def _spend_files(spent: Spent) -> dict[str, bytes]:
    edits: dict[str, Callable[[Doc], Doc]] = {
        "genuine": lambda d: d,
        "edited amount": _edit_amount,
        "dropped last cost": _drop_last_cost,
        "forged cost head": _forged_cost_head,
        "stripped cost head": _strip_cost_head,
        "downgraded to v2": _v2,
        "another run's costs": lambda d: {**d, "costs": copy.deepcopy(spent.other["costs"])},
        "another run's cost record": lambda d: {
            **d,
            "costs": {
                **d["costs"],
                "events": [d["costs"]["events"][0], spent.other["costs"]["events"][0]],
                "proofs": [d["costs"]["proofs"][0], spent.other["costs"]["proofs"][0]],
            },
        },
        "the head of a run without spend": lambda d: {
            **d,
            "costs": {
                **d["costs"],
                "events": [],
                "proofs": [],
                "head": spent.free["costs"]["head"],
            },
        },
        "unsigned": _unsigned,
    }
    out = {}
    for base in ("costly", "free", "late", "later"):
        for name, edit in edits.items():
            if base != "costly" and name != "genuine":
                continue
            doc = edit(copy.deepcopy(getattr(spent, base)))
            out[f"{base}: {name}"] = json.dumps(_reseal(doc)).encode()
    for path in sorted(FIXTURES.glob("v2-*.json")):
        out[f"committed {path.name}"] = path.read_bytes()
    return out


@pytest.mark.parametrize(
    "kw",
    [{}, {"require_head": True}, {"require_spend": True}, {"require_signed": False}],
    ids=["plain", "require_head", "require_spend", "unsigned allowed"],
)
def test_both_verifiers_agree_on_the_spend_stream(
    spent: Spent, kw: dict[str, bool], tmp_path: Path
) -> None:
    files = _spend_files(spent)
    verdicts = {
        n: (_tracebound(d, tmp_path, **kw), _independent(d, **kw)) for n, d in files.items()
    }
    assert {n: v for n, v in verdicts.items() if v[0] != v[1]} == {}
    assert verdicts["costly: genuine"] == ("ok", "ok")
    assert verdicts["costly: dropped last cost"][0] == "head"
    assert verdicts["costly: edited amount"][0] == "record"
    assert verdicts["costly: forged cost head"][0] == "head"
    assert verdicts["costly: another run's cost record"][0] == "record"
    downgraded = "ok" if not kw.get("require_spend") else "head"
    assert verdicts["costly: downgraded to v2"][0] == downgraded


def test_both_verifiers_state_the_same_spend(spent: Spent) -> None:
    for name, data in _spend_files(spent).items():
        if name.endswith("genuine"):
            ours = verify_evidence(json.loads(data), VERIFIER).as_dict()["spend"]
            theirs = iv.verify_evidence(data, KEY).spend
            assert theirs == {k: v for k, v in ours.items() if k not in {"stream_id", "head"}}


@pytest.mark.parametrize("name", ["v2-completed.json", "v2-gated.json"])
def test_committed_version_2_files_verify_exactly_as_before(name: str) -> None:
    """Written by the /2 writer (before the spend stream): both verifiers accept them, with
    their run head, and say nothing about spend; an edited copy is refused by both."""
    data = (FIXTURES / name).read_bytes()
    doc = json.loads(data)
    assert doc["format"] == "tracebound-evidence/2" and "costs" not in doc
    report = verify_evidence(FIXTURES / name, VERIFIER, require_head=True)
    assert report.run_head is not None and report.spend is None
    assert report.as_dict()["spend"] is None
    assert report.status == ("completed" if "completed" in name else "gated")
    summary = iv.verify_evidence(data, KEY, require_head=True)
    assert (summary.status, summary.events, summary.spend) == (report.status, report.events, None)
    edited = _reseal(_flip_body(copy.deepcopy(doc)))
    assert _independent(json.dumps(edited).encode()) == "record"
    with pytest.raises(EvidenceInvalid):
        verify_evidence(edited, VERIFIER)


# -- inclusion proofs from `tracebound prove` ------------------------------------------------


@pytest.fixture(scope="module")
def proved(tmp_path_factory: pytest.TempPathFactory) -> tuple[CLI, str, list[bytes]]:
    cli = ready_cli(tmp_path_factory.mktemp("proofs"), 7, checkpoint=True)
    key = cli.json("keys", "show")["verifier_key"]
    out = []
    for position in (1, 4, 7):
        proc = cli.run("prove", str(position), "--json")
        assert proc.returncode == 0, proc.stderr
        out.append(proc.stdout.encode())
    return cli, key, out


def _bundle_verdict(data: bytes, key: str) -> bool:
    try:
        verify_bundle(InclusionBundle.from_json(data), NoteVerifier.parse(key))
    except TraceboundError:
        return False
    return True


def _independent_proof(data: bytes, key: str) -> bool:
    try:
        iv.verify_proof(data, iv.Key.parse(key))
    except iv.Refused:
        return False
    return True


def _proof_edits(proofs: list[bytes]) -> dict[str, bytes]:
    a, b = json.loads(proofs[0]), json.loads(proofs[1])
    out = {f"genuine {i}": p for i, p in enumerate(proofs)}
    edits: dict[str, Doc] = {
        "swapped paths": {**a, "proof": b["proof"]},
        "other position": {**a, "position": b["position"]},
        "other stream": {**a, "stream_id": b["stream_id"]},
        "record of another": {
            **a,
            "record": b["record"],
            "hash": b["hash"],
            "prev_hash": b["prev_hash"],
        },
        "edited checkpoint": {**a, "checkpoint": a["checkpoint"].replace("\n7\n", "\n8\n")},
        "tree_size off": {**a, "tree_size": a["tree_size"] + 1},
        "upper-case hex": {**a, "hash": a["hash"].upper()},
        "extra member": {**a, "note": "trust me"},
        "position 0": {**a, "position": 0},
        "lone surrogate in checkpoint": {**a, "checkpoint": "\ud800" + a["checkpoint"]},
        "bad cosignature line": {**a, "checkpoint": a["checkpoint"] + "\u2014 a+b AAAAAAA=\n"},
    }
    out.update({k: json.dumps(v).encode() for k, v in edits.items()})
    out["flipped record byte"] = proofs[0].replace(b'"record": "ey', b'"record": "ez', 1)
    return out


def test_both_verifiers_agree_on_every_proof(proved: tuple[CLI, str, list[bytes]]) -> None:
    _, key, proofs = proved
    verdicts = {
        n: (_bundle_verdict(d, key), _independent_proof(d, key))
        for n, d in _proof_edits(proofs).items()
    }
    assert {n: v for n, v in verdicts.items() if v[0] != v[1]} == {}
    assert verdicts["genuine 0"] == (True, True) and verdicts["swapped paths"] == (False, False)


def test_the_cli_agrees_on_genuine_and_swapped_proofs(proved: tuple[CLI, str, list[bytes]]) -> None:
    cli, key, proofs = proved
    edits = _proof_edits(proofs)
    for name in ("genuine 1", "swapped paths", "other stream"):
        path = cli.cwd / "p.json"
        path.write_bytes(edits[name])
        code = cli.run("verify-proof", str(path), "--verifier-key", key).returncode
        assert code == (0 if _independent_proof(edits[name], key) else 1), name


# -- a whole log, copied to JSONL ------------------------------------------------------------


def _log_ok(directory: Path, key: str) -> bool:
    try:
        iv.verify_log(directory, iv.Key.parse(key))
    except iv.Refused:
        return False
    return True


def _damage_log(directory: Path, how: str) -> None:
    log = directory / "log.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    if how == "flipped byte":
        lines[3] = lines[3].replace(b'"amount_usd":"0.', b'"amount_usd":"1.', 1)
    elif how == "dropped line":
        del lines[2]
    elif how == "cut tail":
        del lines[-1]
    elif how == "swapped lines":
        lines[1], lines[2] = lines[2], lines[1]
    log.write_bytes(b"".join(lines))
    if how == "edited checkpoint":
        cps = directory / "checkpoints.jsonl"
        cps.write_bytes(cps.read_bytes().replace(b"\\n7\\n", b"\\n6\\n", 1))


@pytest.mark.parametrize(
    "how",
    ["genuine", "flipped byte", "dropped line", "cut tail", "swapped lines", "edited checkpoint"],
)
def test_both_verifiers_agree_on_a_whole_log(
    proved: tuple[CLI, str, list[bytes]], how: str
) -> None:
    cli, key, _ = proved
    target = cli.cwd / f"copy-{how.replace(' ', '-')}"
    shutil.rmtree(target, ignore_errors=True)
    proc = cli.run("copy", "sqlite:///.tracebound/ledger.db", f"jsonl:///{target.name}")
    assert proc.returncode == 0, proc.stderr
    assert iv.verify_log(target, iv.Key.parse(key)) == (7, 7)
    _damage_log(target, how)
    code = cli.run("verify", "--store", f"jsonl:///{target.name}", "--verifier-key", key).returncode
    assert code in (0, 1)
    assert _log_ok(target, key) == (code == 0), how
    assert (code == 0) == (how == "genuine")
