"""Just enough PEP 440 to order the versions an OSV range names.

The project deliberately has no runtime dependency on ``packaging``; the recipes only need
to answer "is ``current`` in ``[introduced, fixed)``?" and "which fixed version is first",
so this module parses public PEP 440 versions (epoch, release, pre, post, dev, local) into a
sort key. A version it cannot parse is reported as such, and the recipe that needed it
stands aside (the LLM tier may still plan), rather than guessing an order.
"""

from __future__ import annotations

import re
from typing import TypeAlias

__all__ = ["VersionKey", "parse_version"]

VersionKey: TypeAlias = tuple[
    int, tuple[int, ...], tuple[int, int, int], tuple[int, int], tuple[int, int]
]

_PEP440 = re.compile(
    r"""^\s*v?
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_MAX_VERSION_CHARS = 256
"""Longer is not a version anyone publishes. The bound matters: Python refuses to turn more
than 4300 digits into an int (``ValueError``), and an advisory's ``fixed`` field, written by
a third party, has no length limit."""


def parse_version(text: str) -> VersionKey | None:
    """A sort key for a PEP 440 version, or ``None`` if ``text`` is not one.

    Ordering: ``1.0.dev1 < 1.0a1 < 1.0rc1 < 1.0 < 1.0.post1``; trailing ``.0`` release parts
    do not matter (``1.0 == 1.0.0``); local labels are ignored, as PEP 440 says they are for
    range checks.
    """
    if len(text) > _MAX_VERSION_CHARS:
        return None
    m = _PEP440.match(text)
    if m is None:
        return None
    release = tuple(int(p) for p in m["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    pre_l, dev_l = m["pre_l"], m["dev_l"]
    post_n = m["post_n1"] or m["post_n2"]
    has_post = m["post_n1"] is not None or m["post_l"] is not None
    if pre_l is not None:
        pre = (0, _PRE_RANK[pre_l.lower()], int(m["pre_n"] or 0))
    elif dev_l is not None and not has_post:
        pre = (-1, 0, 0)  # 1.0.dev0 sorts before every 1.0 pre-release
    else:
        pre = (1, 0, 0)
    post = (1, int(post_n or 0)) if has_post else (0, 0)
    dev = (0, int(m["dev_n"] or 0)) if dev_l is not None else (1, 0)
    return (int(m["epoch"] or 0), release, pre, post, dev)
