"""Decoders the redactor looks through: percent-encoding (with form ``+``), base64, and
JSON string escapes.

A secret written as ``password%3Dhunter2`` or as ``cGFzc3dvcmQ9aHVudGVyMg==`` is the same
secret to whoever decodes it, and no detector sees it as written. The redactor decodes such
text and runs the same detectors on the result (ADR 0005, "Encoded secrets"). This module
only decodes; it knows nothing of detectors.

- Percent-encoding decodes character by character, so :func:`percent_view` keeps, for
  each decoded character, the characters of the original that wrote it: a hit in the
  decoded text maps back to an exact span of the original.
- In a form body (``application/x-www-form-urlencoded``) ``+`` is a space. Text that
  looks form-encoded (:func:`form_encoded`) is decoded with ``+`` as a space as well, so
  ``%22password%22%3A+%22…`` reads ``"password": "…``.
- Base64 does not: three bytes are spread over four characters. :func:`base64_texts`
  yields each token that decodes to text, and the redactor takes the whole token when the
  text holds a secret. A block wrapped in lines is joined, whether the line breaks are
  real or ``\n`` escapes inside a JSON string.

- JSON string escapes decode character by character too: :func:`json_view` reads
  ``{"body": "{\\"password\\": …}"}`` as ``{"body": "{"password": …}"}``, and maps each
  decoded character back to its escape, as :func:`percent_view` does.

Percent and base64 decoding are strict, so that ordinary text does not decode by accident:
``%`` must be followed by two hex digits (and multi-byte sequences must be valid UTF-8),
and a base64 token must use one alphabet (standard or URL-safe), be padded correctly or
not at all, be canonical (the unused low bits of its last character are zero), and decode
to valid UTF-8 with no control characters but tab, CR and LF. Random ids, digests and
words fail one of these.
"""

from __future__ import annotations

import binascii
import bisect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "BASE64_MAX_LENGTH",
    "BASE64_MIN_LENGTH",
    "View",
    "base64_texts",
    "decode_base64",
    "escaped_lines",
    "form_encoded",
    "json_view",
    "might_hold_base64",
    "past_escape",
    "percent_view",
    "unwrap_base64",
    "whole_escapes",
    "wrapped_base64",
]

BASE64_MIN_LENGTH = 16
"""Shortest token decoded (12 bytes): shorter runs are mostly words, and a secret that
short is caught only under a secret-named key."""

BASE64_MAX_LENGTH = 1 << 20
"""Longest token decoded, to bound memory; longer ones are left to the entropy rule."""

