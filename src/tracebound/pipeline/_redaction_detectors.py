"""The detectors behind :mod:`tracebound.pipeline.redaction`: where each span comes from.

Every detector answers one question, "which character spans of this text are secret?",
so the redactor can merge overlaps and replace spans without re-searching for values.
detect-secrets' plugins answer a different question (they yield secret *values*), so we
reuse them at the level where they are exact: their compiled ``denylist`` patterns (the
documented extension point of ``RegexBasedDetector``), their ``is_formally_valid`` JWT
check, their Shannon-entropy functions and limits, and their heuristic filters. What the
library has no plugin for (PII, Anthropic and current OpenAI keys, GCP API keys,
fine-grained GitHub tokens, Bearer headers) is written here. ADR 0005 has the table.

Nothing here performs I/O: we never call ``analyze_line``, which may ask the network to
verify a secret.
"""

from __future__ import annotations

import functools
import math
import re
import string
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, cast

from detect_secrets.filters.heuristic import (
    is_potential_uuid,
    is_prefixed_with_dollar_sign,
    is_sequential_string,
    is_templated_secret,
)
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import (
    Base64HighEntropyString,
    HexHighEntropyString,
)
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.stripe import StripeDetector

from tracebound.pipeline._redaction_decoding import (
    decode_base64,
    past_escape,
    unwrap_base64,
    wrapped_base64,
)

Span = tuple[int, int]
Source = Literal["detect-secrets", "tracebound"]

# A marker the redactor wrote earlier. Detectors never see inside one (idempotence).
MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9]+(?:-[a-z0-9]+)*:hmac-sha256:[0-9a-f]{16}\]")

_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "_-")

# The characters other than an ASCII letter's two cases that ``re.IGNORECASE`` matches to
# that letter in a str pattern: dotted capital I and dotless i (i), long s (s), Kelvin sign
# (k). ``str.lower()`` turns only the Kelvin sign into its letter (and dotted I into two
# characters), so a gate that lowered the text skipped ``Author\u0131zation: Basic …`` while the
# (?i) rule behind it matched. A test derives this table from ``re`` over every code point.
CASE_TWINS: dict[str, str] = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}
_FOLD_TABLE = str.maketrans(
    {**{c: c.lower() for c in string.ascii_uppercase}, **CASE_TWINS}  # one-to-one: same length
)
_NOT_LOWERED = re.compile("[\u0130\u0131\u017f]")  # twins that lower() leaves non-ASCII


def fold_case(text: str) -> str:
    """``text`` as ``re.IGNORECASE`` sees it against ASCII: same length, compared exactly.

    Every character that ``re.IGNORECASE`` matches to an ASCII letter becomes that letter in
    lower case; every other character stays non-ASCII or is itself. So an ASCII, lower-case
    literal or pattern (no ``(?i)``) matches the folded text exactly where the same one with
    ``(?i)`` matches ``text``, at the same positions. ``str.lower()`` is that for all but
    three characters, and is the C-speed path; ``translate`` (slow) only runs on text that
    holds one of them.
    """
    lowered = text.lower()
    if text.isascii():  # O(1) in CPython: the common case costs one lower()
        return lowered
    if len(lowered) == len(text) and _NOT_LOWERED.search(lowered) is None:
        return lowered  # lower() changed no length and left no twin unfolded
    return text.translate(_FOLD_TABLE)


@dataclass(frozen=True, slots=True)
class Hint:
    """What every text a rule can find anything in contains.

    That is one of ``literals`` (searched as ``re.IGNORECASE`` would when ``ignore_case``:
    in :func:`fold_case` of the text, so they are ASCII and lower case) or a match of
    ``pattern``. It is a necessary condition, never a sufficient one: the prefilter
    (:func:`may_match`) skips a text only when it holds no rule's hint, so a hint that is
    too wide costs time and one that is too narrow would leak a secret. Each hint below
    says why every match of its rule contains it, and a test checks that on generated text.
    """

    literals: tuple[str, ...] = ()
    ignore_case: bool = False
    pattern: str | None = None


@dataclass(frozen=True, slots=True)
class Detector:
    """One named detection rule.

    ``priority`` breaks ties between equally long overlapping spans: lower is more
    specific, so ``password=ghp_…`` is attributed to the GitHub rule, not the keyword rule.
    ``hint`` is what a text must contain for ``find`` to yield anything; ``None`` means
    unknown, and the prefilter then lets every text through.
    """

    name: str
    reason: str
    source: Source
    priority: int
    find: Callable[[str], Iterator[Span]]
    hint: Hint | None = None


# --- helpers ---------------------------------------------------------------------------


def _library_patterns(plugin: type[object]) -> tuple[re.Pattern[str], ...]:
    # ``denylist`` is declared as an abstract property on the base class but every
    # regex plugin sets it as a class attribute holding compiled patterns.
    return tuple(cast("tuple[re.Pattern[str], ...]", tuple(plugin.denylist)))  # type: ignore[attr-defined]


def _pattern_spans(pattern: re.Pattern[str], text: str) -> Iterator[Span]:
    """Spans equivalent to what ``RegexBasedDetector.analyze_string`` yields as values.

    The library uses ``findall``: with capture groups it yields every non-empty group,
    otherwise the whole match. We mirror that with ``finditer`` to keep positions.
    """
    for match in pattern.finditer(text):
        if pattern.groups == 0:
            if match.end() > match.start():
                yield match.span()
            continue
        for index in range(1, pattern.groups + 1):
            start, end = match.span(index)
            if start >= 0 and end > start:
                yield start, end


def _extend_token(text: str, span: Span) -> Span:
    """Grow a prefix-anchored token match to the end of the token.

    Several library patterns pin a length (Stripe ``{24}``, GitHub ``{36}``) shorter than
    tokens issued today; redacting only the prefix would leak the tail.
    """
    start, end = span
    while end < len(text) and text[end] in _TOKEN_CHARS:
        end += 1
    return start, end


def _library_rule(
    pattern: re.Pattern[str],
    *,
    extend: bool = False,
    valid: Callable[[str], bool] | None = None,
    skip_prefix: str = "",
) -> Callable[[str], Iterator[Span]]:
    def find(text: str) -> Iterator[Span]:
        for start, end in _pattern_spans(pattern, text):
            if valid is not None and not valid(text[start:end]):
                continue
            begin = start + len(skip_prefix) if text.startswith(skip_prefix, start) else start
            yield _extend_token(text, (begin, end)) if extend else (begin, end)

    return find


def _regex_rule(
    pattern: re.Pattern[str],
    *,
    group: int | str = 0,
    valid: Callable[[re.Match[str]], bool] | None = None,
) -> Callable[[str], Iterator[Span]]:
    def find(text: str) -> Iterator[Span]:
        for match in pattern.finditer(text):
            if valid is not None and not valid(match):
                continue
            start, end = match.span(group)
            if end > start:
                yield start, end

    return find


