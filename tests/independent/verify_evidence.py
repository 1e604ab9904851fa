"""An auditor's verifier of tracebound's evidence, written from docs/evidence-format.md alone.

It imports nothing from tracebound: only the standard library, ``blake3``, ``cryptography``
(Ed25519) and ``rfc8785`` (the reference RFC 8785 canonicaliser). Whatever it needs to know
about a format is in the spec; where the spec was silent, the spec was fixed, not this file.
The tests beside it check that it and tracebound accept and refuse the same files.

Four checks, each raising :class:`Refused` (with the spec's ``part``) or returning a summary:

* :func:`verify_evidence`: an evidence file ``artifacts/agent-runs/{run_id}.json``;
* :func:`verify_proof`: an inclusion proof written by ``tracebound prove``;
* :func:`verify_log`: a whole JSONL log directory (``tracebound copy SRC jsonl:///DIR``)
  against its signed checkpoints;
* :func:`verify_consistency`: a consistency proof written by ``tracebound prove-consistency``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, Inexact
from pathlib import Path
from typing import Any

import rfc8785
from blake3 import blake3
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

GENESIS = bytes(32)
EMPTY_ROOT = hashlib.sha256(b"").digest()
MAX_PROOF_PATH = 64
MAX_CONSISTENCY_PATH = 128
MAX_STEPS = 10_001
RUN_STATUSES = frozenset({"running", "gated", "completed", "failed", "rejected"})
FINAL_STATUSES = frozenset({"completed", "failed", "rejected"})
EVIDENCE_FORMATS = ("tracebound-evidence/1", "tracebound-evidence/2", "tracebound-evidence/3")
INTEGRITY_OVER = "RFC 8785 canonical JSON of every other member"
_DOC_V1 = frozenset(
    {"format", "run_id", "stream_id", "pipeline", "pipeline_type", "critical", "status",
     "events", "artifacts", "checkpoint", "tree_size", "proofs", "integrity"}
)  # fmt: skip
_DOC = {
    EVIDENCE_FORMATS[0]: _DOC_V1,
    EVIDENCE_FORMATS[1]: _DOC_V1 | {"run_head"},
    EVIDENCE_FORMATS[2]: _DOC_V1 | {"run_head", "costs"},
}
_COSTS = frozenset({"stream_id", "events", "proofs", "head"})
_AMOUNT = re.compile(r"[0-9]+(\.[0-9]+)?")
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact])
_EVENT = frozenset({"position", "stream_version", "event_type", "prev_hash", "hash", "body"})
_ARTIFACT = frozenset({"kind", "step_id", "digest", "present"})
_PROOF = frozenset({"position", "proof"})
_BUNDLE = frozenset(
    {"format", "position", "stream_id", "prev_hash", "hash", "record", "tree_size", "proof",
     "checkpoint"}
)  # fmt: skip
_CONSISTENCY = frozenset({"format", "checkpoints"})
_STEP = frozenset({"checkpoint", "key", "proof"})
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_EM_DASH = "\u2014 "


class Refused(Exception):
    """A check failed; ``part`` is the spec's name for which one."""

    def __init__(self, part: str, detail: str) -> None:
        super().__init__(f"{part}: {detail}")
        self.part = part


# -- primitives ------------------------------------------------------------------------------


def chain_hash(prev: bytes, record: bytes) -> bytes:
    return blake3(prev + record).digest()


