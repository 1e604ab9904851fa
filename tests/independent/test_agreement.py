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
import itertools
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.conftest import shared_vectors_dir
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
from tests.unit.integrity.test_consistency_bundle import K1, K2, K3, ORIGIN, build_history
from tests.unit.integrity.test_consistency_bundle import _ledger as _consistency_ledger
from tracebound.errors import TraceboundError
from tracebound.export.evidence import EvidenceInvalid, verify_evidence
from tracebound.integrity.consistency import ConsistencyBundle, verify_consistency_bundle
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.note import SignedNote, open_checkpoint
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


# -- consistency proofs from `Ledger.prove_consistency` --------------------------------------

CONSISTENCY_VECTORS = shared_vectors_dir() / "rfc6962-merkle" / "consistency"
# The vectors refuse every check from size 0 as useless; §9 accepts the empty tree as the
# prefix of any tree (empty proof), as transparency-dev's own Go verifier does.
FROM_THE_EMPTY_TREE = "additional/size1-is-zero-and-size2-is-not-zero.json"
SIGNERS = (K1, K2, K3)
KEY_TEXTS = tuple(k.verifier.format() for k in SIGNERS)
OTHER_ORIGIN = "other.example/log"
# What a consistency proof that holds says: origin, old size and root, new size and root, keys.
Said = tuple[str, int, bytes, int, bytes, tuple[str, ...]] | None


@dataclass(frozen=True, repr=False)
class Proven:
    notes: tuple[str, ...]  # every checkpoint the ledger stored, oldest first
    files: dict[str, bytes]  # what `prove-consistency` writes from each of them
    signers: dict[str, tuple[str, ...]]  # the keys that signed each note

    @property
    def hashes(self) -> list[str]:
        """Every hash of every proof: what a forger could splice in."""
        steps = [s for f in self.files.values() for s in json.loads(f)["checkpoints"]]
        return sorted({h for s in steps for h in s["proof"]})


def _signed_by(note: str) -> tuple[str, ...]:
    out = []
    for text in KEY_TEXTS:
        with contextlib.suppress(TraceboundError):
            open_checkpoint(note, NoteVerifier.parse(text))
            out.append(text)
    return tuple(out)


@pytest.fixture(scope="module")
def proven(tmp_path_factory: pytest.TempPathFactory) -> Proven:
    """The unit tests' history (two key rotations), after a checkpoint of the empty ledger."""
    root = tmp_path_factory.mktemp("consistency")
    with _consistency_ledger(root, K1) as led:
        led.checkpoint()
    build_history(root)
    with _consistency_ledger(root, K3, verifier=K1) as led:
        notes = tuple(note for _, note in led.store.checkpoints())
        files = {
            n: (json.dumps(led.prove_consistency(n).as_dict(), indent=2, sort_keys=True) + "\n")
            for n in notes
        }
    return Proven(
        notes, {n: f.encode() for n, f in files.items()}, {n: _signed_by(n) for n in notes}
    )


def _tracebound_consistency(
    data: bytes, key: str, held: str | None, newest: str | None, origin: str | None
) -> Said:
    """tracebound's verdict, as `verify-consistency --held --newest-key --origin` reaches it."""
    verifier = NoteVerifier.parse(key)
    try:
        kept = None if held is None else open_checkpoint(held, verifier, origin=origin)
        result = verify_consistency_bundle(
            ConsistencyBundle.from_json(data),
            verifier,
            origin=origin,
            held=kept,
            newest_key=None if newest is None else NoteVerifier.parse(newest),
        )
    except TraceboundError:
        return None
    old, new = result.old, result.new
    return (
        new.origin,
        old.size,
        old.root,
        new.size,
        new.root,
        tuple(k.format() for k in result.keys),
    )


def _independent_consistency(
    data: bytes, key: str, held: str | None, newest: str | None, origin: str | None
) -> Said:
    try:
        s = iv.verify_consistency(
            data,
            iv.Key.parse(key),
            held_note=held,
            newest_key=None if newest is None else iv.Key.parse(newest),
            origin=origin,
        )
    except iv.Refused:
        return None
    return (s.new.origin, s.old.size, s.old.root, s.new.size, s.new.root, s.keys)