# --- private keys (library trigger, hand-written block extent) -------------------------

_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PUTTY_END = re.compile(r"Private-MAC:[ \t]*[0-9A-Fa-f]+")
# Body of a key whose END line is missing (a truncated log): base64 lines, possibly with
# JSON-escaped newlines.
_KEY_BODY = re.compile(r"(?:[A-Za-z0-9+/=:\- \t\r\n]|\\n|\\r)*")
_KEY_WINDOW = 16_384  # longest key block we look across; bounds work on hostile input


def _private_key_blocks(text: str) -> Iterator[Span]:
    """The whole key block, from ``-----BEGIN`` to ``-----END … -----``.

    The library's PrivateKeyDetector only says a header is present; the secret is the
    body, which spans lines, so we take the block around each header it finds.
    """
    for pattern in _library_patterns(PrivateKeyDetector):
        for match in pattern.finditer(text):
            start = match.start()
            dashes = text.rfind("-----", max(0, start - 5), start)
            if dashes != -1:
                start = dashes
            is_putty = match.group(0).startswith("PuTTY")
            closing = _PUTTY_END if is_putty else _PEM_END
            end_match = closing.search(text, match.end(), match.end() + _KEY_WINDOW)
            if end_match is not None:
                yield start, end_match.end()
                continue
            tail = text[match.end() : match.end() + _KEY_WINDOW]
            body = _KEY_BODY.match(tail.removeprefix("-----"))
            consumed = (5 if tail.startswith("-----") else 0) + (body.end() if body else 0)
            yield start, match.end() + len(tail[:consumed].rstrip())


# --- JWT (library pattern + validity, hand-written signature extent) -------------------

_JWT_SIG_TAIL = re.compile(r"[A-Za-z0-9_\-]*")


def _jwts(text: str) -> Iterator[Span]:
    """JWTs including their signature.

    The library's pattern ends in a lazy ``*?``, so ``finditer`` stops after
    ``header.payload.``; we keep its match and validity check and add the signature.
    """
    (pattern,) = _library_patterns(JwtTokenDetector)
    for match in pattern.finditer(text):
        if not JwtTokenDetector.is_formally_valid(match.group(0)):
            continue
        end = match.end()
        if text[end - 1] == ".":
            tail = _JWT_SIG_TAIL.match(text, end)
            end = tail.end() if tail else end
        yield match.start(), end


# --- high entropy (library entropy + limits, hand-written tokenisation) ----------------

_B64 = Base64HighEntropyString()
_HEX = HexHighEntropyString()
_B64_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{20,}={0,2}")
_HEX_TOKEN = re.compile(r"(?<![A-Za-z0-9_])[0-9a-fA-F]{20,}(?![A-Za-z0-9_])")
# In a JSON string a token may follow an escape (:func:`past_escape`): the token is what
# follows the escape's letters (a marker that took them would leave a bad escape). A hex
# run after ``\n``, ``\r``, ``\t`` or ``\u00e9`` seems to start mid-word, so the hex rule
# looks for it separately; only text with a backslash pays for this.
_HEX_AFTER_ESCAPE = re.compile(r"\\(?:[nrt]|u[0-9A-Fa-f]{4})([0-9a-fA-F]{20,})(?![A-Za-z0-9_])")


# Content addresses: a digest with its algorithm in front (``sha256:…``, SRI ``sha384-…``).
_DIGEST_PREFIX = re.compile(r"(?i)(?:sha1|sha224|sha256|sha384|sha512|blake2b|blake3|md5)[:\-=]$")
_DIGEST_TOKEN = re.compile(r"(?i)^(?:sha1|sha224|sha256|sha384|sha512|blake2b|blake3|md5)-")
# Lengths of common digests in hex: MD5, SHA-1 / git, SHA-224, SHA-256 / BLAKE3, SHA-384,
# SHA-512. A bare lower- or upper-case hex string of one of these lengths is treated as a
# content address or commit id, not a secret. See ADR 0005.
DIGEST_HEX_LENGTHS = frozenset({32, 40, 56, 64, 96, 128})


def _entropy_may_exceed(token: str, limit: float) -> bool:
    """False only when ``token``'s Shannon entropy cannot exceed ``limit``.

    A string of ``d`` distinct characters has at most ``log2(d)`` bits per character
    (equality when they are equally frequent), and the library's sum, over a subset of
    those characters and minus a penalty for hex numbers, is at most that. Its rounding
    error is below 1e-13, far inside the 1e-9 kept here, so this only skips the library's
    per-character loop where its answer is certainly no: most paths and words.
    """
    return math.log2(len(set(token))) >= limit - 1e-9


def _after_digest_prefix(text: str, start: int) -> bool:
    return _DIGEST_PREFIX.search(text, max(0, start - 8), start) is not None


def _base64_entropy(text: str) -> Iterator[Span]:
    """Random-looking base64 runs, whether quoted or not.

    The library's plugin only looks inside quotes unless switched (by mutating the
    plugin) to eager mode; prompts and logs rarely quote secrets, so we tokenise here
    and keep the library's entropy function and its 4.5 bit limit. A run must mix upper
    case, lower case and digits: paths, identifiers and UUIDs do not, random keys do.
    """
    for match in _B64_TOKEN.finditer(text):
        start, end = match.span()
        start = past_escape(text, start)
        if end - start < 20:
            continue
        token = text[start:end]
        if not (
            any(c.isupper() for c in token)
            and any(c.islower() for c in token)
            and any(c.isdigit() for c in token)
        ):
            continue
        if not _entropy_may_exceed(token, _B64.entropy_limit):
            continue  # first: the cheapest test that turns most non-secrets away
        if _DIGEST_TOKEN.match(token) or _after_digest_prefix(text, start):
            continue
        if is_sequential_string(token) or is_potential_uuid(token):
            continue
        if _B64.calculate_shannon_entropy(token) > _B64.entropy_limit:
            yield start, end


def _hex_tokens(text: str) -> Iterator[re.Match[str]]:
    yield from _HEX_TOKEN.finditer(text)
    if "\\" in text:
        yield from _HEX_AFTER_ESCAPE.finditer(text)


def _hex_entropy(text: str) -> Iterator[Span]:
    """Random-looking hex runs that are not digests (library entropy, 3.0 bit limit)."""
    for match in _hex_tokens(text):
        start, end = match.span(match.lastindex or 0)
        start = past_escape(text, start)  # ``\b``, ``\f``: letters that are hex digits
        if end - start < 20:
            continue
        token = text[start:end]
        if not any(c.isdigit() for c in token) or token.isdigit():
            continue  # words made of a-f, or plain numbers (PII rules handle numbers)
        single_case = token == token.lower() or token == token.upper()
        if single_case and len(token) in DIGEST_HEX_LENGTHS:
            continue
        if _after_digest_prefix(text, start):
            continue
        if not _entropy_may_exceed(token, _HEX.entropy_limit):
            continue
        if _HEX.calculate_shannon_entropy(token) > _HEX.entropy_limit:
            yield start, end


