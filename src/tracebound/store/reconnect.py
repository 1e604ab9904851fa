"""Riding out a database server that went away: a follower's wait for it to come back.

A long-running reader (``project run --follow``, ``tail --follow``) meets a restart, a
failover or a network cut as :class:`~tracebound.errors.ConnectionLost`. Nothing of the
failed call was committed, and the store and views reconnect on their next call, so the
reader waits and calls again, backing off (0.1 s doubling to 5 s), until the server answers
or ``give_up_after`` seconds have passed since the connection was lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from tracebound.errors import ConnectionLost

__all__ = ["DEFAULT_GIVE_UP_AFTER", "Outage"]

_log = logging.getLogger(__name__)

DEFAULT_GIVE_UP_AFTER: Final = 300.0
"""Seconds a follower waits for a lost server before it ends: a restart or a failover takes
seconds to a minute or two; a server gone for good ends the follower, with the error, rather
than leaving it retrying unseen."""
FIRST_BACKOFF: Final = 0.1
MAX_BACKOFF: Final = 5.0


class Outage:
    """The state of one follower's lost connection: when it was lost and the next pause.

    Args:
        give_up_after: seconds after the loss past which :meth:`wait` raises (None: never).
        say: where the two lines go (the loss, the recovery); default: a logged warning.
        stop: set to end the wait early (a follower's stop event).
    """

    def __init__(
        self,
        give_up_after: float | None = DEFAULT_GIVE_UP_AFTER,
        *,
        say: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.give_up_after = give_up_after
        self.say = say or _log.warning
        self.stop = stop or threading.Event()
        self.since: float | None = None  # time.monotonic() of the loss; None: connected
        self.pause = FIRST_BACKOFF

    def wait(self, exc: ConnectionLost) -> None:
        """Pause before the next try; says so once per loss.

        Raises:
            ConnectionLost: the server has been out of reach for ``give_up_after`` seconds.
        """
        now = time.monotonic()
        if self.since is None:
            self.since, self.pause = now, FIRST_BACKOFF
            limit = (
                "never giving up"
                if self.give_up_after is None
                else (f"giving up after {self.give_up_after:g} s")
            )
            self.say(f"{exc}; reconnecting (every {MAX_BACKOFF:g} s at most, {limit})")
        elif self.give_up_after is not None and now - self.since >= self.give_up_after:
            raise ConnectionLost(
                f"{exc}; gave up after {now - self.since:.0f} s of reconnecting (--give-up-after)"
            ) from exc
        self.stop.wait(self.pause)
        self.pause = min(self.pause * 2, MAX_BACKOFF)

    def over(self, resumed: str) -> None:
        """The call went through: say so (with ``resumed``: from where) if it had been lost."""
        if self.since is not None:
            self.say(f"reconnected after {time.monotonic() - self.since:.1f} s; {resumed}")
            self.since = None
