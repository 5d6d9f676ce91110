"""Files written on threads while the caller goes on computing.

Arrow's Parquet writer encodes and compresses without the GIL, so a table part handed to a thread costs the
analysis beside it no wall time on a second core. At most ``ahead`` writes wait at once (each holds its table);
``wait`` returns once every write handed over is done and raises the first one's failure. Leaving the ``with``
block waits for every write; after an error in the block the writes not yet started are dropped (the caller's
folder is then discarded) and those running are waited for, so that none lands after the caller has cleaned up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class BackgroundWrites:
    """``submit(write, *args)`` runs ``write(*args)`` on one of ``threads`` threads, at most ``ahead`` of them
    pending (a further submit first waits for the oldest)."""

    def __init__(self, threads: int = 1, ahead: int = 2, name: str = "xstage-writes"):
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._pending: deque[Future] = deque()
        self._ahead = ahead

    def __enter__(self) -> "BackgroundWrites":
        return self

    def __exit__(self, exc_type, *_) -> None:
        try:
            if exc_type is None:
                self.wait()
        finally:
            self._pool.shutdown(cancel_futures=True)

    def submit(self, write: Callable, *args) -> None:
        """Hand ``write(*args)`` to a thread."""
        self._pending.append(self._pool.submit(write, *args))
        while len(self._pending) > self._ahead:
            self._pending.popleft().result()

    def wait(self) -> None:
        """Return once every write handed over is done; raise the first failure."""
        while self._pending:
            self._pending.popleft().result()