# --- keyword-assigned secrets (hand-written, library filters) --------------------------

_KEYWORD = (
    r"(?:password|passwd|passphrase|pwd|secret|token|api[_\-]?key|apikey"
    r"|access[_\-]?key|secret[_\-]?key|private[_\-]?key|client[_\-]?key|auth[_\-]?key"
    r"|account[_\-]?key|service[_\-]?key|master[_\-]?key|signing[_\-]?key"
    r"|encryption[_\-]?key)"
)
# The key must END with a keyword: ``db_password`` and ``github_token`` match,
# ``max_tokens`` and ``token_count`` do not.
KEY_NAME_RE = re.compile(rf"(?i)^[A-Za-z0-9_.\-]*{_KEYWORD}$")
_PASSWORDISH = re.compile(r"(?i)(?:password|passwd|passphrase|pwd|secret)$")
# Found by the keyword, then widened back over the whole key name: anchoring on the keyword
# is ~10x faster than a pattern that tries a lazy key prefix at every position.
_KEYWORD_THEN_OPERATOR = re.compile(
    rf"""(?ix)
    (?P<kw>{_KEYWORD})
    ["'\]]{{0,2}}[ \t]*
    (?P<op>:=|=>|==|=|:)
    [ \t]*
    """
)
_KEYWORD_THEN_OPERATOR_LOWER = re.compile(
    _KEYWORD_THEN_OPERATOR.pattern.replace("(?ix)", "(?x)", 1)
)
_VALUE = re.compile(
    r"""(?x)
    "(?P<dq>(?:[^"\\\n]|\\.){1,512})"
  | '(?P<sq>[^'\n]{1,512})'
  | (?P<bare>[^\s"'`]{1,512})
    """
)
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_LITERALS = frozenset({"true", "false", "null", "none", "nil", "undefined", "yes", "no"})
_CODE_LIKE = re.compile(r"[\[\(]")
# Documentation placeholders: ``sk-...``, ``xxxx``, ``****``, ``your-api-key-here``.
_PLACEHOLDER = re.compile(r"(?i)(?:\.\.\.|…)$|x{4,}|\*{3,}|^your[_\-]|[_\-]here$")


def plausible_secret_value(value: str, key: str, *, quoted: bool, op: str) -> bool:
    """Whether a value assigned to a secret-sounding key is itself a credential.

    Rejects what config files and code put there instead of secrets: placeholders
    (``<…>``, ``${…}``, ``$VAR``), literals (``null``), masks (``****``), type annotations
    and calls (``password: Optional[str]``, ``getenv(…)``), and counters (``token: 3``).
    An unquoted ``key: value`` is also how prose reads ("Secret: use a vault"), so there
    the value must contain a digit or symbol, or be a long mixed-case word.
    """
    value = value.strip()
    if _not_a_credential(value, key):
        return False
    if quoted:
        return True
    if _CODE_LIKE.search(value):
        return False
    if op == ":" and value.isalpha():
        has_upper = any(c.isupper() for c in value)
        has_lower = any(c.islower() for c in value)
        capitalised_word = value[0].isupper() and value[1:].islower()
        return has_upper and has_lower and len(value) >= 8 and not capitalised_word
    return True


def _not_a_credential(value: str, key: str) -> bool:
    # What stands in a secret's place in configs and docs, quoted or not.
    return (
        len(value) < 3
        or value.lower() in _LITERALS
        or len(set(value)) == 1
        or is_templated_secret(value)
        or is_prefixed_with_dollar_sign(value)
        or value.startswith(("%(", "{{"))
        or MARKER_RE.fullmatch(value) is not None
        or _PLACEHOLDER.search(value) is not None
        or (value.isdigit() and not _PASSWORDISH.search(key))
    )


_AUTH_HEADER_KEYS = frozenset({"authorization", "proxy-authorization"})
_AUTH_SCHEME = re.compile(r"^\s*[A-Za-z][A-Za-z0-9_\-]*\s+(?=\S)")


def key_kind(key: str) -> Literal["auth", "basic", "secret"] | None:
    """What a key name says its value is: an HTTP Authorization credential, a secret,
    perhaps a base64 ``user:password`` (a key ending in ``auth``, as Docker's and npm's
    ``auth``/``_auth``: see :func:`basic_credential`), or nothing in particular."""
    # Folded as KEY_NAME_RE's (?i) reads it: with U+0131 for i, Authorization is one too.
    folded = fold_case(key)
    if folded in _AUTH_HEADER_KEYS:
        return "auth"
    if KEY_NAME_RE.match(key):
        return "secret"
    return "basic" if folded.endswith("auth") else None


# ``user:password`` as HTTP Basic (and Docker, npm) write it before base64: a user name
# without spaces or colons, then a password that does not start with a space. So
# ``Note: rotate weekly`` (a colon, then prose) is not one.
_USER_PASSWORD = re.compile(r"[^\s:]{1,256}:\S")
_BASE64_VALUE = re.compile(r"[A-Za-z0-9+/]{4,}={0,2}")
_BASIC_SCHEME = re.compile(r"(?i:basic)[ \t]+")  # ``"auth": "Basic dXNlcjpw…"``


def user_password(decoded: str | None) -> bool:
    """Whether decoded base64 is one ``user:password`` (see :data:`_USER_PASSWORD`).

    Under any key ending in ``auth``, ``oauth`` included: base64 of an OAuth scope list
    (``read:user``) reads as ``user:password`` and is redacted too. Failing closed costs a
    scope list's readability; an exception for lower-case ``word:word`` would let
    ``admin:supersecretpassword`` through (review, session 12)."""
    return decoded is not None and _USER_PASSWORD.match(decoded) is not None


def basic_credential(value: str) -> Span | None:
    """The span of ``value`` that is base64 of ``user:password``, if it is one (the
    whole value less surrounding whitespace and a ``Basic`` scheme, on one line or wrapped
    in lines as ``base64`` and MIME write it); None otherwise."""
    start = len(value) - len(value.lstrip())
    token = value.strip()
    scheme = _BASIC_SCHEME.match(token)
    if scheme is not None:
        start += scheme.end()
        token = token[scheme.end() :]
    joined = token if _BASE64_VALUE.fullmatch(token) else unwrap_base64(token)
    if joined is None or _BASE64_VALUE.fullmatch(joined) is None:
        return None
    if not user_password(decode_base64(joined)):
        return None
    return start, start + len(token)


