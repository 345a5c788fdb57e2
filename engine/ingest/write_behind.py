"""Writing behind the parser: one background thread consumes what the caller produces, in order.

Ingestion has two busy processes on two cores: Python parsing files, and the Postgres backend
writing them (and, when the model runs, the model). Run one after the other, each waits for
the other; with the writes on a thread, the parser prepares the next batch while the database
writes the last one (psycopg waits for the server without holding the GIL).

The queue is bounded, so the parser runs at most ``depth`` items ahead. The writer's error
is raised in the caller at its next ``submit`` or at ``close``; when the caller fails,
``abandon`` lets the writer finish the item it is writing (its transaction commits or rolls
back whole) and drops the rest.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, cast

T = TypeVar("T")

_END = object()


class WriteBehind(Generic[T]):
    """Runs ``consume(items)`` on a background thread, ``items`` yielding what ``submit`` receives."""

    def __init__(self, consume: Callable[[Iterator[T]], None], *, depth: int, name: str) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._abandoned = threading.Event()
        self._error: BaseException | None = None
        self._ended = False  # the end marker was taken from the queue
        self._thread = threading.Thread(target=self._run, args=(consume,), name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> None:
        """Queue ``item`` (waiting while ``depth`` items are queued); raises the writer's error if it failed."""
        self.check()
        self._queue.put(item)

    def check(self) -> None:
        """Raise the writer's error if it failed."""
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Wait until everything submitted is consumed; raises the writer's error if it failed."""
        self._queue.put(_END)
        self._thread.join()
        self.check()

    def abandon(self) -> None:
        """Stop after the item being consumed, dropping the queued ones, and wait for the thread."""
        self._abandoned.set()
        self._queue.put(_END)  # never blocks for long: the writer keeps taking items until it sees the end
        self._thread.join()

    def _items(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            self._ended = item is _END
            if self._ended or self._abandoned.is_set():
                return
            yield cast(T, item)

    def _run(self, consume: Callable[[Iterator[T]], None]) -> None:
        try:
            consume(self._items())
        except BaseException as error:  # re-raised in the caller's thread, where it is handled
            self._error = error
        # Take whatever is still queued, up to the end marker, so a producer blocked on a full
        # queue (or about to put the end marker) never waits forever on a writer that stopped.
        while not self._ended:
            self._ended = self._queue.get() is _END
