"""Redaction before write: secrets and PII never reach the ledger, blobs, evidence or logs.

The design records require that prompts and logs are scrubbed *before* any write, and that
each redaction leaves a digest and a ``redaction_reason``. A bare hash of a low-entropy
value (a phone number, a card number) is reversible by enumeration, so the digest here is
an HMAC keyed with a per-ledger secret the caller supplies: an analyst holding the ledger
can see that two redactions hide the same value, but cannot recover the value.

Each redacted span becomes a marker such as
``[REDACTED:aws-access-key:hmac-sha256:1a2b3c4d5e6f7a8b]`` (the first 16 hex digits of the
HMAC) and one :class:`Redaction` record with the full digest. Markers are inert: redacting
redacted text changes nothing, so a value may safely pass through several layers that each
redact before writing.

In structures (dicts, lists, tuples) only values are scanned; dict keys are kept as they
are, because keys are the schema consumers index by. A secret used as a dict key is not
found: do not do that. A secret-sounding key (``api_key``, ``db_password``,
``Authorization``) does, however, make its string value count as a secret, and so does a
secret-sounding sibling ``name`` or ``key`` for a ``value`` (``{"name": "DB_PASSWORD",
"value": "…"}``, as in Kubernetes ``env``).

The detectors also look through percent-encoding (and a form's ``+``) and base64, three
layers deep, and read text that holds JSON inside a JSON string (``\\"``) unescaped, two
levels deep (:mod:`tracebound.pipeline._redaction_decoding`).

Which detector comes from detect-secrets and which is written here is recorded in
``docs/adr/0005-redaction-detectors.md``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from tracebound.errors import ValidationFailed
from tracebound.pipeline._redaction_decoding import (
    BASE64_MIN_LENGTH,
    View,
    base64_texts,
    escaped_lines,
    form_encoded,
    json_view,
    might_hold_base64,
    percent_view,
    whole_escapes,
)
from tracebound.pipeline._redaction_detectors import (
    DETECTORS,
    MARKER_RE,
    Detector,
    Source,
    auth_credential,
    basic_credential,
    key_kind,
    may_match,
    plausible_secret_value,
)

__all__ = [
    "MAX_DEPTH",
    "MIN_KEY_BYTES",
    "DetectorInfo",
    "Redaction",
    "RedactionResult",
    "RedactionStats",
    "Redactor",
    "detectors",
]

MIN_KEY_BYTES = 16
"""Shortest HMAC key accepted: 128 bits, so digests cannot be forged or enumerated."""

MAX_DEPTH = 256
"""Deepest nesting :meth:`Redactor.redact` walks; deeper input is refused, not skipped."""

_DOMAIN = b"tracebound/redaction/v1\x00"  # separates these HMACs from any other use of the key
_MARKER_HEX = 16
# Re-scans per string before giving up (fail closed). Real text settles in one or two;
# each pass removes at least one secret, so only adversarial input gets near this.
_MAX_PASSES = 32
# Decodings (percent or base64) looked through, one inside another: ``b64(b64(b64(x)))``
# and ``%``-escaped base64 of base64 are found, a fourth layer is not. The work is linear
# in the input: a layer's decoded texts are disjoint parts of the text above, each no
# longer than its part (a percent view) or three quarters of it (base64), so one layer
# scans at most 1.75 times the text above, and all of them at most
# 1 + 1.75 + 1.75² + 1.75³ < 12 times the input. Equal decoded texts are scanned once
# (``_Memo``), so repeats, and base64 seen both as written and in a percent view, cost
# nothing more.
_DECODE_LAYERS = 3
# JSON unescapes looked through in one text (``{"body": "{\"password\": …}"}`` and the
# doubly escaped ``\\\"password\\\"``); a third level is not. They are not decode
# layers: a view is read by the detectors (and the disguise view) only, not decoded
# further, so each costs at most one more detection pass over text no longer than the
# text itself. Decoded texts (a percent view, base64) get their own views.
_JSON_LEVELS = 2
# ``{"name": "DB_PASSWORD", "value": "…"}``: the sibling that names the value's key
# (CloudFormation: ``{"ParameterKey": "DbPassword", "ParameterValue": "…"}``).
_PAIR_NAME_KEYS = ("name", "Name", "NAME", "key", "Key", "KEY", "ParameterKey")
_PAIR_VALUE_KEYS = frozenset({"value", "Value", "VALUE", "ParameterValue"})

T = TypeVar("T")


class Redaction(BaseModel):
    """One redacted span: what kind of secret it was, where, and its keyed digest.

    ``start``/``end`` index the *original* string (code points, end exclusive); ``path``
    is the JSONPath of that string inside a structure, ``None`` for plain text. When
    detectors overlap, the spans are merged and attributed to the longest one;
    ``also_detected`` names the others so metrics and audits lose nothing.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    detector: str
    redaction_reason: str
    digest: str  # "hmac-sha256:<64 hex>"
    marker: str
    path: str | None
    start: int
    end: int
    also_detected: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RedactionResult(Generic[T]):
    """The scrubbed value and what was taken out of it, in document order."""

    value: T
    redactions: tuple[Redaction, ...]

    @property
    def redacted(self) -> bool:
        """Whether anything was redacted (callers annotate the event only then)."""
        return bool(self.redactions)


