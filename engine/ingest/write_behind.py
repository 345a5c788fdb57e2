"""Writing behind the parser: background threads consume what the caller produces.

Ingestion has two busy processes on two cores: Python parsing files, and the Postgres backend
writing them (and, when the model runs, the model). Run one after the other, each waits for
the other; with the writes on a thread, the parser prepares the next batch while the database
writes the last one (psycopg waits for the server without holding the GIL).

The queue is bounded, so the parser runs at most ``depth`` items ahead. The writer's error
is raised in the caller at its next ``submit`` or at ``close``; when the caller fails,
``abandon`` lets the writer finish the item it is writing (its transaction commits or rolls
back whole) and drops the rest.

With ``threads`` > 1, that many writers take items from the one queue, each in the order
submitted but in no order between them; one writer's error stops the others after the item
each is writing.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, cast

T = TypeVar("T")

_END = object()


class WriteBehind(Generic[T]):
    """Runs ``consume(items)`` on ``threads`` background threads, ``items`` yielding what ``submit`` receives."""

    def __init__(self, consume: Callable[[Iterator[T]], None], *, depth: int, name: str, threads: int = 1) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._abandoned = threading.Event()
        self._errors: list[BaseException] = []  # list.append is atomic: no lock needed
        self._threads = [threading.Thread(target=self._run, args=(consume,), daemon=True,
                                          name=name if threads == 1 else f"{name}-{number}")
                         for number in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, item: T) -> None:
        """Queue ``item`` (waiting while ``depth`` items are queued); raises a writer's error if one failed."""
        self.check()
        self._queue.put(item)

    def check(self) -> None:
        """Raise a writer's error if one failed."""
        if self._errors:
            raise self._errors[0]

    def close(self) -> None:
        """Wait until everything submitted is consumed; raises a writer's error if one failed."""
        self._end()
        self.check()

    def abandon(self) -> None:
        """Stop after the items being consumed, dropping the queued ones, and wait for the threads."""
        self._abandoned.set()
        self._end()  # never blocks for long: each writer keeps taking items until it sees an end

    def _end(self) -> None:
        for _ in self._threads:  # one end marker per writer: each stops at the first it takes
            self._queue.put(_END)
        for thread in self._threads:
            thread.join()

    def _run(self, consume: Callable[[Iterator[T]], None]) -> None:
        ended = False  # this thread took an end marker from the queue

        def items() -> Iterator[T]:
            nonlocal ended
            while True:
                item = self._queue.get()
                ended = item is _END
                if ended or self._abandoned.is_set() or self._errors:
                    return
                yield cast(T, item)

        try:
            consume(items())
        except BaseException as error:  # re-raised in the caller's thread, where it is handled
            self._errors.append(error)
        # Take whatever is still queued, up to an end marker, so a producer blocked on a full
        # queue (or about to put the end markers) never waits forever on a writer that stopped.
        while not ended:
            ended = self._queue.get() is _END