def auth_credential(value: str) -> Span | None:
    """The credential in an Authorization value: what follows the scheme (``Basic``,
    ``Bearer``, …), or all of it when there is none. None for an empty, too short or
    already redacted credential."""
    scheme = _AUTH_SCHEME.match(value)
    start = scheme.end() if scheme else 0
    credential = value[start:].strip()
    if len(credential) >= 3 and not MARKER_RE.fullmatch(credential):
        return start, len(value)
    return None


def _cut_bare(value: str, op: str) -> str:
    # Where an unquoted value ends: a query string's ``&``; a YAML/JSON flow's ``,;})]``.
    stops = "&" if op != ":" else ",;})]&"
    for index, char in enumerate(value):
        if char in stops:
            return value[:index]
    return value.rstrip(",;")


def _keyword_assignments(text: str) -> Iterator[Span]:
    """``password=…``, ``"api_key": "…"``, ``token: …``: the value, never the key."""
    # Case-insensitive alternation is ~10x slower in ``re`` than matching the folded text,
    # which finds exactly what the (?i) pattern finds in ``text``, at the same positions.
    for match in _KEYWORD_THEN_OPERATOR_LOWER.finditer(fold_case(text)):
        key_start = match.start()
        while key_start > 0 and text[key_start - 1] in _KEY_CHARS:
            key_start -= 1
        key = text[key_start : match.end("kw")]
        value = _VALUE.match(text, match.end())
        if value is None:
            continue
        op = match.group("op")
        for name in ("dq", "sq", "bare"):
            start, end = value.span(name)
            if start < 0:
                continue
            found = text[start:end]
            if name == "bare":
                found = _cut_bare(found, op)
                end = start + len(found)
            if plausible_secret_value(found, key, quoted=name != "bare", op=op):
                yield start, end


# --- base64 user:password under an auth key (hand-written) ---------------------------

# ``"auth": "<base64>"`` (Docker's config.json, Podman's auth.json), ``_auth=<base64>``
# (.npmrc), ``registry_auth: <base64>``: a key ending in ``auth`` (not ``author``), an
# assignment, and a base64 value, which must decode to ``user:password``.
_AUTH_BASE64 = re.compile(
    r"""(?i:auth)["']?[ \t]*[:=][ \t]*["']?(?:(?i:basic)[ \t]+)?"""
    r"""(?P<v>[A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])"""
)
# Every match holds this (the hint): the key's end and the operator.
AUTH_BASE64_HINT = r"""(?i:auth)["']?[ \t]*[:=]"""


def _auth_base64_credentials(text: str) -> Iterator[Span]:
    for match in _AUTH_BASE64.finditer(text):
        start, end = match.span("v")
        # Wrapped in lines, the credential goes on after the first (whose decoded text may
        # not even hold the colon yet): the block is taken whole.
        block = wrapped_base64(text, start, end)
        if block is not None and user_password(decode_base64(block[1])):
            yield start, block[0]
        elif basic_credential(text[start:end]) is not None:
            yield start, end


# --- name/value pairs (hand-written) ---------------------------------------------------

# ``{"name": "DB_PASSWORD", "value": "…"}`` (Kubernetes ``env``, HAR headers, ECS),
# ``{"Key": "ApiToken", "Value": "…"}`` (tags), ``{"ParameterKey": "DbPassword",
# "ParameterValue": "…"}`` (CloudFormation, also ``ParameterKey=…,ParameterValue=…`` on
# the CLI), and YAML flow ``{name: X, value: …}``: the value belongs to the key its
# sibling names (group ``name``).
# - The fields are matched in the three spellings formats use (``value``, ``Value``,
#   ``VALUE``, and ``ParameterValue``), so the gate is a plain substring test: ``alue``
#   or ``ALUE``.
# - The pattern starts with the field, not an optional quote: ``re`` scans a pattern that
#   starts with an optional group three times slower. _pair_field_ok checks the quote
#   (or, unquoted, a word boundary) before the field.
_PAIR_NAME_FIELDS = frozenset({"name", "Name", "NAME", "key", "Key", "KEY", "ParameterKey"})
_PAIR_VALUE_FIELDS = frozenset({"value", "Value", "VALUE", "ParameterValue"})
_PAIR_NAME = r"""
    (?P<kw>name|Name|NAME|key|Key|KEY|ParameterKey)(?P<nq>["']?)[ \t]*{op}[ \t]*
    (?P<q>["']?)(?P<name>[A-Za-z0-9_.\-]{{1,128}})(?P=q)
"""
# In a flow mapping (JSON, Python, YAML flow, the CLI's shorthand) a pair's two fields come
# in either order, and others may stand between them (CloudFormation's
# ``"UsePreviousValue": false``, ``"ResolvedValue"``). So each name or value field starts a
# walk over the fields that follow it in the same mapping (_pair_walk), up to the other
# field of its pair. One flat alternation of the field names: ``re`` then tests a set of
# first letters at each position; two alternations in groups (names | values) scan six
# times slower.
_PAIR_FIELDS = r"name|Name|NAME|key|Key|KEY|ParameterKey|value|Value|VALUE|ParameterValue"
_PAIR_FIELD = re.compile(rf"""(?P<field>{_PAIR_FIELDS})(?P<nq>["']?)[ \t]*[:=][ \t]*""")
# A field's name, after a flow mapping's separator (the field is a whole word: the
# separator and an optional quote stand before it).
_PAIR_NEXT_FIELD = re.compile(
    r"""(?x) \s*[,;]\s* (?P<fq>["']?)(?P<field>[A-Za-z_][A-Za-z0-9_\-]{0,63})(?P=fq)
    [ \t]*[:=][ \t]*"""
)
_PAIR_NAME_VALUE = re.compile(r"""(?P<q>["']?)(?P<name>[A-Za-z0-9_.\-]{1,128})(?P=q)""")
# Fields that may stand between a pair's two: CloudFormation's parameter has four
# (``ParameterKey``, ``ParameterValue``, ``UsePreviousValue``, ``ResolvedValue``). A
# bound keeps the walk short, and a name three fields away from a value in a larger
# mapping is not its pair's.
_PAIR_GAP = 2
# The YAML block form: ``value:`` on the next line, at the column where ``name:`` stands
# (after a list item's ``- ``); checked in code, as a back-reference cannot count columns.
_PAIR_BLOCK = re.compile(
    r"(?xm) ^(?P<lead>[ \t]*(?:-[ \t]+)?)[\"']?"
    + _PAIR_NAME.format(op=":")
    + r"""
    [ \t]*(?:\#[^\r\n]*)?\r?\n
    (?P<indent>[ \t]*)(?P<vq>["']?)(?:value|Value|VALUE|ParameterValue)(?P=vq)[ \t]*:[ \t]*
    """
)


