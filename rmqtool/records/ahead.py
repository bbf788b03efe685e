"""A walk's batches made one ahead in a thread: the next window is read and scanned (the reads
and the native core release the GIL) while the caller checks the last one on the other core."""
from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")

_ITEM, _DONE, _ERROR = range(3)
#: seconds between looks at the stop flag while the worker waits for room
_POLL = 0.05


def one_ahead(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """Iterate ``items`` in a worker thread, at most ``depth`` items ahead of the caller.

    An error of the iteration is raised here, where its item would have come. Leaving the loop
    early (``break``, an error, Ctrl-C) stops the worker before this generator closes; the worker
    is a daemon so that an interpreter ending meanwhile never waits for it.
    """
    handoff: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                handoff.put(entry, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    source = iter(items)

    def work() -> None:
        try:
            for item in source:
                if not put((_ITEM, item)):
                    return
            put((_DONE, None))
        except BaseException as exc:          # noqa: BLE001 - handed to the caller's thread
            put((_ERROR, exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()                       # a generator's files, here, not at garbage collection

    worker = threading.Thread(target=work, name="rmqtool-ahead", daemon=True)
    worker.start()
    try:
        while True:
            kind, value = handoff.get()
            if kind == _DONE:
                return
            if kind == _ERROR:
                raise value
            yield value
            del value
    finally:
        stop.set()
        worker.join()