def test_both_verifiers_accept_every_proof_the_ledger_writes(proven: Proven) -> None:
    newest = iv.open_checkpoint(proven.notes[-1], iv.Key.parse(KEY_TEXTS[2]))
    sizes = [iv.open_checkpoint(n, iv.Key.parse(proven.signers[n][0])).size for n in proven.notes]
    assert sizes == [0, 3, 5, 6, 9, 10, 12]
    checked = 0
    for note, data in proven.files.items():
        for key in proven.signers[note]:
            kept = iv.open_checkpoint(note, iv.Key.parse(key))
            chain = KEY_TEXTS[KEY_TEXTS.index(key) :]
            want = (ORIGIN, kept.size, kept.root, newest.size, newest.root, chain)
            for held, newest_key, origin in itertools.product(
                (None, note), (None, KEY_TEXTS[2]), (None, ORIGIN)
            ):
                args = (data, key, held, newest_key, origin)
                assert _independent_consistency(*args) == want, (kept.size, key)
                assert _tracebound_consistency(*args) == want, (kept.size, key)
                checked += 1
    assert checked == 9 * 8  # 7 notes, the two hand-overs under either key


def _flip_hex(text: str, at: int) -> str:
    return text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1 :]


def _steps_edit(data: st.DataObject, doc: Doc, proven: Proven) -> Doc:
    """One edit a forger (or a careless copy) could make to the list of steps."""
    steps = doc["checkpoints"]
    if not isinstance(steps, list) or not steps:
        return doc
    i = data.draw(st.integers(0, len(steps) - 1), label="step")
    how = data.draw(
        st.sampled_from(["drop", "duplicate", "swap", "key", "note", "witness", "impostor"]),
        label="steps edit",
    )
    if how == "drop":
        del steps[i]
    elif how == "duplicate":
        steps.insert(i, copy.deepcopy(steps[i]))
    elif how == "swap":
        j = data.draw(st.integers(0, len(steps) - 1), label="other step")
        steps[i], steps[j] = steps[j], steps[i]
    elif how == "key":
        steps[i]["key"] = data.draw(st.sampled_from(KEY_TEXTS), label="key")
    elif how == "note":
        steps[i]["checkpoint"] = data.draw(st.sampled_from(proven.notes), label="note")
    elif how == "witness":
        steps[i]["checkpoint"] += "\u2014 witness " + "A" * 92 + "==\n"
    else:  # a line under a real key's name and ID whose signature is not its
        line = steps[i]["checkpoint"].rstrip("\n").rsplit("\n", 1)[1]
        steps[i]["checkpoint"] += line[:-6] + ("AAAA" if line[-6:-2] != "AAAA" else "BBBB") + "==\n"
    return doc


def _proof_edit(data: st.DataObject, doc: Doc, proven: Proven) -> Doc:
    """One edit to a proof path: a flipped digit, a hash added or taken, upper-case hex."""
    steps = doc["checkpoints"]
    if not isinstance(steps, list) or not steps:
        return doc
    i = data.draw(st.integers(0, len(steps) - 1), label="step")
    proof = steps[i]["proof"]
    if not isinstance(proof, list):
        return doc
    how = data.draw(st.sampled_from(["flip", "add", "remove", "upper"]), label="proof edit")
    if how == "add" or not proof:
        at = data.draw(st.integers(0, len(proof)), label="at")
        proof.insert(at, data.draw(st.sampled_from(proven.hashes), label="hash"))
        return doc
    j = data.draw(st.integers(0, len(proof) - 1), label="hash")
    if how == "flip":
        proof[j] = _flip_hex(proof[j], data.draw(st.integers(0, 63), label="digit"))
    elif how == "remove":
        del proof[j]
    else:
        proof[j] = proof[j].upper() if proof[j] != proof[j].upper() else proof[j]
    return doc


def _member_edit(data: st.DataObject, doc: Doc, proven: Proven) -> Doc:
    """A member added, removed, or of another type; a key or format spelt another way."""
    steps: list[Any] = doc["checkpoints"]
    target: dict[str, Any] = data.draw(st.sampled_from([doc, *steps]), label="object")
    if not target:
        return doc
    how = data.draw(st.sampled_from(["add", "remove", "type", "spelling"]), label="member edit")
    name = data.draw(st.sampled_from(sorted(target)), label="member")
    if how == "add":
        target["note"] = "trust me"
    elif how == "remove":
        del target[name]
    elif how == "type":
        target[name] = data.draw(
            st.sampled_from([None, 1, True, "x", [], {}, [None], ["0" * 64]]), label="value"
        )
    elif isinstance(target[name], str):
        target[name] = data.draw(
            st.sampled_from([" " + target[name], target[name] + "\n", target[name].upper()]),
            label="spelling",
        )
    return doc


