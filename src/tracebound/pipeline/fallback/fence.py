"""The fence: how untrusted text reaches a prompt without being able to act as instructions.

Everything the planner did not write itself (advisory text, repository files, retrieved
examples, and above all the summaries of failed attempts built from sandbox output) goes
through three layers, following "spotlighting" (Hines et al., 2024):

1. **Sanitise** (:meth:`FenceWrapper.sanitize`). Unicode tricks are undone first (NFKC,
   zero-width, bidi-override and other invisible characters removed, blanks that are not
   spaces made spaces, combining marks left on Latin letters or on punctuation removed,
   every line-break character made ``\\n``, look-alikes of the rules' punctuation and
   mixed-script homoglyph words folded to ASCII and Latin), and encoded forms (HTML
   character references, percent-encoding, ``\\u`` escapes) are decoded, so that the
   patterns see what a model would read. Then known injection shapes
   are replaced by an inert ``[neutralised:<rule>]`` marker: instruction overrides, persona
   switches, chat-template tokens, role prefixes, code-fence and HTML breakouts, boundary
   and canary forgeries, exfiltration requests. What was neutralised is *recorded* (rule
   and count), never silently dropped.
2. **Delimit** (:meth:`FenceWrapper.wrap`). The text is put between a BEGIN and an END
   boundary line that carry a fresh per-attempt canary drawn from the injected id source.
   The text cannot contain a boundary: ``<<<``, ``>>>``, ``TB-UNTRUSTED`` and anything
   canary-shaped were neutralised in step 1, and it cannot know this attempt's canary anyway.
3. **Datamark**. Every line inside the fence starts with :data:`DATAMARK` and every space
   becomes :data:`DATAMARK`, so even a sentence that slipped past step 1 no longer reads as
   the planner's own prose, and no line inside the fence can equal a boundary line.

A canary found in a model's *answer* (:meth:`FenceWrapper.leaked`) means the fenced text
leaked into the output channel; the tier refuses such an answer.

The patterns are a floor, not a wall: the structural guarantees are delimiting and
datamarking. ``tests/fence/test_injection_corpus.py`` runs a corpus of injection strings
through the whole path and parses the resulting prompts.
"""

from __future__ import annotations

import base64
import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Final
from uuid import UUID

from blake3 import blake3
from pydantic import BaseModel, ConfigDict, Field

from tracebound.errors import ValidationFailed
from tracebound.pipeline.fallback._encodings import decode_once, neutralise_encoded
from tracebound.pipeline.redaction import CONFUSABLES, INVISIBLE, Redactor
from tracebound.pipeline.retry.models import MAX_SUMMARY_BYTES, AttemptSummary, FailingSignal
from tracebound.sources import IdSource

__all__ = [
    "BOUNDARY_TOKEN",
    "CANARY_PATTERN",
    "DATAMARK",
    "FenceWrapper",
    "Neutralisation",
    "SanitizedText",
    "build_attempt_summary",
    "merge_reports",
]

DATAMARK: Final = "\u02c6"  # MODIFIER LETTER CIRCUMFLEX: rare in code and logs, not a space
BOUNDARY_TOKEN: Final = "TB-UNTRUSTED"  # noqa: S105 - a fence marker, not a password
CANARY_PATTERN: Final = r"tbc-[a-z2-7]{24}"
_CANARY = re.compile(rf"^{CANARY_PATTERN}$")
_LABEL = re.compile(r"^[a-z][a-z0-9-]{0,39}$")

# --- step 1a: unicode --------------------------------------------------------------------