def _pair_field_ok(text: str, start: int, quote: str) -> bool:
    """The field at ``start`` (closed by ``quote``, if any) is ``"name"`` or ``name`` as a
    whole word, not ``"name`` or ``hostname`` (nor, for ``value``, ``UsePreviousValue``)."""
    # At the text's start nothing stands before the field: a space, not "" (which is
    # ``in`` every string and so read as a quote: a pair opening the text was missed).
    before = text[start - 1] if start else " "
    if quote:
        return before == quote
    return not (before.isalnum() or before in "_\"'")


def _block_value(text: str, start: int) -> Span:
    """A YAML block value: the rest of the line, less a comment and its quotes."""
    end = text.find("\n", start)
    line = text[start : len(text) if end == -1 else end]
    comment = line.find(" #")
    line = (line if comment == -1 else line[:comment]).rstrip()
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'":
        return start + 1, start + len(line) - 1
    return start, start + len(line)


def _flow_value(text: str, start: int) -> tuple[Span, int] | None:
    """A flow value at ``start`` (without its quotes) and where its field ends (after
    them); None for none, or a nested mapping or list (``{``, ``[``), which ends a walk."""
    if text.startswith(("{", "["), start):
        return None
    value = _VALUE.match(text, start)
    if value is None:
        return None
    for name in ("dq", "sq"):
        if value.start(name) >= 0:
            return value.span(name), value.end()
    end = start + len(_cut_bare(value.group("bare"), ":"))
    return (start, end), end


def _flow_name(text: str, start: int) -> tuple[str, int] | None:
    """The key a name field names (``"DbPassword"``), and where the field ends."""
    name = _PAIR_NAME_VALUE.match(text, start)
    if name is None or _PAIR_NEXT_END.match(text, name.end()) is None:
        return None
    return name["name"], name.end()


# A name stands alone in its field: the separator, the mapping's end or the text's follows.
_PAIR_NEXT_END = re.compile(r"\s*(?:[,;}\])]|$)")


def _pair_walk(text: str, kind: str) -> Iterator[tuple[str, Span]]:
    """``(name, value span)`` for each name/value pair of a flow mapping whose name is a key
    of ``kind``, the two fields in either order, with up to _PAIR_GAP others between.

    Linear: a walk starts at a name field, or at a value field that no walk from a name
    before it reached (a value first), and reads at most _PAIR_GAP + 1 fields after it
    (each of bounded length, _VALUE): a character is read by at most _PAIR_GAP + 2 walks.
    """
    reached = -1  # the value a walk from its name reached: not walked from again
    for match in _PAIR_FIELD.finditer(text):
        if not _pair_field_ok(text, match.start(), match["nq"]):
            continue
        if match["field"] in _PAIR_NAME_FIELDS:
            name = _flow_name(text, match.end())
            if name is None:
                continue
            at = _pair_partner(text, name[1], _PAIR_VALUE_FIELDS)
            if at is None:
                continue
            reached = at
            value = _flow_value(text, at) if _pair_kind(name[0]) == kind else None
        elif match.end() != reached:
            value = _flow_value(text, match.end())
            if value is None:
                continue
            at = _pair_partner(text, value[1], _PAIR_NAME_FIELDS)
            name = None if at is None else _flow_name(text, at)
            if name is None or _pair_kind(name[0]) != kind:
                continue
        else:
            continue
        if value is not None:
            yield name[0], value[0]


# Pair names are a document's schema (``DbPassword``, ``Authorization``): few, and the
# same in every step. _PAIR_NAME_VALUE bounds them at 128 characters.
_pair_kind = functools.lru_cache(maxsize=1024)(key_kind)


def _pair_partner(text: str, end: int, wanted: frozenset[str]) -> int | None:
    """Where the value of the first ``wanted`` field after ``end`` (a field's end) starts,
    if it is one of the next _PAIR_GAP + 1 fields of the same mapping. A nested ``{``/``[``,
    a second field of the starting kind (another pair's) or anything but ``, field:``
    ends the walk."""
    for _ in range(_PAIR_GAP + 1):
        field = _PAIR_NEXT_FIELD.match(text, end)
        if field is None:
            return None
        if field["field"] in wanted:
            return field.end()
        if field["field"] in _PAIR_NAME_FIELDS or field["field"] in _PAIR_VALUE_FIELDS:
            return None
        skipped = _flow_value(text, field.end())
        if skipped is None:
            return None
        end = skipped[1]
    return None


# The AWS Query protocol (and any form body built the same way) writes a list of pairs as
# ``Parameters.member.1.ParameterKey=DbPassword&Parameters.member.1.ParameterValue=…``
# (``Tags.member.1.Key=…&Tags.member.1.Value=…``): a field's path names its pair. The
# value runs to the next ``&`` or whitespace. Found by the field name (a literal scan),
# then widened back over the path, as the keyword rule does: a pattern that opens with
# the path tries it at every word and is five times slower.
_QUERY_FIELD = re.compile(rf"(?P<field>{_PAIR_FIELDS})=(?P<v>[^&\s]*)")
# The path: dotted words, each followed by one ``.``, at the start of the text, a line or
# a query parameter (whitespace, ``&``, ``?``, ``;``, ``=`` or a quote before it). A path
# splits one way only, so the match is linear. ``Filter.1.Value.1=`` (EC2's filter lists)
# has no pair field before its ``=``.
_QUERY_PATH = re.compile(r"(?:[A-Za-z0-9_\-]{1,64}\.){1,16}")
_QUERY_PATH_CHARS = frozenset(string.ascii_letters + string.digits + "_-.")
_QUERY_PATH_MAX = 16 * 65
_QUERY_BOUNDARY = " \t\r\n&?;=\"'"
_QUERY_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


def _query_path(text: str, field: int) -> str | None:
    """The path before the field at ``field``, or None when there is no whole one.

    The walk back stops at the first character a path cannot hold; that character ends
    the previous field's value (``&``, whitespace), so the walks back of successive
    fields cover disjoint text, and each is bounded."""
    if field == 0 or text[field - 1] != ".":
        return None  # most hits (``key=``, ``token_value=``): one comparison
    start = field
    floor = max(0, field - _QUERY_PATH_MAX - 1)
    while start > floor and text[start - 1] in _QUERY_PATH_CHARS:
        start -= 1
    if start > 0 and text[start - 1] not in _QUERY_BOUNDARY:
        return None
    path = _QUERY_PATH.fullmatch(text, start, field)
    return None if path is None else path.group()