_PERCENT_RUN = re.compile(r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*")  # literal first: a fast scan
# A ``+`` that a form encoder wrote for a space: inside a ``key=value`` value
# (``q=a+b``; base64 padding is never followed by a ``+``), or next to an escape
# (``%3A+Basic``). Not one between spaces (``a + b``), nor a leading one (``+1 415``).
# Each branch starts with a literal, so ``re`` skips ahead to the next ``=``, ``%`` or ``+``.
_FORM_PLUS = r"=[^\s=&+]*\+(?=[^\s=&+])|%[0-9A-Fa-f]{2}\+(?=[^\s+])|\+%[0-9A-Fa-f]{2}"
_FORM = re.compile(_FORM_PLUS)
# What makes a line worth decoding: an escape, or a form's ``+``.
_ENCODED = re.compile(rf"%[0-9A-Fa-f]{{2}}(?:%[0-9A-Fa-f]{{2}})*|{_FORM_PLUS}")
_PERCENT_OR_PLUS = re.compile(r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*|\+")


@dataclass(frozen=True, slots=True)
class View:
    """``text`` decoded, with where each decoded character came from.

    The view is a chain of segments. Segment ``k`` starts at ``starts[k]`` in the view and
    at ``sources[k]`` in the original. A *copied* segment (``ends[k] == -1``) holds
    original characters one for one; a *decoded* one is a single character that the
    original wrote as ``original[sources[k]:ends[k]]`` (``%3D``).
    """

    text: str
    starts: tuple[int, ...]
    sources: tuple[int, ...]
    ends: tuple[int, ...]

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that wrote ``text[start:end]`` (``end > start``).

        An escape is never cut: a span that starts or ends on a decoded character takes
        all of that character's escapes.
        """
        return self._position(start, first=True), self._position(end - 1, first=False)

    def _position(self, offset: int, *, first: bool) -> int:
        k = bisect.bisect_right(self.starts, offset) - 1
        if self.ends[k] == -1:
            return self.sources[k] + (offset - self.starts[k]) + (0 if first else 1)
        return self.sources[k] if first else self.ends[k]


def _utf8_length(lead: int) -> int:
    """Bytes in the UTF-8 sequence a lead byte opens; 0 for a byte that opens none."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def form_encoded(text: str) -> bool:
    """Whether ``text`` holds a ``+`` that a form encoder wrote for a space."""
    return "+" in text and ("=" in text or "%" in text) and _FORM.search(text) is not None


def escaped_lines(text: str) -> Iterator[tuple[int, int]]:
    """The parts of ``text`` worth decoding: each line that holds a ``%XX`` escape or a
    form's ``+`` (:func:`form_encoded`), with the line before and the line after it (a
    rule may read a key on one line and its value on the next), merged where they touch.
    Text with an escape on every line is one part.
    """
    window: tuple[int, int] | None = None
    # A form's ``+`` needs an ``=`` or an escape with it: most text with a ``+`` (a diff,
    # ``a + b``) has neither and is scanned for escapes only.
    form = "+" in text and ("=" in text or "%" in text)
    for run in (_ENCODED if form else _PERCENT_RUN).finditer(text):
        if window is not None and run.start() < window[1]:
            continue
        line_start = text.rfind("\n", 0, run.start()) + 1
        start = text.rfind("\n", 0, max(0, line_start - 1)) + 1 if line_start else 0
        line_end = text.find("\n", run.end())
        end = len(text) if line_end == -1 else text.find("\n", line_end + 1)
        end = len(text) if end == -1 else end
        if window is not None and start <= window[1]:
            window = (window[0], end)
            continue
        if window is not None:
            yield window
        window = (start, end)
    if window is not None:
        yield window


def _decodings(text: str, *, plus: bool) -> Iterator[tuple[int, int, str]]:
    """``(start, end, char)`` for each escape (or form ``+``) of ``text``, in order: the
    character that ``text[start:end]`` writes."""
    for run in (_PERCENT_OR_PLUS if plus else _PERCENT_RUN).finditer(text):
        if run.group() == "+":
            yield run.start(), run.end(), " "
            continue
        data = bytes.fromhex(run.group().replace("%", ""))
        index = 0
        while index < len(data):
            width = _utf8_length(data[index])
            try:
                char = data[index : index + width].decode("utf-8") if width else ""
            except UnicodeDecodeError:
                char = ""
            if len(char) != 1:
                index += 1  # not a valid sequence: this escape is copied as written
                continue
            at = run.start() + 3 * index
            yield at, at + 3 * width, char
            index += width


def percent_view(text: str, *, plus: bool = False) -> View | None:
    """``text`` with its ``%XX`` escapes decoded; None when it holds none.

    Escapes are decoded as UTF-8 bytes. An escape that is not part of a valid sequence (a
    lone ``%C3``, Latin-1 ``%E9``) stays as written. ``+`` stays ``+`` unless ``plus``
    (for text that :func:`form_encoded` says is a form body): elsewhere decoding it would
    split base64 and phone numbers.
    """
    if "%" not in text and not (plus and "+" in text):
        return None
    return _view(text, _decodings(text, plus=plus))


def _view(text: str, decodings: Iterable[tuple[int, int, str]]) -> View | None:
    """The view of ``text`` with each ``(at, end, char)`` of ``decodings`` (in order, not
    overlapping) read as ``char``, the rest copied; None when there is nothing to decode.
    Every piece keeps where it came from, so a hit in the view maps back to the original.
    """
    pieces: list[str] = []
    starts: list[int] = []
    sources: list[int] = []
    ends: list[int] = []
    copied = 0  # the original up to here is in the view
    length = 0  # the view's length so far
    for at, end, char in decodings:
        if at > copied:
            starts.append(length)
            sources.append(copied)
            ends.append(-1)
            pieces.append(text[copied:at])
            length += at - copied
        starts.append(length)
        sources.append(at)
        ends.append(end)
        pieces.append(char)
        length += 1
        copied = end
    if not pieces:
        return None
    if copied < len(text):
        starts.append(length)
        sources.append(copied)
        ends.append(-1)
        pieces.append(text[copied:])
    return View("".join(pieces), tuple(starts), tuple(sources), tuple(ends))


# A JSON string escape (RFC 8259): ``\"``, ``\\``, ``\/``, a control character's letter,
# or ``\u`` and four hex digits. Half a surrogate pair (``\ud83d``) stays as written:
# detectors have no use for it, and a lone surrogate is not text.
_JSON_ESCAPES = re.compile(r'\\(?:["\\/bfnrt]|u[0-9A-Fa-f]{4})')
_JSON_LETTERS = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _json_char(escape: str) -> str | None:
    letter = escape[1]
    if letter == "u":
        char = chr(int(escape[2:], 16))
        return None if "\ud800" <= char <= "\udfff" else char
    return _JSON_LETTERS.get(letter, letter)


def json_view(text: str) -> View | None:
    r"""``text`` with its JSON string escapes decoded, one level; None unless it holds a
    backslash-quote (``\"``: JSON inside a JSON string, the only case worth the work).

    Every escape in the text is decoded, inside a string or not: outside strings JSON has
    none, and in other text (a log line quoting a body) the escapes are the body's.
    ``\\\"`` (doubly escaped) decodes to ``\"``, which a second view decodes again.
    """
    if '\\"' not in text:
        return None
    return _view(text, _json_decodings(text))


def _json_decodings(text: str) -> Iterator[tuple[int, int, str]]:
    for match in _JSON_ESCAPES.finditer(text):
        char = _json_char(match.group())
        if char is not None:
            yield match.start(), match.end(), char


def _opens_escape(text: str, at: int) -> bool:
    """Whether the backslash at ``at`` opens an escape (is not the second of ``\\``)."""
    first = at
    while first > 0 and text[first - 1] == "\\":
        first -= 1
    return (at - first) % 2 == 0


def whole_escapes(text: str, start: int, end: int) -> tuple[int, int]:
    r"""``[start, end)`` shrunk so that it cuts no JSON escape of ``text``: a span that
    would end on the backslash of ``\"`` (or inside ``\u00e9``) stops before it, one that
    would start on an escape's letter starts after the escape. A marker over the result
    leaves every escape whole, so the text stays valid JSON once more unescaped."""
    for at in range(max(0, start - 5), start):
        if text[at] == "\\" and _opens_escape(text, at):
            escape = _JSON_ESCAPES.match(text, at)
            if escape is not None and escape.end() > start:
                start = escape.end()
                break
    for at in range(max(start, end - 5), end):
        if text[at] == "\\" and _opens_escape(text, at):
            escape = _JSON_ESCAPES.match(text, at)
            if escape is not None and escape.end() > end:
                end = at
                break
    return start, max(start, end)


# A maximal run of base64 characters of either alphabet, with its padding, that
# - holds a capital or a digit. Base64 of text always does: each three bytes begin with a
#   character for the first byte's top six bits, a capital for any byte below ``h``. A run
#   without one is a word, a path or an identifier (``no-write-to-prod``, ``src/a/b``);
# - is not all hex digits and hyphens: hex digests, commit ids and UUIDs are far likelier
#   than base64 that happens to be all hex.
# ``=`` may stand before the run (``password=…``) or after it (glue): see _padded.
_RUN = r"[A-Za-z0-9+/_\-]"
_TOKEN_BODY = (
    rf"(?={_RUN}{{{BASE64_MIN_LENGTH}}})"  # first the length: most words fail it
    rf"(?=[a-z+/_\-]*[A-Z0-9])(?![0-9A-Fa-f\-]*=*(?!{_RUN}))"
    rf"{_RUN}{{{BASE64_MIN_LENGTH},}}={{0,2}}(?!{_RUN})"
)
_TOKEN = re.compile(rf"(?<!{_RUN}){_TOKEN_BODY}")
_TOKEN_AT = re.compile(_TOKEN_BODY)  # the token that follows an escape: see _tokens
# A JSON string escape whose letters are base64 (or hex) characters: ``\n``, ``\r``,
# ``\t``, ``\b``, ``\f``, ``\/`` and ``\u00e9`` (``json.dumps`` writes one for any
# character outside ASCII, Go for ``<``, ``>``, ``&``).
_JSON_ESCAPE = re.compile(r"\\(?:[nrtbf/]|u[0-9A-Fa-f]{4})")


def past_escape(text: str, start: int) -> int:
    r"""Where the token of a run that starts at ``start`` begins: ``start``, or just after
    the escape when the run starts with a JSON escape's letters (the ``n`` of ``\n``, the
    ``u00e9`` of ``\u00e9``). With them the token is not base64, and a marker that took
    them would leave a bad escape. (``\\n`` is an escaped backslash and a plain ``n``.)"""
    if start == 0 or text[start - 1] != "\\":
        return start
    first = start - 1
    while first > 0 and text[first - 1] == "\\":
        first -= 1
    if (start - first) % 2 == 0:
        return start  # the backslash before ``start`` is itself escaped
    escape = _JSON_ESCAPE.match(text, start - 1)
    return start if escape is None else escape.end()


# Every base64 character as ``a``, any other ASCII character as a space: a text holds a
# run of 16 exactly when its translation holds ``a`` * 16, which C finds ten times faster
# than ``re`` scans for it. Prose mostly has none; ids and digests pass to the regex.
_RUNS = str.maketrans({chr(c): "a" if re.fullmatch(_RUN, chr(c)) else " " for c in range(128)})
_SIXTEEN = "a" * BASE64_MIN_LENGTH


def might_hold_base64(text: str) -> bool:
    """Whether ``text`` may hold a base64 token: a cheap test before :func:`base64_texts`."""
    return _SIXTEEN in text.translate(_RUNS) and _TOKEN.search(text) is not None


# The next line of a wrapped block: a line break (or, inside a JSON string, a ``\n`` or
# ``\r\n`` escape), indentation, and a run of any length that fills the rest of the line
# (up to the next break, the end, or the string's closing quote).
_BREAK = r"(?:\r?\n|(?:\\r)?\\n)"
_NEXT_LINE = re.compile(rf"{_BREAK}([ \t]*)({_RUN}+={{0,2}})(?=[ \t]*(?:{_BREAK}|$|[\"',]))")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_DIGESTS = r"(?:sha1|sha224|sha256|sha384|sha512|blake2b|blake3|md5)"
_DIGEST_LABEL = re.compile(rf"(?i){_DIGESTS}[:\-=]$")  # before a token: ``sha256:…``
_DIGEST_START = re.compile(rf"(?i){_DIGESTS}-")  # starting one: SRI ``sha384-…``
_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _padded(token: str) -> str:
    """``token`` with only the ``=`` its length calls for: more (``…MA===``) or fewer
    (``…MA=`` where two are due) than that means the ``=`` that follow are glue, as in
    ``key=<token>=``, and the token is unpadded."""
    body = token.rstrip("=")
    needed = -len(body) % 4
    return body + "=" * needed if len(token) - len(body) >= needed else body


def _strict_bytes(token: str) -> bytes | None:
    """The bytes a base64 token encodes, if one encoder could have written it exactly so."""
    body = token.rstrip("=")
    padding = len(token) - len(body)
    if len(body) % 4 == 1 or (padding and (len(body) + padding) % 4):
        return None
    urlsafe = "-" in body or "_" in body
    if urlsafe and ("+" in body or "/" in body):
        return None  # two alphabets: not one encoder's output
    data = body.encode("ascii")
    if urlsafe:
        data = data.translate(_URLSAFE)
    try:
        raw = binascii.a2b_base64(data + b"=" * (-len(body) % 4), strict_mode=True)
    except binascii.Error:
        return None
    if binascii.b2a_base64(raw, newline=False).rstrip(b"=") != data:
        return None  # non-zero unused bits: no encoder wrote this
    return raw


def decode_base64(token: str) -> str | None:
    """The text a base64 token encodes, or None if it is not strictly base64 of text."""
    raw = _strict_bytes(token)
    if raw is None:
        return None
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(decoded) else decoded


def _wrapped_block(text: str, first: str, end: int) -> tuple[int, str] | None:
    """The block that ``first`` (ending at ``end``) opens, as ``(end, joined)``, when it is
    wrapped: ``base64`` and MIME break lines every 76 characters, PEM every 64. That is
    lines of one length (a multiple of four, unpadded) at one indentation, and a last line
    no longer; the breaks may be ``\n`` escapes (JSON). None when no line follows."""
    width = len(first)
    if width % 4 or first.endswith("="):
        return None
    lines = [first]
    indent: str | None = None
    while (line := _NEXT_LINE.match(text, end)) is not None:
        if indent is not None and line.group(1) != indent:
            break
        token = _padded(line.group(2))
        if len(token) > width:
            break
        indent = line.group(1)
        lines.append(token)
        end = line.start(2) + len(token)
        if len(token) < width or token.endswith("="):
            break
    return (end, "".join(lines)) if len(lines) > 1 else None


def wrapped_base64(text: str, start: int, end: int) -> tuple[int, str] | None:
    """When the base64 line ``text[start:end]`` opens a block wrapped in lines (see
    :func:`_wrapped_block`), the block's end and its lines joined; None otherwise.

    For rules that take a credential after a label (``Authorization: Basic``, ``auth:``):
    their pattern stops at the first line break, and a credential that ``base64`` or a
    MIME encoder wrapped at 76 characters (PEM tools at 64) goes on after it."""
    return _wrapped_block(text, text[start:end], end)


_FIRST_LINE = re.compile(rf"{_RUN}+={{0,2}}")


def unwrap_base64(value: str) -> str | None:
    """The token that ``value`` writes as one base64 block wrapped in lines (all of
    ``value``, real or ``\\n``-escaped breaks), joined; None when it is not one."""
    first = _FIRST_LINE.match(value)
    if first is None:
        return None
    block = _wrapped_block(value, first.group(), first.end())
    return block[1] if block is not None and block[0] == len(value) else None


def _tokens(text: str) -> Iterator[tuple[int, str]]:
    """``(start, token)`` for each candidate token, in order (see :func:`past_escape`)."""
    if "\\" not in text:
        for match in _TOKEN.finditer(text):
            yield match.start(), match.group()
        return
    for match in _TOKEN.finditer(text):
        start = match.start()
        after = past_escape(text, start)
        if after == start:
            yield start, match.group()
            continue
        # The run holds the escape's letters; the token, if any, follows them. (Whenever
        # one does, the run with the letters is a token too: longer, and not all hex.)
        token = _TOKEN_AT.match(text, after)
        if token is not None:
            yield after, token.group()


def base64_texts(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, decoded)`` for each base64 token of ``text`` that decodes to text.

    A wrapped block is decoded as one token (a secret may straddle a line break); if it
    does not decode, its lines are tried one by one. Tokens that follow a digest label
    (``sha256:``, ``blake3:``, SRI ``sha384-``) are content addresses and are skipped.
    """
    covered = 0  # the end of the last block decoded whole
    # The end of the last block that did not decode: its lines are tried one by one, not
    # each as the start of a block again (that would scan the rest of it once per line,
    # quadratic in a wrapped image or other binary blob).
    failed = 0
    for start, found in _tokens(text):
        token = _padded(found)
        if (
            start < covered
            or len(token) > BASE64_MAX_LENGTH
            or _DIGEST_START.match(token)
            or _DIGEST_LABEL.search(text, max(0, start - 8), start)
        ):
            continue
        block = None if start < failed else _wrapped_block(text, token, start + len(token))
        if block is not None:
            decoded = decode_base64(block[1])
            if decoded is not None:
                yield start, block[0], decoded
                covered = block[0]
                continue
            failed = block[0]
        decoded = decode_base64(token)
        if decoded is not None:
            yield start, start + len(token), decoded