_LINE_BREAKS = re.compile(r"\r\n|[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# Drawn as a blank but not a Unicode space, so neither \s in the rules nor datamarking
# would see it: "New\u2800instructions" reads as two words. The braille blank, and the
# Hangul fillers (letters, but invisible or a blank where drawn; NFKC makes U+3164 and
# U+FFA0 U+1160), which the redactor drops as invisible.
_BLANKS = "\u2800\u115f\u1160"
# Look-alikes of the punctuation the rules key on (code fences, boundaries, tags, role
# prefixes): "\u02cb\u02cb\u02cb" reads as a code fence and "System\u02d0" as a role prefix.
# NFKC already folds the fullwidth and small forms.
_PUNCTUATION: Final = str.maketrans(
    {
        ch: ascii_ch
        for ascii_ch, lookalikes in (
            ("`", "\u02cb\u02f4\u2035"),
            ("~", "\u223c\u2053\u301c"),
            ("<", "\u02c2\u1438\u2039\u276c\u276e\u27e8\u3008"),
            (">", "\u02c3\u1433\u203a\u276d\u276f\u27e9\u3009"),
            (":", "\u02d0\u02f8\ua789\u0589\u2236\u05c3\u16ec\u205a"),
            ("|", "\u01c0\u2223\u23d0\u2502"),
        )
        for ch in lookalikes
    }
)
# Layers of encoding decoded before the rules look (``&amp;amp;lt;`` is three); text
# encoded deeper is made of nothing but encodings, and is neutralised instead.
_DECODE_ROUNDS: Final = 4
# A model's answer is short (``Budget.max_output_tokens``): ``leaked`` digs deeper.
_ANSWER_DECODE_ROUNDS: Final = 16
_LATIN_OR_CONFUSABLE = re.compile(r"[^\W\d_]+", re.UNICODE)


def _is_latin(ch: str) -> bool:
    return "LATIN" in unicodedata.name(ch, "")


def _is_lookalike(ch: str) -> bool:
    return ch.translate(CONFUSABLES) != ch


def _latin_like(ch: str) -> bool:
    """A Latin letter, or a letter the homoglyph step may fold into one."""
    return _is_latin(ch) or _is_lookalike(ch)


def _genuine_foreign(line: str) -> bool:
    """Whether a line has letters of another script with no Latin twin (real Cyrillic or
    Greek text, where all-look-alike words such as "ответ" are ordinary words)."""
    return any(
        ch.isalpha() and not ch.isascii() and not _is_latin(ch) and not _is_lookalike(ch)
        for ch in line
    )


def _fold_word(match: re.Match[str], *, whole_words: bool) -> str:
    word = match.group(0)
    folded = word.translate(CONFUSABLES)
    if folded == word:
        return word
    has_latin = any(_is_latin(ch) for ch in word)
    all_lookalike = all(_is_latin(ch) or _is_lookalike(ch) for ch in word)
    # Mixed Latin + look-alikes is always a disguise; a word made only of look-alikes is
    # one only where the line is not genuinely written in that script.
    if all_lookalike and (has_latin or (whole_words and len(word) > 1)):
        return folded
    return word


def _fold_homoglyphs(text: str) -> str:
    out: list[str] = []
    for line in text.split("\n"):
        whole = not _genuine_foreign(line)
        out.append(_LATIN_OR_CONFUSABLE.sub(lambda m: _fold_word(m, whole_words=whole), line))  # noqa: B023 - used at once
    return "\n".join(out)


def _stray_mark(kept: list[str]) -> bool:
    """Whether a combining mark that would follow ``kept`` is a disguise.

    NFKC composed every accented Latin letter that exists; a mark still hanging on one
    ("ign\u0308ore") only hides the word from the patterns. Nor does any script hang marks
    on punctuation, spaces or the start of a line ("`\u0301`\u0301`\u0301" is a code fence
    to a reader, and a mark on the start of a line hides a role prefix). Marks on letters
    of other scripts, and stacked on those, are real text.
    """
    if not kept:
        return True
    return _latin_like(kept[-1]) or unicodedata.category(kept[-1])[0] not in "LM"


def _strip_invisible(text: str, counts: Counter[str]) -> str:
    """Line breaks made ``\\n``, other spaces made ``" "`` (and blanks that are not spaces,
    counted); invisible characters, variation selectors and stray combining marks
    (:func:`_stray_mark`) dropped (and counted)."""
    kept: list[str] = []
    for ch in _LINE_BREAKS.sub("\n", text):
        cat = unicodedata.category(ch)
        if ch in "\n\t":
            kept.append(ch)
        elif ch in _BLANKS:
            counts["invisible-char"] += 1
            kept.append(" ")
        elif cat in {"Cc", "Cf", "Cs", "Co", "Cn"} or INVISIBLE.match(ch):  # variation sel. too
            counts["invisible-char"] += 1
        elif cat in {"Mn", "Me"} and _stray_mark(kept):
            counts["combining-mark"] += 1
        elif cat in {"Zs", "Zl", "Zp"}:
            kept.append(" ")
        else:
            kept.append(ch)
    # What was dropped may have separated a letter from its mark: compose them now, so that
    # sanitising the result again changes nothing.
    return unicodedata.normalize("NFKC", "".join(kept))


def _unicode(text: str, counts: Counter[str]) -> str:
    """Undo the unicode tricks (step 1a), counting what was changed."""
    out = unicodedata.normalize("NFKC", text)
    # Both before the marks are judged: the datamark is a letter, "^" is not, and a
    # mark on a look-alike of punctuation is as stray as one on the punctuation.
    if DATAMARK in out:
        counts["datamark-char"] += out.count(DATAMARK)
        out = out.replace(DATAMARK, "^")
    plain = out.translate(_PUNCTUATION)
    if plain != out:
        counts["homoglyph"] += sum(a != b for a, b in zip(out, plain, strict=True))
        out = plain
    out = _strip_invisible(out, counts)
    folded = _fold_homoglyphs(out)
    if folded != out:
        counts["homoglyph"] += sum(a != b for a, b in zip(out, folded, strict=True))
        out = folded
    return out


def _normalise(text: str, counts: Counter[str]) -> str:
    """Step 1a, and encoded forms decoded (``decoded``), to a fixed point.

    A layer decoded can be another encoding (``&amp;lt;``) or a unicode trick
    (``&#x200b;``), and a trick undone can join an encoding (``%`` ZWSP ``60``), so both
    are repeated until neither changes anything; what is still encoded after
    :data:`_DECODE_ROUNDS` layers is neutralised (``encoded``), which keeps the work linear
    and the result a fixed point (sanitising it again changes nothing).
    """
    out = _unicode(text, counts)
    for _ in range(_DECODE_ROUNDS):
        decoded, changed = decode_once(out)
        if not changed:
            return out
        counts["decoded"] += changed
        out = _unicode(decoded, counts)
    out, changed = neutralise_encoded(out)
    if changed:
        counts["encoded"] += changed
    return out


# --- step 1b: patterns ---------------------------------------------------------------------


def _words(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


_ROLES = _words(
    "system", "assistant", "user", "developer", "human", "ai", "bot", "model", "admin", "root",
    "operator", "instructions?", "response",
)  # fmt: skip
_OVERRIDE_VERB = _words(
    "ignore", "disregard", "forget", "override", "bypass", "skip", "drop", "abandon",
    "overwrite", "cancel",
)  # fmt: skip
_OVERRIDE_SCOPE = _words(
    "previous", "prior", "above", "earlier", "preceding", "all", "any", "every", "your",
    "the", "these", "those", "system", "safety", "original",
)  # fmt: skip
_OVERRIDE_OBJECT = _words(
    "instructions?", "prompts?", "rules?", "directions?", "directives?", "guidelines?",
    "guardrails?", "context", "constraints?", "polic(?:y|ies)", "messages?", "commands?",
    "tasks?", "fences?", "restrictions?",
)  # fmt: skip
_LEAK_VERB = _words(
    "reveal", "print", "output", "show", "repeat", "leak", "send", "post", "upload",
    "exfiltrate", "disclose", "echo", "dump",
)  # fmt: skip
_LEAK_OBJECT = _words(
    r"system\s+prompt", "canary", "secrets?", r"api[\s_-]?keys?", "credentials?", "tokens?",
    "passwords?", "instructions", r"env(?:ironment)?\s+var(?:iable)?s?", r"\.env",
)  # fmt: skip
_CHAT_TAGS = _words("im_start", "im_end", "endoftext", "eot_id", "start_of_turn", "end_of_turn")
_HTML_TAGS = _words(
    "system", "assistant", "user", "developer", "human", "instructions?", "prompt", "context",
    "tool", "data", "fence", "untrusted", "script", "iframe", "img", "style", "svg", "object",
    "embed", "meta", "link", "a",
)  # fmt: skip

_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (name, re.compile(pattern, re.IGNORECASE | re.MULTILINE))
    for name, pattern in (
        ("canary", r"tbc[\W_]{0,3}[a-z2-7]{6,}"),
        ("boundary", r"tb[\W_]{0,3}untrusted|<{3,}|>{3,}|«|»"),
        ("code-fence", r"`{3,}|~{3,}"),
        # "<\s*(?:/\s*)?", never "<\s*/?\s*": two adjacent \s* would try every split of a
        # long whitespace run (quadratic on third-party text of any length).
        (
            "chat-token",
            (
                r"<\|[^|\n]{0,40}\|>|\[/?(?:inst|sys)\]|<</?sys>>"
                rf"|<\s*(?:/\s*)?{_CHAT_TAGS}[^>\n]{{0,40}}>"
            ),
        ),
        # An unclosed "<!--" hides the rest of its line when rendered, so it runs to the end
        # of the line; that also keeps the scan linear (each "<!--" no longer rescans it).
        ("html-tag", rf"<!--.*?(?:-->|$)|<\s*(?:/\s*)?{_HTML_TAGS}\b[^>\n]{{0,200}}>"),
        ("markdown-link", r"!?\[[^\]\n]{0,200}\]\(\s*(?:https?|data|javascript):[^)\n]{0,500}\)"),
        (
            "override",
            (
                rf"\b{_OVERRIDE_VERB}\b[^.\n]{{0,60}}?\b{_OVERRIDE_SCOPE}\b[^.\n]{{0,60}}?"
                rf"\b{_OVERRIDE_OBJECT}\b"
            ),
        ),
        (
            "new-instructions",
            (
                r"\b(?:new|updated|revised|real|actual|true|hidden|secret|additional|important|urgent)"
                r"\s+(?:instructions?|system\s+prompts?|rules|directives?|tasks?|orders?)\b"
                r"|\bsystem\s+(?:prompt|override|message|instructions?)\b"
                r"|\b(?:do\s+not|don'?t|never|stop)\s+(?:follow|obey|listen\s+to)\b"
            ),
        ),
        (
            "persona",
            (
                r"\byou\s+are\s+(?:now|no\s+longer|actually|really|free|in)\b"
                r"|\b(?:act|behave|respond|answer|reply)\s+(?:as|like)\s+(?:if|an?|the|though)?\b"
                r"|\bpretend\b|\brole[\s-]?play|\bfrom\s+now\s+on\b"
                r"|\b(?:developer|god|admin|sudo|debug|unrestricted|jailbreak|dan)\s+mode\b"
                r"|\bjailbr[e3]ak"
            ),
        ),
        ("exfiltration", rf"\b{_LEAK_VERB}\b[^\n]{{0,40}}?\b{_LEAK_OBJECT}\b"),
        (
            "remote-fetch",
            (
                r"\b(?:curl|wget|nc|netcat)\b[^\n]{0,20}?"
                r"\b(?:https?://|ftp://|\d{1,3}(?:\.\d{1,3}){3})"
            ),
        ),
        # Last, and every prefix in a row at once: a rule applies between the markers left
        # before it, where "^" also matches right after a marker, so a role prefix there
        # ("System:System:", "ignore previous instructions System:") is one too. Earlier,
        # it would be left for the next sanitise to find (not idempotent).
        (
            "role-prefix",
            (
                rf"^(?:[ \t>*#-]*{_ROLES}"
                r"(?:[ \t]+(?:prompt|message|instructions?|override|note))?[ \t]*:)+"
            ),
        ),
    )
)
_NEUTRAL = "[neutralised:{}]"
_MARKER = re.compile(r"(\[neutralised:[a-z-]+\])")


def _apply_rule(pattern: re.Pattern[str], name: str, text: str) -> tuple[str, int]:
    """Apply one rule outside the markers earlier rules left, so markers stay inert."""
    parts = _MARKER.split(text)
    hits = 0
    for i in range(0, len(parts), 2):
        parts[i], n = pattern.subn(_NEUTRAL.format(name), parts[i])
        hits += n
    return "".join(parts), hits


class Neutralisation(BaseModel):
    """How often one rule fired while sanitising a text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str
    count: Annotated[int, Field(ge=1)]


class SanitizedText(BaseModel):
    """A sanitised text and the record of what sanitising changed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    neutralised: tuple[Neutralisation, ...] = ()

    @property
    def total(self) -> int:
        """How many things were neutralised in all."""
        return sum(n.count for n in self.neutralised)

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(n.rule for n in self.neutralised)


def merge_reports(reports: Sequence[SanitizedText]) -> tuple[Neutralisation, ...]:
    """Sum several sanitising reports per rule (for the attempt's anchor extras)."""
    counts: Counter[str] = Counter()
    for report in reports:
        for n in report.neutralised:
            counts[n.rule] += n.count
    return tuple(Neutralisation(rule=r, count=c) for r, c in sorted(counts.items()))


class FenceWrapper:
    """Sanitises, delimits and datamarks untrusted text (see the module docstring).

    Args:
        ids: the injected randomness a canary is drawn from (pass ``ledger.ids``), so a
            recorded attempt replays to the same prompt bytes.
    """

    def __init__(self, ids: IdSource) -> None:
        self._ids = ids

    # -- canaries ----------------------------------------------------------------------

    def new_canary(self) -> str:
        """A fresh canary: ``tbc-`` and 24 base32 characters (120 bits) from the id source.

        Hashed rather than used raw so that sequential test ids still yield canaries that
        look random, and a canary reveals nothing about the id it came from.
        """
        digest = blake3(b"tracebound/fence-canary/v1\x00" + self._ids.new_id().bytes).digest()
        return "tbc-" + base64.b32encode(digest[:15]).decode("ascii").lower()

    @staticmethod
    def leaked(text: str, canary: str) -> bool:
        """Whether ``canary`` shows up in ``text`` (a model's answer), even disguised: in
        another case, full-width, in look-alike letters, with accents or anything else
        (spaces, zero-width characters, datamarks) between its characters, or encoded (HTML
        character references, percent-encoding, ``\\u`` escapes, also several layers
        deep). A canary is ASCII letters and digits, so only those are compared."""
        wanted = canary.replace("-", "")
        view = text
        for _ in range(_ANSWER_DECODE_ROUNDS):
            folded = unicodedata.normalize("NFKD", view).translate(CONFUSABLES).casefold()
            if wanted in re.sub(r"[^a-z0-9]+", "", folded):
                return True
            plain = _strip_invisible(unicodedata.normalize("NFKC", view), Counter())
            view, changed = decode_once(plain)
            if not changed:
                return False
        return False

    # -- step 1 --------------------------------------------------------------------------

    def sanitize(self, text: str) -> SanitizedText:
        """Undo unicode tricks and neutralise injection shapes; idempotent.

        Raises:
            ValidationFailed: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise ValidationFailed("text", f"expected str, got {type(text).__name__}")
        counts: Counter[str] = Counter()
        out = _normalise(text, counts)
        for name, pattern in _RULES:
            out, hits = _apply_rule(pattern, name, out)
            if hits:
                counts[name] += hits
        return SanitizedText(
            text=out,
            neutralised=tuple(Neutralisation(rule=r, count=c) for r, c in sorted(counts.items())),
        )

    # -- steps 2 and 3 -----------------------------------------------------------------

    @staticmethod
    def begin_line(label: str, canary: str) -> str:
        return f"<<<{BOUNDARY_TOKEN} {label} BEGIN {canary}>>>"

    @staticmethod
    def end_line(label: str, canary: str) -> str:
        return f"<<<{BOUNDARY_TOKEN} {label} END {canary}>>>"

    def fence(
        self, text: str, *, canary: str, label: str = "untrusted"
    ) -> tuple[str, SanitizedText]:
        """Sanitise, then wrap; returns the block and the sanitising report.

        Raises:
            ValidationFailed: the canary is not one :meth:`new_canary` makes, or the label
                is not a short lower-case slug (both appear outside the fence).
        """
        if not _CANARY.fullmatch(canary):
            raise ValidationFailed("canary", "not a canary made by FenceWrapper.new_canary")
        if not _LABEL.fullmatch(label):
            raise ValidationFailed("label", "a fence label is a lower-case slug")
        report = self.sanitize(text)
        body = report.text.removesuffix("\n")
        marked = "\n".join(DATAMARK + line.replace(" ", DATAMARK) for line in body.split("\n"))
        block = f"{self.begin_line(label, canary)}\n{marked}\n{self.end_line(label, canary)}"
        return block, report

    def wrap(self, text: str, *, canary: str, label: str = "untrusted") -> str:
        """The fenced, datamarked block for ``text`` (sanitised first, always)."""
        return self.fence(text, canary=canary, label=label)[0]

    @staticmethod
    def unmark(line: str) -> str:
        """Undo datamarking on one fenced line (for tools that read a prompt back)."""
        return line.removeprefix(DATAMARK).replace(DATAMARK, " ")


# --- ADR-0002: the summary of a failed attempt ----------------------------------------------


_NON_WORD = re.compile(r"\W")
_CUT_WINDOW = 64


def _drop_partial_word(text: str) -> str:
    """``text`` cut back to its last non-word character within the last 64 characters.

    A cut inside a word can turn it into a shorter word that a rule matches
    ("instructionsX" into "instruction"); a cut where a word ends cannot, since the original
    had a non-word character there too. A word longer than the window is cut where it is:
    no rule matches the inside of a word.
    """
    last = None
    for m in _NON_WORD.finditer(text, max(0, len(text) - _CUT_WINDOW)):
        last = m.start()
    return text[:last] if last else text


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else _drop_partial_word(text[: limit - 1]) + "…"


def _one_line(text: str) -> str:
    return " | ".join(part.strip() for part in text.split("\n") if part.strip())


def _clean_signal(
    signal: FailingSignal, fence: FenceWrapper, redactor: Redactor | None
) -> FailingSignal:
    def clean(value: str, limit: int) -> str:
        return _clean(fence, value, limit, redactor)

    location = None if signal.location is None else clean(signal.location, 512)
    return FailingSignal(
        gate=clean(signal.gate, 512) or "[empty]",
        kind=signal.kind,
        subject=clean(signal.subject, 512) or "[empty]",
        message=clean(signal.message, 1024),
        location=location or None,
    )


def _redacted(fence: FenceWrapper, text: str, redactor: Redactor | None) -> str:
    """Sanitised ``text`` redacted (and sanitised again if that changed it).

    Decoding can reveal a secret the gate's redactor did not see (``AKIA&#x49;OSF…``: it
    does not read HTML references), so redaction comes after sanitising.
    """
    if redactor is None:
        return text
    redacted = redactor.redact_text(text).value
    return text if redacted == text else fence.sanitize(redacted).text


def _clean(fence: FenceWrapper, value: str, limit: int, redactor: Redactor | None) -> str:
    """One line of sanitised text, at most ``limit`` characters, that sanitising again
    leaves alone: sanitised (line-start shapes such as role prefixes), joined into one line,
    sanitised again (shapes split across lines), redacted, then clipped after a whole word
    (after redacting: a cut through a secret leaves a piece no detector recognises)."""
    first = fence.sanitize(value)
    joined = fence.sanitize(_one_line(first.text))
    return _clip(_redacted(fence, joined.text, redactor), limit)


def _cap_bytes(lines: Iterable[str], count: int, limit: int) -> tuple[str, int]:
    """The first of ``count`` lines that fit in ``limit`` UTF-8 bytes (the last one cut after
    a word if need be), then a note of how many were left out; and how many lines it took.

    ``lines`` is consumed only as far as the text goes, so a line that cannot be shown is
    never made (each costs several sanitising passes).
    """
    out: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        size = len(line.encode("utf-8")) + 1
        trailer = f"[… {count - index} more signal(s) omitted]"
        if used + size + len(trailer.encode("utf-8")) + 1 > limit and index < count - 1:
            out.append(trailer)
            return "\n".join(out), index
        if used + size > limit:
            room = max(limit - used - 4, 0)
            head = line.encode("utf-8")[:room].decode("utf-8", "ignore")
            out.append(_drop_partial_word(head) + "…")
            return "\n".join(out), index + 1
        out.append(line)
        used += size
    return "\n".join(out), len(out)


def _signal_lines(
    signals: Sequence[FailingSignal],
    fence: FenceWrapper,
    redactor: Redactor | None,
    cleaned: list[FailingSignal],
) -> Iterator[str]:
    """One sanitised line per signal, made only when asked for; ``cleaned`` collects the
    sanitised signal behind each line made."""
    for signal in signals:
        s = _clean_signal(signal, fence, redactor)
        cleaned.append(s)
        where = f" at {s.location}" if s.location else ""
        why = f": {s.message}" if s.message else ""
        line = fence.sanitize(f"- [{s.gate}] {s.kind} {s.subject}{where}{why}").text
        yield _redacted(fence, line, redactor)


def build_attempt_summary(
    *,
    attempt_id: UUID,
    sandbox_run_id: str,
    failing_signals: Sequence[FailingSignal],
    fence: FenceWrapper,
    evidence_paths: Sequence[str] = (),
    redactor: Redactor | None = None,
) -> AttemptSummary:
    """ADR-0002's summary of a failed attempt: from structured signals only, sanitised,
    at most 4 KB.

    No raw sandbox output is accepted: the gate parses tool output into
    :class:`FailingSignal` values first. Each signal field is sanitised again here (it is
    untrusted text even after parsing) and flattened to one line; the summary lists one
    signal per line, each line sanitised as a whole (fields side by side can form what
    none holds alone), and, past :data:`MAX_SUMMARY_BYTES`, says how many it left out. The
    result is sanitised text itself (sanitising it again neutralises nothing), not only
    once fenced; the prompt builder still fences and datamarks it before use.

    Only the signals the text lists are sanitised and kept (``failing_signals``): the cost
    is that of what fits in 4 KB, not of the tens of thousands a broken test suite can
    report (the redacted logs behind ``evidence_paths`` have them all).

    ``redactor`` (the gate runner's; ``RetryLoop`` passes it) redacts each field and line
    once sanitised: the signals were redacted as the tool wrote them, and decoding can
    reveal a secret that was hidden from the redactor.
    """
    signals = tuple(failing_signals)
    run_id = _clean(fence, sandbox_run_id, 512, redactor) or "[empty]"
    header = fence.sanitize(f"{len(signals)} failing signal(s) from sandbox run {run_id}:").text
    cleaned: list[FailingSignal] = []
    lines = itertools.chain([header], _signal_lines(signals, fence, redactor, cleaned))
    summary, taken = _cap_bytes(lines, len(signals) + 1, MAX_SUMMARY_BYTES)
    return AttemptSummary.model_validate(
        {
            "attempt_id": attempt_id,
            "sandbox_run_id": run_id,
            "failing_signals": tuple(cleaned[: max(taken - 1, 0)]),
            "prior_failure_summary": summary,
            "evidence_paths": tuple(evidence_paths),
        }
    )