def _query_pairs(text: str) -> Iterator[tuple[str, Span]]:
    """``(name, value span)`` for each AWS Query pair, the two fields in either order and
    anywhere in one line (one request): paired by their path, not their position.

    Linear: one scan, then a lookup per value. Lines are counted as the scan goes (a count
    of the line breaks between consecutive fields), never searched back from a field."""
    names: dict[tuple[int, str], str] = {}
    values: list[tuple[int, str, Span]] = []
    line, last = 0, 0
    for match in _QUERY_FIELD.finditer(text):
        path = _query_path(text, match.start())
        if path is None:
            continue
        line += text.count("\n", last, match.start())
        last = match.start()
        if match["field"] in _PAIR_VALUE_FIELDS:
            values.append((line, path, match.span("v")))
        elif _QUERY_NAME.fullmatch(match["v"]) and _pair_kind(match["v"]) is not None:
            names.setdefault((line, path), match["v"])  # a secret name wins: fail closed
    for line, path, span in values:
        name = names.get((line, path))
        if name is not None:
            yield name, span


def _name_value_pairs(kind: Literal["auth", "secret"]) -> Callable[[str], Iterator[Span]]:
    """The value of each name/value pair whose name is a key of ``kind``.

    The sibling name settles what the value is, so any value counts that would count
    under that key in a structure (placeholders, literals and masks do not).
    """

    def pairs(text: str) -> Iterator[tuple[str, Span, bool]]:
        """``(name, value span, from a query string)``."""
        for name, span in _pair_walk(text, kind):
            yield name, span, False
        for match in _PAIR_BLOCK.finditer(text):
            if len(match["indent"]) != len(match["lead"]):
                continue
            if _pair_field_ok(text, match.start("kw"), match["nq"]):
                yield match["name"], _block_value(text, match.end()), False
        if "=" in text:
            for name, span in _query_pairs(text):
                yield name, span, True

    def find(text: str) -> Iterator[Span]:
        for name, span, from_query in pairs(text):
            if span[1] <= span[0] or _pair_kind(name) != kind:
                continue
            value = text[span[0] : span[1]]
            if kind == "auth":
                credential = auth_credential(value)
                if credential is not None:
                    yield span[0] + credential[0], span[0] + credential[1]
            # Only a query string's value is percent-encoded: in JSON, YAML or Python text
            # `%24Xy9...` is the secret as written, not a `$` placeholder.
            elif plausible_secret_value(
                _query_unescaped(value) if from_query else value, name, quoted=True, op="="
            ):
                yield span

    return find


def _query_unescaped(value: str) -> str:
    # In a query string ``%24%7BDB%7D`` is ``${DB}``, a placeholder: judged as decoded (the
    # redaction still covers the value as written).
    return urllib.parse.unquote_plus(value) if "%" in value else value


# --- hand-written token rules ----------------------------------------------------------

_NOT_MID_WORD = r"(?<![A-Za-z0-9_\-])"
_NOT_WORD_NEXT = r"(?![A-Za-z0-9_\-])"

_ANTHROPIC = re.compile(rf"{_NOT_MID_WORD}sk-ant-[a-z]{{2,10}}\d{{0,3}}-[A-Za-z0-9_\-]{{20,}}")
_OPENAI = re.compile(
    rf"{_NOT_MID_WORD}sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{{20,}}|[A-Za-z0-9]{{40,}})"
    rf"{_NOT_WORD_NEXT}"
)
_GITHUB_PAT = re.compile(rf"{_NOT_MID_WORD}github_pat_[A-Za-z0-9_]{{22,255}}{_NOT_WORD_NEXT}")
_GCP_API_KEY = re.compile(rf"{_NOT_MID_WORD}AIza[0-9A-Za-z_\-]{{35}}{_NOT_WORD_NEXT}")
_AWS_SECRET_ASSIGNED = re.compile(
    r"(?i)aws_?secret_?(?:access_?)?key[\"']?[ \t]*(?:=|:|=>)[ \t]*[\"']?"
    r"(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
)
# ``scheme://user:pass@host`` where the library's pattern sees none: an empty user name
# (``redis://:pass@host``), which it requires, or a user name or password holding one of
# RFC 3986's sub-delims (``pass+word``, ``s3cr3t!$*``), which it excludes. Quotes, ``<>``,
# a backslash and a backtick are not URL characters and end the userinfo.
_URL_USERINFO_CHARS = r"[^:/?#\[\]@\s\"'<>\\`]"
_URL_PASSWORD = re.compile(rf"://{_URL_USERINFO_CHARS}*:(?P<v>{_URL_USERINFO_CHARS}+)@")
_BEARER = re.compile(r"(?i)\bbearer[ \t]+(?P<v>[A-Za-z0-9\-._~+/]{12,}=*)")
_BASIC_HEADER = re.compile(
    r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?basic[ \t]+"
    r"(?P<v>[A-Za-z0-9+/]{8,}={0,2})"
)


def _basic_headers(text: str) -> Iterator[Span]:
    """The credential after ``Authorization: Basic``, with the lines it goes on over when
    it is wrapped (a block that decodes as a whole; a line that merely follows does not)."""
    for match in _BASIC_HEADER.finditer(text):
        start, end = match.span("v")
        block = wrapped_base64(text, start, end)
        if block is not None and decode_base64(block[1]) is not None:
            end = block[0]
        yield start, end


def _credential_like(match: re.Match[str]) -> bool:
    # "Bearer authentication" is prose; a bearer credential has a digit or mixed case.
    value = match.group("v")
    if any(c.isdigit() for c in value):
        return True
    return len(value) >= 20 and any(c.isupper() for c in value) and any(c.islower() for c in value)


# --- PII (hand-written) ----------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+\-/])"
    r"(?P<local>[A-Za-z0-9_%+\-]+(?:\.[A-Za-z0-9_%+\-]+)*)"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}"
    r"(?![A-Za-z0-9\-]|\.[A-Za-z0-9])"
)
# A URL's authority runs from ``://`` to the first ``/``, ``?`` or ``#``: an address in
# it is userinfo (``user:p@ss@host`` once ``%40`` is decoded), one after it is an address
# (``?to=dana@example.com``).
_URL_USERINFO = re.compile(r"://[^\s/?#]*$")


def _emails(text: str) -> Iterator[Span]:
    """E-mail addresses, minus the two shapes that merely look like one.

    ``https://user:pass@host`` is a credential (the basic-auth rule takes the password)
    and ``git@github.com:org/repo`` is an SSH remote, not a person.
    """
    for match in _EMAIL.finditer(text):
        start, end = match.span()
        if _URL_USERINFO.search(text, max(0, start - 256), start):
            continue
        if match.group("local") == "git" and text[end : end + 1] == ":":
            continue
        yield start, end