class RedactionStats:
    """In-memory counters of redactions, read later by a metrics exporter.

    Kept free of any telemetry dependency: an exporter polls :meth:`snapshot`. One
    instance may be shared by several redactors and threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_detector: Counter[str] = Counter()
        self._by_reason: Counter[str] = Counter()
        self._values_scanned = 0
        self._values_redacted = 0

    def record(self, redactions: Sequence[Redaction], *, values_scanned: int) -> None:
        """Count one redaction call: how many strings it scanned and what it found."""
        with self._lock:
            self._values_scanned += values_scanned
            self._values_redacted += len({r.path for r in redactions})
            for redaction in redactions:
                self._by_detector[redaction.detector] += 1
                self._by_reason[redaction.redaction_reason] += 1

    @property
    def total(self) -> int:
        """Redactions counted so far."""
        with self._lock:
            return sum(self._by_detector.values())

    @property
    def values_scanned(self) -> int:
        """Strings scanned so far (the denominator of a redaction rate)."""
        with self._lock:
            return self._values_scanned

    @property
    def values_redacted(self) -> int:
        """Strings in which at least one span was redacted."""
        with self._lock:
            return self._values_redacted

    def by_detector(self) -> dict[str, int]:
        """A copy of the counts per detector name."""
        with self._lock:
            return dict(self._by_detector)

    def by_reason(self) -> dict[str, int]:
        """A copy of the counts per ``redaction_reason``."""
        with self._lock:
            return dict(self._by_reason)

    def snapshot(self) -> dict[str, Any]:
        """Every counter at one instant, for an exporter to read without races."""
        with self._lock:
            return {
                "total": sum(self._by_detector.values()),
                "values_scanned": self._values_scanned,
                "values_redacted": self._values_redacted,
                "by_detector": dict(self._by_detector),
                "by_reason": dict(self._by_reason),
            }


@dataclass(frozen=True, slots=True)
class DetectorInfo:
    """A detector's public description (for documentation and audits)."""

    name: str
    reason: str
    source: Source


def detectors() -> tuple[DetectorInfo, ...]:
    """Every detection rule the redactor applies, with where it comes from.

    ``base64-secret`` wraps all the others (it redacts a base64 token whose decoded text
    they find something in), and the last three apply only inside structures, where a dict
    key names its value.
    """
    rules = (
        *DETECTORS,
        _BASE64_DETECTOR,
        _KEY_HINT_DETECTOR,
        _AUTH_HINT_DETECTOR,
        _BASIC_HINT_DETECTOR,
    )
    return tuple(DetectorInfo(d.name, d.reason, d.source) for d in rules)


@dataclass(slots=True)
class _Hit:
    start: int
    end: int
    detector: Detector
    via: tuple[str, ...] = ()  # what the detectors found inside a decoded base64 token