def leaf_hash(event_hash: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + event_hash).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 MTH over already leaf-hashed entries."""
    if not leaves:
        return EMPTY_ROOT
    level = list(leaves)
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def root_from_inclusion(leaf: bytes, index: int, size: int, path: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.3.2: the root a path leads to, or Refused if it cannot."""
    if not 0 <= index < size:
        raise Refused("proof", "index outside the tree")
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            raise Refused("proof", "path too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise Refused("proof", "path too short")
    return r


def canonical(value: Any) -> bytes:
    return bytes(rfc8785.dumps(value))


def _no_floats(value: Any) -> bool:
    if isinstance(value, float):
        return False
    if isinstance(value, dict):
        return all(_no_floats(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_floats(v) for v in value)
    return True


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} twice")
        out[k] = v
    return out


def _const(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(data: bytes) -> Any:
    """UTF-8 without BOM, no duplicate key, no NaN/Infinity; ValueError otherwise."""
    text = data.decode("utf-8")  # UnicodeDecodeError is a ValueError
    if text.startswith("\ufeff"):
        raise ValueError("byte order mark")
    return json.loads(text, object_pairs_hook=_pairs, parse_constant=_const)


def canonical_record(body: bytes) -> dict[str, Any]:
    """A hashed record: a JSON object whose bytes are exactly its RFC 8785 form, no floats."""
    record = strict_json(body)
    if not isinstance(record, dict) or not _no_floats(record) or canonical(record) != body:
        raise ValueError("not a canonical record")
    return record


def b64(text: Any) -> bytes:
    """Canonical padded standard base64 only."""
    if not isinstance(text, str):
        raise ValueError("not a string")  # noqa: TRY004 - one error type for callers
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError("not base64") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("not canonical base64")
    return raw


def hex32(text: Any) -> bytes:
    if not isinstance(text, str) or not _HEX64.fullmatch(text):
        raise ValueError("not 64 lower-case hex digits")
    return bytes.fromhex(text)


def is_int(value: Any) -> bool:
    return type(value) is int


# -- keys and signed notes (C2SP signed-note, Ed25519) ---------------------------------------


@dataclass(frozen=True)
class Key:
    name: str
    key_id: int
    public: bytes

    @classmethod
    def parse(cls, text: str) -> Key:
        """``<name>+<8 hex key ID>+<base64(0x01 || 32-byte Ed25519 key)>``."""
        name, key_id, raw = text.strip().split("+", 2)
        blob = b64(raw)
        if len(blob) != 33 or blob[0] != 1:
            raise ValueError("not an Ed25519 verifier key")
        key = cls(name, int(key_id, 16), blob[1:])
        if key_id != f"{key_id_of(name, blob[1:]):08x}":
            raise ValueError("the key ID does not match the key")
        return key


def key_id_of(name: str, public: bytes) -> int:
    digest = hashlib.sha256(name.encode() + b"\n" + b"\x01" + public).digest()
    return int.from_bytes(digest[:4], "big")


def open_note(note: Any, key: Key, part: str) -> str:
    """Return the note's text once ``key`` has signed it (other keys' lines are ignored)."""
    if not isinstance(note, str) or not note.endswith("\n"):
        raise Refused(part, "not a signed note")
    split = note.rfind("\n\n")
    if split < 0:
        raise Refused(part, "no blank line before the signatures")
    text, signed = note[: split + 1], False
    if any((ord(c) < 0x20 and c != "\n") or 0xD800 <= ord(c) <= 0xDFFF for c in note):
        raise Refused(part, "control character or lone surrogate in the note")
    for line in note[split + 2 : -1].split("\n"):
        if not line.startswith(_EM_DASH) or line.count(" ") != 2:
            raise Refused(part, "malformed signature line")
        name, sig_b64 = line[len(_EM_DASH) :].split(" ")
        if not name or "+" in name or any(c.isspace() for c in name):
            raise Refused(part, "malformed key name on a signature line")
        try:
            blob = b64(sig_b64)
        except ValueError as exc:
            raise Refused(part, "signature is not base64") from exc
        if len(blob) < 5:
            raise Refused(part, "signature too short")
        if name != key.name or int.from_bytes(blob[:4], "big") != key.key_id:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(key.public).verify(blob[4:], text.encode())
        except InvalidSignature as exc:
            raise Refused(part, "bad signature") from exc
        signed = True
    if not signed:
        raise Refused(part, "not signed by the verifier key")
    return text


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


def open_checkpoint(note: Any, key: Key, part: str = "checkpoint") -> Checkpoint:
    lines = open_note(note, key, part)[:-1].split("\n")
    if len(lines) < 3 or not all(lines):
        raise Refused(part, "a checkpoint has origin, size and root lines")
    if not _DECIMAL.fullmatch(lines[1]) or int(lines[1]) >= 1 << 64:
        raise Refused(part, "size is not plain decimal")
    try:
        root = b64(lines[2])
    except ValueError as exc:
        raise Refused(part, "root is not base64") from exc
    if len(root) != 32:
        raise Refused(part, "root is not 32 bytes")
    cp = Checkpoint(lines[0], int(lines[1]), root)
    check_empty_root(cp, part)
    return cp


def check_empty_root(cp: Checkpoint, part: str) -> None:
    """Section 3: the empty tree has one root; a signed size 0 with another is refused."""
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        raise Refused(part, "a checkpoint of size 0 whose root is not the empty tree's")


@dataclass(frozen=True)
class RunHead:
    origin: str
    run_id: str
    stream_version: int
    hash: bytes
    status: str
    tree_size: int
    root: bytes


def run_head_text(h: RunHead) -> str:
    return (
        "tracebound-run-head/1\n"
        f"origin {h.origin}\n"
        f"run {json.dumps(h.run_id, ensure_ascii=True)}\n"
        f"stream-version {h.stream_version}\n"
        f"hash {h.hash.hex()}\n"
        f"status {h.status}\n"
        f"tree-size {h.tree_size}\n"
        f"root {h.root.hex()}\n"
    )


def open_run_head(note: Any, key: Key) -> RunHead:
    text = open_note(note, key, "head")
    keys = ("origin", "run", "stream-version", "hash", "status", "tree-size", "root")
    lines = text[:-1].split("\n")
    if lines[0] != "tracebound-run-head/1" or len(lines) != 8:
        raise Refused("head", "not a run head")
    values = dict(line.partition(" ")[::2] for line in lines[1:])
    try:
        head = RunHead(
            values["origin"],
            json.loads(values["run"]),
            int(values["stream-version"]),
            hex32(values["hash"]),
            values["status"],
            int(values["tree-size"]),
            hex32(values["root"]),
        )
    except (KeyError, ValueError) as exc:
        raise Refused("head", "malformed run head") from exc
    if [line.partition(" ")[0] for line in lines[1:]] != list(keys) or run_head_text(head) != text:
        raise Refused("head", "run head not in its one written form")
    if head.status not in RUN_STATUSES or head.stream_version < 1 or head.tree_size < 1:
        raise Refused("head", "run head value out of range")
    return head


@dataclass(frozen=True)
class StreamHead:
    origin: str
    stream_id: str
    stream_version: int
    hash: bytes
    tree_size: int
    root: bytes


def stream_head_text(h: StreamHead) -> str:
    return (
        "tracebound-stream-head/1\n"
        f"origin {h.origin}\n"
        f"stream {json.dumps(h.stream_id, ensure_ascii=True)}\n"
        f"stream-version {h.stream_version}\n"
        f"hash {h.hash.hex()}\n"
        f"tree-size {h.tree_size}\n"
        f"root {h.root.hex()}\n"
    )


def open_stream_head(note: Any, key: Key) -> StreamHead:
    text = open_note(note, key, "head")
    keys = ("origin", "stream", "stream-version", "hash", "tree-size", "root")
    lines = text[:-1].split("\n")
    if lines[0] != "tracebound-stream-head/1" or len(lines) != 7:
        raise Refused("head", "not a stream head")
    values = dict(line.partition(" ")[::2] for line in lines[1:])
    try:
        head = StreamHead(
            values["origin"],
            json.loads(values["stream"]),
            int(values["stream-version"]),
            hex32(values["hash"]),
            int(values["tree-size"]),
            hex32(values["root"]),
        )
    except (KeyError, ValueError) as exc:
        raise Refused("head", "malformed stream head") from exc
    if [line.partition(" ")[0] for line in lines[1:]] != list(keys) or stream_head_text(
        head
    ) != text:
        raise Refused("head", "stream head not in its one written form")
    if head.tree_size < 1 or (head.stream_version == 0 and head.hash != GENESIS):
        raise Refused("head", "stream head value out of range")
    return head


# -- (a) evidence files ----------------------------------------------------------------------


@dataclass
class Record:
    position: int
    version: int
    prev: bytes
    hash: bytes
    body: dict[str, Any]

    @property
    def payload(self) -> dict[str, Any]:
        p: dict[str, Any] = self.body["payload"]
        return p


@dataclass(frozen=True)
class EvidenceSummary:
    run_id: str
    status: str
    events: int
    signed: bool
    tree_size: int | None
    run_head: RunHead | None
    final: bool
    spend: dict[str, Any] | None = None  # a /3 file's spend summary (see _spend)


def _members(obj: Any, allowed: frozenset[str], part: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.keys() - allowed:
        raise Refused(part, "not an object of the format's members")
    return obj


def _check_record(item: Any, stream: str) -> Record:
    e = _members(item, _EVENT, "record")
    if not (is_int(e.get("position")) and is_int(e.get("stream_version"))):
        raise Refused("record", "position or stream_version is not an integer")
    try:
        prev, claimed, raw = hex32(e.get("prev_hash")), hex32(e.get("hash")), b64(e.get("body"))
    except ValueError as exc:
        raise Refused("record", str(exc)) from exc
    if chain_hash(prev, raw) != claimed:
        raise Refused("record", "the bytes do not hash to the record's hash")
    try:
        body = canonical_record(raw)
    except ValueError as exc:
        raise Refused("record", str(exc)) from exc
    said = tuple(body.get(k) for k in ("position", "stream_id", "stream_version", "prev_hash"))
    if said != (e["position"], stream, e["stream_version"], e["prev_hash"]) or body.get(
        "event_type"
    ) != e.get("event_type"):
        raise Refused("record", "fields disagree with the hashed record")
    if not isinstance(body.get("payload"), dict):
        raise Refused("record", "no payload")
    return Record(e["position"], e["stream_version"], prev, claimed, body)


def _check_chain(records: list[Record], doc: dict[str, Any], run_id: str) -> str:
    if not records:
        raise Refused("chain", "no events")
    head, version, position = GENESIS, 0, 0
    for r in records:
        if r.version != version + 1 or r.prev != head or r.position <= position:
            raise Refused("chain", f"record at {r.position} does not follow the one before")
        head, version, position = r.hash, r.version, r.position
    first = records[0].payload
    end = len(records)
    while end > 1 and records[end - 1].payload.get("kind") == "slo_alert_raised":
        end -= 1
    last = records[end - 1].payload
    if first.get("kind") != "run_started" or first.get("run_id") != run_id:
        raise Refused("chain", "the stream does not open with this run's run_started")
    for name in ("pipeline", "pipeline_type", "critical"):
        if type(doc.get(name)) is not type(first.get(name)) or doc.get(name) != first.get(name):
            raise Refused("record", f"{name} is not run_started's")
    status = doc.get("status")
    if not isinstance(status, str) or status not in RUN_STATUSES:
        raise Refused("format", "unknown status")
    finished = any(r.payload.get("kind") == "run_finished" for r in records)
    if status == "running" and finished:
        raise Refused("chain", "said running, but the run finished")
    if status != "running" and (last.get("kind"), last.get("status")) != ("run_finished", status):
        raise Refused("chain", "the stream does not end with run_finished of that status")
    return status


def _named_digests(records: list[Record]) -> set[tuple[str, Any, Any]]:
    need: set[tuple[str, Any, Any]] = set()
    for r in records:
        p = r.payload
        if p.get("kind") == "run_started":
            need.add(("inputs", None, p.get("inputs_digest")))
        elif p.get("kind") == "step_recorded":
            need.add(("artifact", p.get("step_id"), p.get("artifact_hash")))
        elif p.get("kind") == "validation_recorded" and p.get("output_digest") is not None:
            need.add(("validation-output", p.get("step_id"), p.get("output_digest")))
    return need


def _check_digests(records: list[Record], listed: Any) -> None:
    if not isinstance(listed, list):
        raise Refused("digests", "artifacts is not a list")
    have: set[tuple[Any, Any, Any]] = set()
    for item in listed:
        a = _members(item, _ARTIFACT, "digests")
        entry = (a.get("kind"), a.get("step_id"), a.get("digest"))
        ok = (
            isinstance(entry[0], str)
            and isinstance(entry[2], str)
            and "step_id" in a
            and (entry[1] is None or isinstance(entry[1], str))
            and isinstance(a.get("present"), bool)
        )
        if not ok or entry in have:
            raise Refused("digests", "malformed or repeated artifact entry")
        have.add(entry)
    if have != set(_named_digests(records)):
        raise Refused("digests", "the listed digests are not those the records name")


def _check_proofs(records: list[Record], doc: dict[str, Any], key: Key) -> Checkpoint:
    cp = open_checkpoint(doc.get("checkpoint"), key)
    if not is_int(doc.get("tree_size")) or doc["tree_size"] != cp.size:
        raise Refused("checkpoint", "tree_size is not the checkpoint's size")
    _check_paths(records, doc.get("proofs"), cp)
    return cp


def _check_paths(records: list[Record], proofs: Any, cp: Checkpoint) -> None:
    if not isinstance(proofs, list):
        raise Refused("proof", "proofs is not a list")
    paths: dict[int, list[bytes]] = {}
    for item in proofs:
        p = _members(item, _PROOF, "proof")
        if not is_int(p.get("position")) or not isinstance(p.get("proof"), list):
            raise Refused("proof", "malformed proof entry")
        if len(p["proof"]) > MAX_PROOF_PATH:
            raise Refused("proof", "path too long")
        try:
            paths[p["position"]] = [hex32(h) for h in p["proof"]]
        except ValueError as exc:
            raise Refused("proof", str(exc)) from exc
    if len(proofs) != len(records) or set(paths) != {r.position for r in records}:
        raise Refused("proof", "not exactly one proof per record")
    for r in records:
        index = r.position - 1
        if root_from_inclusion(leaf_hash(r.hash), index, cp.size, paths[r.position]) != cp.root:
            raise Refused("proof", f"position {r.position} is not under the signed root")


def _check_head(note: Any, records: list[Record], doc: dict[str, Any], cp: Checkpoint,
                key: Key, status: str) -> RunHead:  # fmt: skip
    head = open_run_head(note, key)
    last = records[-1]
    expected = (cp.origin, doc["run_id"], cp.size, cp.root, last.version, last.hash, status)
    got = (head.origin, head.run_id, head.tree_size, head.root, head.stream_version,
           head.hash, head.status)  # fmt: skip
    if got != expected:
        raise Refused("head", "the run head does not say the records end here, in this tree")
    return head


def _check_stream(records: list[Record]) -> None:
    head, version, position = GENESIS, 0, 0
    for r in records:
        if r.version != version + 1 or r.prev != head or r.position <= position:
            raise Refused("chain", f"cost record at {r.position} does not follow the one before")
        head, version, position = r.hash, r.version, r.position


def _usd(amount: Decimal) -> str:
    return format(amount, "f")


def _spend(records: list[Record], proven: bool) -> dict[str, Any]:
    """The spec's sums: exact, plain decimal; by role (null when none), source and tier."""
    total, count = Decimal(0), 0
    groups: dict[str, dict[Any, list[Any]]] = {"role": {}, "source": {}, "tier": {}}
    for r in records:
        p = r.payload
        if p.get("kind") != "cost_incurred":
            continue
        amount = p.get("amount_usd")
        if not isinstance(amount, str) or not _AMOUNT.fullmatch(amount):
            raise Refused("record", "amount_usd is not a plain decimal")
        if not (isinstance(p.get("source"), str) and isinstance(p.get("tier"), str)) or not (
            p.get("role") is None or isinstance(p.get("role"), str)
        ):
            raise Refused("record", "a cost record's role, source or tier is malformed")
        total, count = _EXACT.add(total, Decimal(amount)), count + 1
        for name, group in groups.items():
            entry = group.setdefault(p.get(name), [Decimal(0), 0])
            entry[0], entry[1] = _EXACT.add(entry[0], Decimal(amount)), entry[1] + 1
    return {
        "proven": proven,
        "total_usd": _usd(total),
        "records": count,
        **{
            f"by_{name}": [
                {name: k, "total_usd": _usd(v[0]), "records": v[1]}
                for k, v in sorted(group.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
            ]
            for name, group in groups.items()
        },
    }


def _check_costs(
    doc: dict[str, Any], cp: Checkpoint | None, key: Key, require_head: bool
) -> dict[str, Any]:
    costs = doc.get("costs")
    stream = f"costs/{doc['run_id']}"
    if not isinstance(costs, dict) or costs.keys() - _COSTS or "head" not in costs:
        raise Refused("format", "costs is not an object of its members")
    if costs.get("stream_id") != stream or not isinstance(costs.get("events"), list):
        raise Refused("format", "costs stream_id or events malformed")
    records = [_check_record(item, stream) for item in costs["events"]]
    _check_stream(records)
    if cp is not None:
        _check_paths(records, costs.get("proofs"), cp)
    elif costs.get("proofs") != []:
        raise Refused("format", "unsigned costs must have proofs [] and head null")
    head = costs.get("head")
    if head is not None:
        if cp is None:
            raise Refused("head", "a stream head without a checkpoint")
        h = open_stream_head(head, key)
        last = (records[-1].version, records[-1].hash) if records else (0, GENESIS)
        got = (h.origin, h.stream_id, h.tree_size, h.root, h.stream_version, h.hash)
        if got != (cp.origin, stream, cp.size, cp.root, *last):
            raise Refused("head", "the stream head does not say the cost records end here")
    elif require_head:
        raise Refused("head", "no signed stream head")
    return _spend(records, head is not None)


def load_json_file(data: bytes, part: str) -> dict[str, Any]:
    try:
        doc = strict_json(data)
    except (ValueError, RecursionError) as exc:
        raise Refused(part, f"not strict JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise Refused(part, "not a JSON object")
    return doc


def _check_integrity(doc: dict[str, Any]) -> None:
    rest = {k: v for k, v in doc.items() if k != "integrity"}
    if not _no_floats(rest):
        raise Refused("format", "a number that is not an integer")
    try:
        digest = "sha256:" + hashlib.sha256(canonical(rest)).hexdigest()
    except rfc8785.CanonicalizationError as exc:
        raise Refused("format", "cannot be canonicalised") from exc
    want = {"algorithm": "sha256", "over": INTEGRITY_OVER, "hash": digest}
    if doc.get("integrity") != want:
        raise Refused("integrity", "the integrity member does not match the contents")


def verify_evidence(
    data: bytes,
    key: Key,
    *,
    require_signed: bool = True,
    require_head: bool = False,
    require_spend: bool = False,
) -> EvidenceSummary:
    doc = load_json_file(data, "format")
    fmt = doc.get("format")
    if (
        fmt not in _DOC
        or doc.keys() - _DOC[fmt]
        or (fmt != EVIDENCE_FORMATS[0] and "run_head" not in doc)
        or (fmt == EVIDENCE_FORMATS[2] and "costs" not in doc)
    ):
        raise Refused("format", "not an evidence file of a known format")
    if not isinstance(doc.get("integrity"), dict):
        raise Refused("integrity", "no integrity member")
    _check_integrity(doc)
    run_id = doc.get("run_id")
    if not isinstance(run_id, str):
        raise Refused("format", "run_id is not a string")
    stream = f"run/{run_id}"
    if doc.get("stream_id") != stream or not isinstance(doc.get("events"), list):
        raise Refused("format", "stream_id or events malformed")
    records = [_check_record(item, stream) for item in doc["events"]]
    status = _check_chain(records, doc, run_id)
    _check_digests(records, doc.get("artifacts"))
    cp = None
    if doc.get("checkpoint") is not None:
        cp = _check_proofs(records, doc, key)
    elif require_signed:
        raise Refused("checkpoint", "no signed checkpoint")
    elif doc.get("proofs") or doc.get("tree_size") is not None:
        raise Refused("checkpoint", "proofs without a checkpoint")
    elif not ("checkpoint" in doc and "tree_size" in doc and doc.get("proofs") == []):
        raise Refused(
            "format", "unsigned file must have checkpoint null, tree_size null, proofs []"
        )
    head = None
    if doc.get("run_head") is not None:
        if cp is None:
            raise Refused("head", "a run head without a checkpoint")
        head = _check_head(doc["run_head"], records, doc, cp, key, status)
    elif require_head:
        raise Refused("head", "no signed run head")
    spend = None
    if fmt == EVIDENCE_FORMATS[2]:
        spend = _check_costs(doc, cp, key, require_head or require_spend)
    elif require_spend:
        raise Refused("head", "an older format carries no spend stream")
    size = None if cp is None else cp.size
    final = status in FINAL_STATUSES
    return EvidenceSummary(run_id, status, len(records), cp is not None, size, head, final, spend)


# -- (b) inclusion proofs --------------------------------------------------------------------


def verify_proof(data: bytes, key: Key) -> Checkpoint:
    d = load_json_file(data, "proof")
    if d.get("format") != "tracebound-inclusion/1" or d.keys() != _BUNDLE:
        raise Refused("proof", "not a tracebound-inclusion/1 object with exactly its members")
    ints_ok = all(is_int(d[k]) and 1 <= d[k] < 1 << 64 for k in ("position", "tree_size"))
    path = d["proof"]
    if not ints_ok or not isinstance(d["stream_id"], str) or not isinstance(path, list):
        raise Refused("proof", "malformed member")
    if len(path) > MAX_PROOF_PATH:
        raise Refused("proof", "path too long")
    try:
        prev, claimed, raw = hex32(d["prev_hash"]), hex32(d["hash"]), b64(d["record"])
        hashes = [hex32(h) for h in path]
    except ValueError as exc:
        raise Refused("proof", str(exc)) from exc
    cp = open_checkpoint(d["checkpoint"], key)
    if cp.size != d["tree_size"] or d["position"] > cp.size:
        raise Refused("proof", "not a proof against this checkpoint's tree")
    if chain_hash(prev, raw) != claimed:
        raise Refused("proof", "the record does not hash to its hash")
    try:
        record = canonical_record(raw)
    except ValueError as exc:
        raise Refused("proof", str(exc)) from exc
    stated = (d["position"], d["stream_id"], d["prev_hash"])
    if tuple(record.get(k) for k in ("position", "stream_id", "prev_hash")) != stated or not is_int(
        record.get("position")
    ):
        raise Refused("proof", "the stated fields are not the record's")
    if root_from_inclusion(leaf_hash(claimed), d["position"] - 1, cp.size, hashes) != cp.root:
        raise Refused("proof", "the path does not lead to the signed root")
    return cp


# -- (c) a whole JSONL log -------------------------------------------------------------------


def _log_lines(directory: Path) -> list[tuple[bytes, bytes, dict[str, Any]]]:
    """Each line of log.jsonl as (hash, record bytes, record)."""
    out = []
    data = (directory / "log.jsonl").read_bytes()
    if data and not data.endswith(b"\n"):
        raise Refused("log", "torn tail")
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            outer = strict_json(line)
            raw = line[line.index(b'"record":') + len(b'"record":') : -1]
            record = canonical_record(raw)
            claimed = hex32(outer.get("hash"))
        except ValueError as exc:
            raise Refused("log", f"line {number}: {exc}") from exc
        if outer.get("record") != record:
            raise Refused("log", f"line {number}: record is not the last member")
        out.append((claimed, raw, record))
    return out


def verify_log(directory: Path, key: Key) -> tuple[int, int]:
    """Every link, position and stream version, and every stored checkpoint's root.

    Returns (events, size of the newest checkpoint)."""
    heads: dict[str, tuple[bytes, int]] = {}
    leaves: list[bytes] = []
    for position, (claimed, raw, record) in enumerate(_log_lines(directory), start=1):
        stream, prev_hex = record.get("stream_id"), record.get("prev_hash")
        if not isinstance(stream, str):
            raise Refused("log", f"position {position}: no stream")
        head, version = heads.get(stream, (GENESIS, 0))
        if record.get("position") != position or not is_int(record.get("stream_version")):
            raise Refused("log", f"position {position}: moved or missing")
        if record["stream_version"] != version + 1 or prev_hex != head.hex():
            raise Refused("log", f"position {position}: does not follow its stream")
        if chain_hash(head, raw) != claimed:
            raise Refused("log", f"position {position}: tampered")
        heads[stream] = (claimed, version + 1)
        leaves.append(leaf_hash(claimed))
    meta = load_json_file((directory / "meta.json").read_bytes(), "log")
    newest = 0
    cp_path = directory / "checkpoints.jsonl"
    lines = cp_path.read_bytes().splitlines() if cp_path.exists() else []
    for line in lines:
        entry = load_json_file(line, "checkpoint")
        cp = open_checkpoint(entry.get("note"), key)
        if cp.origin != meta.get("origin") or entry.get("size") != cp.size:
            raise Refused("checkpoint", "checkpoint of another log, or its size misstated")
        if cp.size > len(leaves):
            raise Refused("log", f"truncated: the log is shorter than a signed {cp.size}")
        if merkle_root(leaves[: cp.size]) != cp.root:
            raise Refused("log", f"the first {cp.size} events are not the signed tree")
        newest = max(newest, cp.size)
    return len(leaves), newest


# -- (d) consistency proofs ------------------------------------------------------------------


def roots_from_consistency(
    first: int, second: int, first_root: bytes, path: list[bytes]
) -> tuple[bytes, bytes]:
    """RFC 9162 section 2.1.4.2 for ``0 < first < second``: the two roots the path leads to."""
    if not 0 < first < second:
        raise Refused("proof", "not a proof between two non-empty trees of growing size")
    if not path:
        raise Refused("proof", "empty path")
    if first & (first - 1) == 0:
        path = [first_root, *path]
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise Refused("proof", "path too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise Refused("proof", "path too short")
    return fr, sr


def check_extends(old: Checkpoint, new: Checkpoint, path: list[bytes]) -> None:
    """Section 9 rule 3: ``new``'s tree has ``old``'s as its prefix."""
    if new.size < old.size:
        raise Refused("proof", "the tree shrank")
    if new.size == old.size or old.size == 0:
        if path:
            raise Refused("proof", "a proof where none is needed")
        if new.size == old.size and new.root != old.root:
            raise Refused("proof", "two roots for one tree size")
        return
    if roots_from_consistency(old.size, new.size, old.root, path) != (old.root, new.root):
        raise Refused("proof", f"the tree of {new.size} does not extend the tree of {old.size}")


def key_text(key: Key) -> str:
    blob = base64.b64encode(b"\x01" + key.public).decode("ascii")
    return f"{key.name}+{key.key_id:08x}+{blob}"


def strict_key(text: Any) -> Key:
    """A verifier key in its one spelling (section 1)."""
    if not isinstance(text, str):
        raise Refused("format", "a key is not a string")
    try:
        key = Key.parse(text)
    except ValueError as exc:
        raise Refused("format", f"not a verifier key: {exc}") from exc
    if key_text(key) != text or any(c.isspace() for c in key.name) or not key.name:
        raise Refused("format", "a verifier key not in its one spelling")
    return key


@dataclass(frozen=True)
class Step:
    note: str
    key: Key
    path: list[bytes]


def _steps(data: bytes) -> list[Step]:
    doc = load_json_file(data, "format")
    steps = doc.get("checkpoints")
    if doc.get("format") != "tracebound-consistency/1" or doc.keys() != _CONSISTENCY:
        raise Refused("format", "not a tracebound-consistency/1 object with exactly its members")
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
        raise Refused("format", f"checkpoints is not a list of 1 to {MAX_STEPS} steps")
    out = []
    for item in steps:
        if not isinstance(item, dict) or item.keys() != _STEP:
            raise Refused("format", "a step is not an object of exactly its members")
        path = item["proof"]
        if not isinstance(path, list) or len(path) > MAX_CONSISTENCY_PATH:
            raise Refused("format", f"a proof is not a list of at most {MAX_CONSISTENCY_PATH}")
        try:
            hashes = [hex32(h) for h in path]
        except ValueError as exc:
            raise Refused("format", str(exc)) from exc
        if not isinstance(item["checkpoint"], str):
            raise Refused("format", "a checkpoint is not text")
        out.append(Step(item["checkpoint"], strict_key(item["key"]), hashes))
    if out[0].path:
        raise Refused("proof", "the first step has a proof")
    return out


def _open_step(step: Step, current: Key) -> Checkpoint:
    """Rule 1: signed by ``current``, and by the step's key too when it takes over."""
    cp = open_checkpoint(step.note, current)
    if step.key != current:
        open_note(step.note, step.key, "key")
    return cp


@dataclass(frozen=True)
class ConsistencySummary:
    old: Checkpoint
    new: Checkpoint
    keys: tuple[str, ...]  # the verifier key, then each key handed over to, in order


def verify_consistency(
    data: bytes,
    key: Key,
    *,
    held_note: str | None = None,
    newest_key: Key | None = None,
    origin: str | None = None,
) -> ConsistencySummary:
    steps = _steps(data)
    current, chain = key, [key_text(key)]
    checkpoints: list[Checkpoint] = []
    for step in steps:
        cp = _open_step(step, current)
        if step.key != current:
            current = step.key
            chain.append(key_text(current))
        if cp.origin != (checkpoints[0].origin if checkpoints else origin or cp.origin):
            raise Refused("origin", "a checkpoint names another origin")
        if checkpoints:
            check_extends(checkpoints[-1], cp, step.path)
        checkpoints.append(cp)
    if held_note is not None:
        held = open_checkpoint(held_note, key, "held")
        if held != checkpoints[0]:
            raise Refused("held", "the first step is not the checkpoint the auditor kept")
    if newest_key is not None and current != newest_key:
        raise Refused("key", "the ledger is not signed by the expected newest key")
    return ConsistencySummary(checkpoints[0], checkpoints[-1], tuple(chain))