_NUMBER_BEFORE = r"(?<![\w+.\-/#])"
_NUMBER_AFTER = r"(?![\w]|[.\-]\d)"
_PHONE_INTL = re.compile(
    rf"{_NUMBER_BEFORE}\+[1-9]\d{{0,3}}(?:[ .\-]?\(?\d{{2,5}}\)?){{1,5}}{_NUMBER_AFTER}"
)
_PHONE_NANP = re.compile(
    rf"{_NUMBER_BEFORE}(?:1[ .\-])?(?:\([2-9]\d{{2}}\)[ ]?|[2-9]\d{{2}}[ .\-])"
    rf"[2-9]\d{{2}}[ .\-]\d{{4}}{_NUMBER_AFTER}"
)
_PHONE_TRUNK = re.compile(rf"{_NUMBER_BEFORE}0\d{{1,4}}[ \-]\d{{3,4}}[ \-]\d{{3,4}}{_NUMBER_AFTER}")


def _digit_count_between(low: int, high: int) -> Callable[[re.Match[str]], bool]:
    def valid(match: re.Match[str]) -> bool:
        return low <= sum(c.isdigit() for c in match.group(0)) <= high

    return valid


_CARD = re.compile(rf"{_NUMBER_BEFORE}\d(?:[ \-]?\d){{12,18}}{_NUMBER_AFTER}")


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum every payment card number carries."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card_brand_fits(digits: str) -> bool:
    """Issuer prefix and length agree (Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay).

    Luhn alone passes one random digit run in ten; requiring a real issuer prefix with
    its lengths keeps ids and timestamps (which mostly start with 1) out.
    """
    length = len(digits)
    two, four = int(digits[:2]), int(digits[:4])
    three, six = int(digits[:3]), int(digits[:6])
    checks = (
        (digits[0] == "4", (13, 16, 19)),
        (51 <= two <= 55 or 2221 <= four <= 2720, (16,)),
        (two in {34, 37}, (15,)),
        (four == 6011 or two == 65 or 644 <= three <= 649 or 622126 <= six <= 622925, (16, 19)),
        (3528 <= four <= 3589, (16, 17, 18, 19)),
        (300 <= three <= 305 or two in {36, 38, 39}, (14, 15, 16, 19)),
        (two == 62, (16, 17, 18, 19)),
    )
    return any(prefix and length in lengths for prefix, lengths in checks)


def _cards(text: str) -> Iterator[Span]:
    """Card numbers of 13 to 19 digits, grouped consistently, with a valid Luhn digit and issuer."""
    for match in _CARD.finditer(text):
        raw = match.group(0)
        separators = {c for c in raw if not c.isdigit()}
        if len(separators) > 1:
            continue
        if separators:
            groups = re.split(r"[ \-]", raw)
            if any(not 3 <= len(group) <= 6 for group in groups[:-1]) or not groups[-1]:
                continue
        digits = "".join(c for c in raw if c.isdigit())
        if luhn_ok(digits) and _card_brand_fits(digits):
            yield match.span()


# --- the catalogue ---------------------------------------------------------------------

_AWS_KEY_ID, _AWS_SECRET_QUOTED = _library_patterns(AWSKeyDetector)
_SLACK_TOKEN, _SLACK_WEBHOOK = _library_patterns(SlackDetector)


def _library_all(
    plugin: type[object], *, extend: bool, skip: str = ""
) -> Callable[[str], Iterator[Span]]:
    rules = [_library_rule(p, extend=extend, skip_prefix=skip) for p in _library_patterns(plugin)]

    def find(text: str) -> Iterator[Span]:
        for rule in rules:
            yield from rule(text)

    return find


@dataclass(frozen=True, slots=True)
class _Gated:
    """``find``, run only if the text contains one of ``needles``.

    Each needle is a literal every match of the rule must contain, so the gate changes
    no result; it turns most rules into a substring test on ordinary text. The needles
    are also the rule's :class:`Hint`.
    """

    find: Callable[[str], Iterator[Span]]
    needles: tuple[str, ...]
    ignore_case: bool

    def __call__(self, text: str) -> Iterator[Span]:
        # With ignore_case, the needles are searched as the rule's (?i) pattern reads text:
        # str.lower() alone missed U+0131, U+017F and U+0130, which (?i) matches to i, s, i.
        haystack = fold_case(text) if self.ignore_case else text
        if any(needle in haystack for needle in self.needles):
            yield from self.find(text)


def _gate(
    find: Callable[[str], Iterator[Span]], *needles: str, ignore_case: bool = False
) -> _Gated:
    if ignore_case:
        # fold_case is exact against ASCII only: a non-ASCII needle would need more.
        assert all(n.isascii() for n in needles), needles
        needles = tuple(n.lower() for n in needles)
    return _Gated(find, needles, ignore_case)


def _d(
    name: str,
    reason: str,
    source: Source,
    priority: int,
    find: Callable[[str], Iterator[Span]],
    *,
    hint: Hint | None = None,
) -> Detector:
    if hint is None and isinstance(find, _Gated):
        hint = Hint(find.needles, ignore_case=find.ignore_case)
    return Detector(name, reason, source, priority, find, hint)