class Redactor:
    """Scrubs secrets and PII out of text and JSON-like values before they are written.

    Args:
        key: The per-ledger HMAC key (at least :data:`MIN_KEY_BYTES` bytes). The same
            secret under the same key always yields the same digest, so occurrences can
            be correlated; without the key the digest reveals nothing.
        stats: Counters to update; a fresh :class:`RedactionStats` if omitted.

    Raises:
        ValidationFailed: the key is not bytes or is too short.
    """

    def __init__(self, key: bytes, *, stats: RedactionStats | None = None) -> None:
        if not isinstance(key, bytes | bytearray):
            raise ValidationFailed("key", f"expected bytes, got {type(key).__name__}")
        if len(key) < MIN_KEY_BYTES:
            raise ValidationFailed(
                "key", f"an HMAC key needs at least {MIN_KEY_BYTES} bytes, got {len(key)}"
            )
        self._key = bytes(key)
        self.stats = stats if stats is not None else RedactionStats()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key=<{len(self._key)} bytes>)"  # never the key itself

    def digest(self, secret: str) -> str:
        """The keyed digest recorded for ``secret``: ``hmac-sha256:<64 hex>``."""
        data = secret.encode("utf-8", "surrogatepass")
        return "hmac-sha256:" + hmac.new(self._key, _DOMAIN + data, hashlib.sha256).hexdigest()

    def redact_text(self, text: str) -> RedactionResult[str]:
        """Redact one string.

        Raises:
            ValidationFailed: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise ValidationFailed("text", f"expected str, got {type(text).__name__}")
        found: list[Redaction] = []
        value = self._redact_string(text, None, None, found)
        self.stats.record(found, values_scanned=1)
        return RedactionResult(value, tuple(found))

    def redact(self, value: object) -> RedactionResult[Any]:
        """Redact a JSON-like value: ``str``, ``int``, ``float``, ``bool``, ``None``, and
        dicts, lists and tuples of them, to any depth up to :data:`MAX_DEPTH`.

        The result has the same shape (same keys in the same order, same lengths, tuples
        stay tuples); only strings change, except that an ``int`` found to be a secret
        (say, a card number) becomes its marker string.

        Raises:
            ValidationFailed: an unsupported type, or nesting deeper than MAX_DEPTH. Both
                fail closed: nothing is returned that was not scanned.
        """
        found: list[Redaction] = []
        counter = [0]
        result = self._walk(value, "$", key_hint=None, depth=0, found=found, counter=counter)
        self.stats.record(found, values_scanned=counter[0])
        return RedactionResult(result, tuple(found))

    # --- internals ---------------------------------------------------------------------

    def _walk(
        self,
        value: object,
        path: str,
        *,
        key_hint: str | None,
        depth: int,
        found: list[Redaction],
        counter: list[int],
    ) -> Any:
        if depth > MAX_DEPTH:
            raise ValidationFailed(path, f"nesting deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            counter[0] += 1
            return self._redact_string(value, path, key_hint, found)
        if value is None or isinstance(value, bool | float):
            return value
        if isinstance(value, int):
            counter[0] += 1
            before = len(found)
            text = self._redact_string(str(value), path, key_hint, found)
            return value if len(found) == before else text
        if isinstance(value, Mapping):
            pair_name = _pair_name(value)
            return {
                key: self._walk(
                    item,
                    _child_path(path, key),
                    key_hint=_key_hint(key, pair_name),
                    depth=depth + 1,
                    found=found,
                    counter=counter,
                )
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            # ``{"api_key": ["…", "…"]}``: each item is as much the key's value as a lone
            # string would be (a nested dict's own keys replace the hint below it).
            items = [
                self._walk(
                    item,
                    f"{path}[{index}]",
                    key_hint=key_hint,
                    depth=depth + 1,
                    found=found,
                    counter=counter,
                )
                for index, item in enumerate(value)
            ]
            return tuple(items) if isinstance(value, tuple) else items
        raise ValidationFailed(path, _not_json(value))

    def _redact_string(
        self, text: str, path: str | None, key_hint: str | None, found: list[Redaction]
    ) -> str:
        """Redact until a re-scan of the output finds nothing.

        Replacing a span changes its neighbours' context: in ``(212) 555-0199(212) 555-0199``
        the second number follows a digit, so it is not a phone number until the first
        one has become ``…]``. One pass would leak it and would not be idempotent, so we
        re-scan the output (markers masked) and redact again until it is clean. Spans in
        records always index the original ``text``.
        """
        memo: _Memo = {}  # shared by the passes: most decoded text is the same in each
        hits = _hits(text, key_hint, memo)
        if not hits:
            return text  # most text: nothing to take out, nothing to build
        # The output as pieces: ``(start, end)`` is original text, ``str`` a new marker.
        pieces: list[tuple[int, int] | str] = [(0, len(text))]
        current = text
        for _ in range(_MAX_PASSES):
            groups = _merge(hits)
            if not groups:
                return current
            pieces = self._apply(text, pieces, groups, path, found)
            current = "".join(p if isinstance(p, str) else text[p[0] : p[1]] for p in pieces)
            hits = _hits(current, key_hint, memo)
        raise ValidationFailed(
            path or "text", f"redaction did not settle after {_MAX_PASSES} passes"
        )

    def _apply(
        self,
        text: str,
        pieces: list[tuple[int, int] | str],
        groups: list[tuple[int, int, list[_Hit]]],
        path: str | None,
        found: list[Redaction],
    ) -> list[tuple[int, int] | str]:
        # Markers are masked before detection, so every group lies inside one
        # original-text piece; map it back to original offsets through that piece.
        out: list[tuple[int, int] | str] = []
        position = 0
        pending = iter(groups)
        group = next(pending, None)
        for piece in pieces:
            if isinstance(piece, str):
                out.append(piece)
                position += len(piece)
                continue
            first, last = piece
            cursor = first
            piece_end = position + (last - first)
            while group is not None and group[0] < piece_end:
                g_start, g_end, hits = group
                assert position <= g_start, "a hit crossed a marker"
                assert g_end <= piece_end, "a hit crossed a marker"
                start, end = first + (g_start - position), first + (g_end - position)
                if start > cursor:
                    out.append((cursor, start))
                out.append(
                    self._record(text, start=start, end=end, hits=hits, path=path, found=found)
                )
                cursor = end
                group = next(pending, None)
            if cursor < last:
                out.append((cursor, last))
            position = piece_end
        return out

    def _record(
        self,
        text: str,
        *,
        start: int,
        end: int,
        hits: list[_Hit],
        path: str | None,
        found: list[Redaction],
    ) -> str:
        winner = max(hits, key=lambda h: (h.end - h.start, -h.detector.priority))
        digest = self.digest(text[start:end])
        short = digest.removeprefix("hmac-sha256:")[:_MARKER_HEX]
        marker = f"[REDACTED:{winner.detector.name}:hmac-sha256:{short}]"
        found.append(
            Redaction(
                detector=winner.detector.name,
                redaction_reason=winner.detector.reason,
                digest=digest,
                marker=marker,
                path=path,
                start=start,
                end=end,
                also_detected=tuple(
                    sorted(
                        {n for h in hits for n in (h.detector.name, *h.via)}
                        - {winner.detector.name}
                    )
                ),
            )
        )
        return marker


_KEY_HINT_DETECTOR = Detector(
    name="secret-keyword",
    reason="value assigned to a secret-named key",
    source="tracebound",
    priority=40,
    find=lambda _text: iter(()),
)
_AUTH_HINT_DETECTOR = Detector(
    name="auth-header",
    reason="HTTP Authorization credential",
    source="tracebound",
    priority=30,
    find=lambda _text: iter(()),
)
# ``{"auth": "<base64 of user:password>"}`` (Docker's config.json): the text rule of the
# same name reads the key in the text; in a structure the key is the dict's.
_BASIC_HINT_DETECTOR = Detector(
    name="basic-auth-header",
    reason="HTTP Basic credential",
    source="tracebound",
    priority=30,
    find=lambda _text: iter(()),
)
# Found by _base64_hits, not by a ``find`` of its own. More specific than the keyword and
# entropy rules that may flag the same token (it has seen the secret inside), less than a
# header rule that names what the token is.
_BASE64_DETECTOR = Detector(
    name="base64-secret",
    reason="base64 that decodes to a secret",
    source="tracebound",
    priority=35,
    find=lambda _text: iter(()),
)


def _child_path(path: str, key: object) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key if isinstance(key, str) else str(key))}]"


def _outside(start: int, end: int, markers: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` not inside an existing marker."""
    parts = [(start, end)]
    for m_start, m_end in markers:
        if m_end <= start or m_start >= end:
            continue
        next_parts = []
        for p_start, p_end in parts:
            if m_end <= p_start or m_start >= p_end:
                next_parts.append((p_start, p_end))
                continue
            if p_start < m_start:
                next_parts.append((p_start, m_start))
            if m_end < p_end:
                next_parts.append((m_end, p_end))
        parts = next_parts
    return parts


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


