"""The per-stream BLAKE3 chain of ADR-0005.

``hash = blake3(prev_hash || canonical_json(record without hash))``. The genesis
``prev_hash`` is 32 zero bytes, or the head of an upstream chain that this one continues
(the planning side's last head, for the RetryLedger). Continuing a head is first-class:
:class:`ChainCursor` starts from one and refuses a record that does not link to it.
"""

from __future__ import annotations

from blake3 import blake3

from tracebound.errors import AuditChainCorrupted
from tracebound.ids import ChainHead

__all__ = ["GENESIS", "HASH_SIZE", "ChainCursor", "chain_hash", "parse_head"]

HASH_SIZE = 32
GENESIS = ChainHead(bytes(HASH_SIZE))


def chain_hash(prev_hash: bytes, canonical: bytes) -> ChainHead:
    """BLAKE3 of ``prev_hash || canonical``: one link of the chain."""
    h = blake3(prev_hash)
    h.update(canonical)
    return ChainHead(h.digest())


def parse_head(value: bytes | str) -> ChainHead:
    """Accept a head as 32 raw bytes or 64 hex characters; anything else is corruption."""
    raw = bytes.fromhex(value) if isinstance(value, str) else value
    if len(raw) != HASH_SIZE:
        raise AuditChainCorrupted(f"a chain head is {HASH_SIZE} bytes; got {len(raw)}")
    return ChainHead(raw)


class ChainCursor:
    """Walks a chain forward from a known head, checking or extending it.

    Used both by writers (``extend``) and by verifiers (``check``), so that the two can
    never compute a link differently.
    """

    __slots__ = ("head", "length")

    def __init__(self, head: bytes = GENESIS) -> None:
        self.head: ChainHead = parse_head(head)
        self.length = 0

    def extend(self, canonical: bytes) -> ChainHead:
        """Append a record's canonical bytes and return the new head."""
        self.head = chain_hash(self.head, canonical)
        self.length += 1
        return self.head

    def check(self, prev_hash: bytes, canonical: bytes, claimed: bytes) -> ChainHead:
        """Verify that a stored record links to the current head and hashes to ``claimed``."""
        if prev_hash != self.head:
            raise AuditChainCorrupted(
                f"record {self.length + 1} links to {prev_hash.hex()[:16]}…, "
                f"but the chain head is {self.head.hex()[:16]}…"
            )
        actual = chain_hash(prev_hash, canonical)
        if actual != claimed:
            raise AuditChainCorrupted(
                f"record {self.length + 1} hashes to {actual.hex()[:16]}…, "
                f"but {claimed.hex()[:16]}… is stored"
            )
        self.head = actual
        self.length += 1
        return actual