# Hints of the ungated rules (and two stronger than their gate), shared where one implies
# another. A run of 20 token characters, found from its start (the look-behind keeps this
# linear): the base64 rule's tokens are such runs, and a hex token's characters are a
# subset of them, so its maximal run is at least as long.
_TOKEN_RUN = Hint(pattern=r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{20}")
# Five digits, consecutive ones separated by at most one of `` .-``: a NANP number has
# ``ddd[ .-]dddd`` at its end, a trunk number ``0d[ -]ddd`` at its start, a card 13 digits
# with at most one ``[ -]`` between two. ``\d`` is at least as wide as their ``\d`` and digits.
_DIGIT_RUN = Hint(pattern=r"\d(?:[ .\-]?\d){4}")
# The keyword rule matches a keyword of _KEYWORD in the folded text (see
# _keyword_assignments), and every keyword contains one of these.
_KEYWORD_STEMS = Hint(("pass", "pwd", "secret", "token", "key"), ignore_case=True)


_LIB: Source = "detect-secrets"
_OURS: Source = "tracebound"

DETECTORS: tuple[Detector, ...] = (
    _d(
        "private-key",
        "private key block",
        _LIB,
        0,
        _gate(_private_key_blocks, "PRIVATE KEY", "PuTTY-User-Key-File"),
    ),
    _d(
        "aws-access-key",
        "AWS access key id",
        _LIB,
        10,
        _gate(_library_rule(_AWS_KEY_ID, extend=True), "A3T", "ABIA", "ACCA", "AKIA", "ASIA"),
    ),
    _d(
        "aws-secret-key",
        "AWS secret access key",
        _LIB,
        10,
        _gate(_library_rule(_AWS_SECRET_QUOTED), "aws", ignore_case=True),
    ),
    _d(
        "aws-secret-key",
        "AWS secret access key",
        _OURS,
        10,
        _gate(_regex_rule(_AWS_SECRET_ASSIGNED, group="v"), "aws", ignore_case=True),
    ),
    _d(
        "azure-storage-key",
        "Azure storage account key",
        _LIB,
        10,
        _gate(
            _library_all(AzureStorageKeyDetector, extend=False, skip="AccountKey="), "AccountKey="
        ),
    ),
    _d("gcp-api-key", "Google Cloud API key", _OURS, 10, _gate(_regex_rule(_GCP_API_KEY), "AIza")),
    _d(
        "github-token",
        "GitHub token",
        _LIB,
        10,
        _gate(
            _library_all(GitHubTokenDetector, extend=True), "ghp_", "gho_", "ghu_", "ghs_", "ghr_"
        ),
    ),
    _d(
        "github-token",
        "GitHub fine-grained token",
        _OURS,
        10,
        _gate(_regex_rule(_GITHUB_PAT), "github_pat_"),
    ),
    _d(
        "gitlab-token",
        "GitLab token",
        _LIB,
        10,
        _gate(_library_all(GitLabTokenDetector, extend=True), "gl", "GR1348941"),
    ),
    _d(
        "slack-token",
        "Slack token",
        _LIB,
        10,
        _gate(_library_rule(_SLACK_TOKEN, extend=True), "xox", ignore_case=True),
    ),
    _d(
        "slack-webhook",
        "Slack webhook URL",
        _LIB,
        10,
        _gate(_library_rule(_SLACK_WEBHOOK), "hooks.slack.com", ignore_case=True),
    ),
    _d(
        "stripe-key",
        "Stripe live key",
        _LIB,
        10,
        _gate(_library_all(StripeDetector, extend=True), "k_live_"),
    ),
    _d("anthropic-key", "Anthropic API key", _OURS, 5, _gate(_regex_rule(_ANTHROPIC), "sk-ant-")),
    _d(
        "openai-key",
        "OpenAI API key",
        _LIB,
        10,
        _gate(_library_all(OpenAIDetector, extend=True), "T3BlbkFJ"),
    ),
    _d("openai-key", "OpenAI API key", _OURS, 10, _gate(_regex_rule(_OPENAI), "sk-")),
    _d(
        "sendgrid-key",
        "SendGrid API key",
        _LIB,
        10,
        _gate(_library_all(SendGridDetector, extend=True), "SG."),
    ),
    _d(
        "pypi-token",
        "PyPI upload token",
        _LIB,
        10,
        _gate(_library_all(PypiTokenDetector, extend=True), "pypi-"),
    ),
    _d(
        "npm-token",
        "npm auth token",
        _LIB,
        10,
        _gate(_library_all(NpmDetector, extend=False), ":_authToken="),
    ),
    _d("jwt", "JSON Web Token", _LIB, 20, _gate(_jwts, "eyJ")),
    _d(
        "basic-auth",
        "password in URL",
        _LIB,
        20,
        _gate(_library_all(BasicAuthDetector, extend=False), "://"),
    ),
    _d(
        "basic-auth",
        "password in URL",
        _OURS,
        20,
        _gate(_regex_rule(_URL_PASSWORD, group="v"), "://"),
    ),
    _d(
        "bearer-token",
        "bearer credential",
        _OURS,
        30,
        _gate(_regex_rule(_BEARER, group="v", valid=_credential_like), "bearer", ignore_case=True),
    ),
    _d(
        "basic-auth-header",
        "HTTP Basic credential",
        _OURS,
        30,
        _gate(_basic_headers, "authorization", ignore_case=True),
    ),
    _d(
        "basic-auth-header",
        "HTTP Basic credential",
        _OURS,
        30,
        _gate(_auth_base64_credentials, "auth", ignore_case=True),
        hint=Hint(pattern=AUTH_BASE64_HINT),
    ),
    _d(
        "secret-keyword",
        "value assigned to a secret-named key",
        _OURS,
        40,
        _gate(_keyword_assignments, "=", ":"),
        hint=_KEYWORD_STEMS,
    ),
    _d(
        "secret-keyword",
        "value assigned to a secret-named key",
        _OURS,
        40,
        _gate(_name_value_pairs("secret"), "alue", "ALUE"),
    ),
    _d(
        "auth-header",
        "HTTP Authorization credential",
        _OURS,
        30,
        _gate(_name_value_pairs("auth"), "alue", "ALUE"),
    ),
    _d(
        "high-entropy-base64",
        "high-entropy base64 string",
        _LIB,
        50,
        _base64_entropy,
        hint=_TOKEN_RUN,
    ),
    _d("high-entropy-hex", "high-entropy hex string", _LIB, 50, _hex_entropy, hint=_TOKEN_RUN),
    _d("email", "email address", _OURS, 60, _gate(_emails, "@")),
    _d(
        "phone",
        "phone number",
        _OURS,
        60,
        _gate(_regex_rule(_PHONE_INTL, valid=_digit_count_between(8, 15)), "+"),
    ),
    _d("phone", "phone number", _OURS, 60, _regex_rule(_PHONE_NANP), hint=_DIGIT_RUN),
    _d(
        "phone",
        "phone number",
        _OURS,
        60,
        _gate(_regex_rule(_PHONE_TRUNK, valid=_digit_count_between(9, 12)), "0"),
        hint=_DIGIT_RUN,
    ),
    _d("payment-card", "payment card number", _OURS, 60, _cards, hint=_DIGIT_RUN),
)


def _any_of(literals: Iterable[str], patterns: Iterable[str] = ()) -> re.Pattern[str]:
    """One regex matching where any literal or pattern does (a literal holding another
    literal is dropped: the shorter one is found wherever it is). ``(?!)`` never matches:
    an empty alternation would match everywhere."""
    unique = sorted(set(literals))
    kept = [x for x in unique if not any(y != x and y in x for y in unique)]
    branches = [re.escape(x) for x in kept] + list(dict.fromkeys(patterns))
    return re.compile("|".join(branches) or "(?!)")


def _prefilter(detectors: tuple[Detector, ...]) -> Callable[[str], bool]:
    hints = [d.hint for d in detectors]
    if any(h is None for h in hints):
        return lambda _text: True  # a rule with no known hint: everything must be scanned
    known = [h for h in hints if h is not None]
    # A regex scan beats a loop of ``in`` tests several times over on short text.
    in_text = _any_of(
        (x for h in known if not h.ignore_case for x in h.literals),
        (h.pattern for h in known if h.pattern),
    )
    in_folded = _any_of(x for h in known if h.ignore_case for x in h.literals)

    def may_match(text: str) -> bool:
        if in_text.search(text):
            return True
        return in_folded.search(fold_case(text)) is not None

    return may_match


may_match: Callable[[str], bool] = _prefilter(DETECTORS)
"""Whether any of :data:`DETECTORS` could find something in a text; False is a proof that
none can (each rule's :class:`Hint` is absent), True only a maybe. Redacting text that
holds no hint is then one scan, not thirty-four."""