# Characters a reader (or FenceWrapper.sanitize, on the way into a prompt) drops or folds
# away: format characters (zero-width, bidi, soft hyphen, word joiner, tags) and variation
# selectors. NFKC and the look-alike table below cover fullwidth and homoglyph spellings.
INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
    "\U000e0000-\U000e0fff]"
)
# The Cyrillic and Greek letters that pass for Latin ones (the fence folds the same).
CONFUSABLES: Final = str.maketrans(
    "аАвВеЕкКмМнНоОрРсСтТуУхХіІјЈѕЅԁԛԝӏɡαΑβΒεΕηΗιΙκΚμΜνΝοΟρΡτΤυΥχΧζΖ",
    "aABBeEkKmMHHoOpPcCtTyYxXiIjJsSdqwlgaABBeEnHiIkKuMvNoOpPtTuYxXzZ",
)


def _disguise_view(text: str) -> tuple[str, list[int]] | None:
    """``text`` as a reader sees it, with each character's index in ``text``; None when
    that is ``text`` itself (always for ASCII, so most text pays one ``isascii``).

    An access key with a zero-width joiner in it, a token in fullwidth letters or with a
    Cyrillic look-alike slips past every detector, yet reads as (and, once the fence has
    normalised it, *is*) the secret; the detectors run on this view too and their spans are
    mapped back, so the whole disguised span becomes the marker.
    """
    if text.isascii():
        return None
    chars: list[str] = []
    index: list[int] = []
    changed = False
    for i, ch in enumerate(text):
        if ch.isascii():
            chars.append(ch)
            index.append(i)
            continue
        if INVISIBLE.match(ch):
            changed = True
            continue
        seen = unicodedata.normalize("NFKC", ch).translate(CONFUSABLES)
        changed = changed or seen != ch
        chars.extend(seen)
        index.extend([i] * len(seen))
    return ("".join(chars), index) if changed else None