EDITS = (_steps_edit, _proof_edit, _member_edit)


def _serialise(data: st.DataObject, doc: Doc) -> bytes:
    raw = json.dumps(doc).encode()
    how = data.draw(st.sampled_from(["plain", "plain", "duplicate", "not UTF-8"]), label="bytes")
    if how == "duplicate" and raw.startswith(b"{") and b'"proof": ' in raw:
        return raw.replace(b'"proof": ', b'"proof": [], "proof": ', 1)
    if how == "not UTF-8":
        return raw.replace(b'"checkpoints"', b'"checkpoints\xff"', 1)
    return raw


def _mostly(fitting: list[Any], other: Sequence[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from(fitting * 4 + list(other))


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_both_verifiers_agree_on_every_edited_consistency_proof(
    proven: Proven, data: st.DataObject
) -> None:
    """Whatever the edit and whatever the auditor holds and pins, the two verifiers both
    refuse the file, or both accept it and say the same thing about the same checkpoints."""
    note = data.draw(st.sampled_from(proven.notes), label="proved from")
    doc = json.loads(proven.files[note])
    for _ in range(data.draw(st.integers(0, 3), label="edits")):
        edit = data.draw(st.sampled_from(EDITS), label="edit")
        # An edit that no longer fits what an earlier one left (a step gone, a note that
        # is now a number) is skipped: the file stays as it was.
        with contextlib.suppress(LookupError, TypeError, AttributeError, ValueError):
            doc = edit(data, copy.deepcopy(doc), proven)
    raw = _serialise(data, doc)
    # Mostly what the auditor of that note would hold and pin, sometimes anything else.
    args = (
        raw,
        data.draw(_mostly(list(proven.signers[note]), KEY_TEXTS), label="verifier key"),
        data.draw(_mostly([None, note], proven.notes), label="held"),
        data.draw(_mostly([None, KEY_TEXTS[2]], KEY_TEXTS), label="newest key"),
        data.draw(_mostly([None, ORIGIN], [OTHER_ORIGIN]), label="origin"),
    )
    verdict = _independent_consistency(*args)
    event("both accept" if verdict else "both refuse")
    assert _tracebound_consistency(*args) == verdict


@pytest.mark.parametrize(
    "path",
    sorted(CONSISTENCY_VECTORS.rglob("*.json")),
    ids=lambda p: str(p.relative_to(CONSISTENCY_VECTORS)),
)
def test_the_independent_consistency_check_passes_the_rfc6962_vectors(path: Path) -> None:
    """The transparency-dev vectors, through §9 rule 3 (and §3's one root for size 0)."""
    d = json.loads(path.read_text(encoding="utf-8"))
    old, new = (iv.Checkpoint("o", d[f"size{n}"], base64.b64decode(d[f"root{n}"])) for n in (1, 2))
    try:
        iv.check_empty_root(old, "proof")
        iv.check_empty_root(new, "proof")
        iv.check_extends(old, new, [base64.b64decode(h) for h in d["proof"] or []])
    except iv.Refused:
        accepted = False
    else:
        accepted = True
    expected = not d["wantErr"] or str(path.relative_to(CONSISTENCY_VECTORS)) == FROM_THE_EMPTY_TREE
    assert accepted == expected


@pytest.mark.parametrize("root", [iv.EMPTY_ROOT, bytes(32)], ids=["empty root", "other root"])
def test_a_signed_size_0_must_carry_the_empty_root(root: bytes) -> None:
    """§3: the empty tree has one root. Signed for size 0, any other root is refused by both,
    as the first step of a consistency proof and as the checkpoint held."""
    text = f"{ORIGIN}\n0\n{base64.b64encode(root).decode()}\n"
    note = SignedNote.sign(text, K1).encode()
    step = {"checkpoint": note, "key": KEY_TEXTS[0], "proof": []}
    data = json.dumps({"format": "tracebound-consistency/1", "checkpoints": [step]}).encode()
    for held in (None, note):
        verdict = _independent_consistency(data, KEY_TEXTS[0], held, None, None)
        assert verdict == _tracebound_consistency(data, KEY_TEXTS[0], held, None, None)
        assert (verdict is not None) == (root == iv.EMPTY_ROOT)