# A detection before clean-up: span, rule, and what a base64 token's decoded text held.
_Raw = tuple[int, int, Detector, tuple[str, ...]]
# Decoded texts already scanned while redacting one string (all its passes), by (kind,
# text, layers left): the same base64 token repeated, or seen both as written and inside
# a percent view, and the same escaped line repeated, are decoded and scanned once.
_Memo = dict[tuple[str, str, int], list[_Raw]]


def _detect(text: str) -> list[_Raw]:
    # Most text holds no detector's hint; one prefilter scan then replaces thirty-four.
    if not may_match(text):
        return []
    return [
        (start, end, detector, ()) for detector in DETECTORS for start, end in detector.find(text)
    ]


def _surface(text: str) -> list[_Raw]:
    """Every detection in ``text`` as written and as a reader sees it
    (:func:`_disguise_view`)."""
    raw = _detect(text)
    view = None if text.isascii() else _disguise_view(text)  # the test inline: most text
    if view is not None:
        seen, index = view
        raw.extend(
            (index[start], index[end - 1] + 1, detector, via)
            for start, end, detector, via in _detect(seen)
            if end > start
        )
    return raw


def _scan(text: str, layers: int, memo: _Memo) -> list[_Raw]:
    """Every detection in ``text``: as written, as a reader sees it (:func:`_disguise_view`),
    JSON-unescaped (:func:`_json_hits`) and, ``layers`` deep, as a decoder does
    (percent-escapes, a form's ``+`` and base64 decoded)."""
    raw = _surface(text)
    if '\\"' in text:  # JSON inside a JSON string: most text has no backslash-quote
        raw.extend(_json_hits(text))
    if layers > 0:
        # Cheap tests first: most text holds no ``%`` or ``+`` and no run that could be
        # base64.
        if "%" in text or "+" in text:
            raw.extend(_percent_hits(text, layers - 1, memo))
        if len(text) >= BASE64_MIN_LENGTH and might_hold_base64(text):
            raw.extend(_base64_hits(text, layers - 1, memo))
    return raw


def _json_hits(text: str) -> list[_Raw]:
    """Hits in ``text`` JSON-unescaped, once and (if still escaped) twice, mapped back to
    the escapes that wrote them.

    ``{"body": "{\\"password\\": \\"…\\"}"}`` hides the key behind escaped quotes; its view
    reads ``{"body": "{"password": "…"}"}``. A hit in a view is first shrunk so that it
    cuts none of that view's own escapes (:func:`whole_escapes`), then mapped back level
    by level; each mapping takes whole escapes. So the marker replaces whole escapes at
    every level, and what was valid JSON at any level stays valid.
    """
    hits: list[_Raw] = []
    views: list[View] = []
    current = text
    for _ in range(_JSON_LEVELS):
        view = json_view(current)
        if view is None:
            break
        views.append(view)
        current = view.text
        for found_start, found_end, detector, via in _clean(current, _surface(current)):
            start, end = whole_escapes(current, found_start, found_end)
            if end <= start:
                continue
            for outer in reversed(views):
                start, end = outer.original(start, end)
            hits.append((start, end, detector, via))
    return hits


def _percent_hits(text: str, layers: int, memo: _Memo) -> list[_Raw]:
    """Hits in the percent-decoded text, mapped back to the escapes that wrote them.

    Only the lines around escapes (or a form's ``+``) are decoded and scanned again:
    elsewhere the decoded text is the text itself, already scanned, so a prompt with one
    URL in it does not pay twice for the rest. Lines that look form-encoded are read with
    ``+`` as a space (a plus sign there is ``%2B``).
    """
    hits: list[_Raw] = []
    for first, last in escaped_lines(text):
        part = text[first:last]
        key = ("%", part, layers)
        found = memo.get(key)
        if found is None:
            found = []
            view = percent_view(part, plus=form_encoded(part))
            if view is not None:
                for start, end, detector, via in _clean(view.text, _scan(view.text, layers, memo)):
                    o_start, o_end = view.original(start, end)
                    found.append((o_start, o_end, detector, via))
            memo[key] = found
        hits.extend((first + start, first + end, d, via) for start, end, d, via in found)
    return hits


def _base64_hits(text: str, layers: int, memo: _Memo) -> list[_Raw]:
    """Whole base64 tokens whose decoded text holds a secret (a span inside cannot be
    mapped back: three bytes are spread over four characters)."""
    hits: list[_Raw] = []
    for start, end, decoded in base64_texts(text):
        key = ("b64", decoded, layers)
        inner = memo.get(key)
        if inner is None:
            inner = memo[key] = _clean(decoded, _scan(decoded, layers, memo))
        if inner:
            names = {name for _, _, d, via in inner for name in (d.name, *via)}
            hits.append((start, end, _BASE64_DETECTOR, tuple(sorted(names))))
    return hits


def _clean(text: str, raw: list[_Raw]) -> list[_Raw]:
    """Hits outside existing markers, trimmed of whitespace, and holding a letter or digit."""
    if not raw:
        return []
    markers = [m.span() for m in MARKER_RE.finditer(text)]
    hits: list[_Raw] = []
    for start, end, detector, via in raw:
        for p_start, p_end in _outside(start, end, markers) if markers else [(start, end)]:
            t_start, t_end = _trim(text, p_start, p_end)
            if any(c.isalnum() for c in text[t_start:t_end]):
                hits.append((t_start, t_end, detector, via))
    return hits


def _hits(text: str, key_hint: str | None, memo: _Memo) -> list[_Hit]:
    raw = _scan(text, _DECODE_LAYERS, memo)
    if key_hint is not None:
        raw.extend(
            (start, end, detector, ()) for start, end, detector in _key_hint_hits(text, key_hint)
        )
    if not raw:
        return []
    return [_Hit(start, end, detector, via) for start, end, detector, via in _clean(text, raw)]


# Keys are a document's schema: few, short, and the same in every step, so their kind is
# cached; a long key (rare, and a memory risk in a cache) is classified each time.
_cached_key_kind = functools.lru_cache(maxsize=1024)(key_kind)
_CACHED_KEY_LENGTH = 64


def _kind_of(key: str) -> Literal["auth", "basic", "secret"] | None:
    return _cached_key_kind(key) if len(key) <= _CACHED_KEY_LENGTH else key_kind(key)


def _pair_name(mapping: Mapping[Any, Any]) -> str | None:
    """In ``{"name": "DB_PASSWORD", "value": …}``, the secret-named sibling that names the
    value's key (``name`` or ``key``, as Kubernetes, HAR and AWS tags spell them, or
    CloudFormation's ``ParameterKey``)."""
    if not (
        "value" in mapping
        or "Value" in mapping
        or "VALUE" in mapping
        or "ParameterValue" in mapping
    ):
        return None  # most dicts: four lookups
    for key in _PAIR_NAME_KEYS:
        name = mapping.get(key)
        if isinstance(name, str) and _kind_of(name) is not None:
            return name
    return None


def _key_hint(key: object, pair_name: str | None) -> str | None:
    """What names a dict item's value: its key, or for ``value`` the pair's secret name."""
    if pair_name is not None and key in _PAIR_VALUE_KEYS:
        return pair_name
    return key if isinstance(key, str) else None


def _key_hint_hits(text: str, key: str) -> list[tuple[int, int, Detector]]:
    """A string under a secret-named key is a secret as a whole (``{"api_key": "…"}``)."""
    kind = _kind_of(key)
    if kind is None:
        return []
    if kind == "auth":
        credential = auth_credential(text)
        return [] if credential is None else [(*credential, _AUTH_HINT_DETECTOR)]
    if kind == "basic":
        credential = basic_credential(text)
        return [] if credential is None else [(*credential, _BASIC_HINT_DETECTOR)]
    if plausible_secret_value(text, key, quoted=True, op="="):
        return [(0, len(text), _KEY_HINT_DETECTOR)]
    return []


def _merge(hits: list[_Hit]) -> list[tuple[int, int, list[_Hit]]]:
    """Overlapping hits become one span covering all of them (never a partial leak)."""
    hits.sort(key=lambda h: (h.start, -h.end))
    groups: list[tuple[int, int, list[_Hit]]] = []
    for hit in hits:
        if groups and hit.start < groups[-1][1]:
            start, end, members = groups[-1]
            members.append(hit)
            groups[-1] = (start, max(end, hit.end), members)
        else:
            groups.append((hit.start, hit.end, [hit]))
    return groups


def _not_json(value: object) -> str:
    """Why a value cannot be redacted, and what to write instead: artifacts are JSON, and
    money in this ledger is a decimal string (floats and Decimals are not hashed)."""
    name = type(value).__name__
    if isinstance(value, Decimal):
        return f'cannot redact a Decimal; write {value} as a decimal string, e.g. "{value}"'
    return (
        f"cannot redact a value of type {name}: artifacts hold JSON values only "
        "(text, integers, booleans, null, lists and objects)"
    )
