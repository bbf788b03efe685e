"""The local ordered pool: tasks run in forked worker processes, their results consumed in
task order, at most a few tasks per worker ahead of the consumer; large numpy results travel
through anonymous memory files instead of the pool's pipe.

A walk over CommitLog files uses it with ``pieces`` (a file cut when there are too few files to
keep every worker busy) and ``chained`` (each piece used only where the previous piece's chain
of records arrived; otherwise scanned again from there), so the results are those of one
sequential walk. What a task computes is the caller's: the pool knows tasks, results and arrays.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator

import numpy as np

from rmqtool.engines.interrupts import interrupts_held, start_worker
from rmqtool.io.install import pwrite_all
from rmqtool.records.scan import END_RANGE

#: a file is split into pieces of at least this many bytes when there are fewer files than a
#: few per worker (so that no worker is left with a whole file to do alone)
MIN_PIECE = 16 << 20
PIECES_PER_WORKER = 8
#: and of at most this many: a piece's results wait whole in a memory file until the consumer takes
#: them (mapped into it then), so the consumer's peak memory grows with the piece, not the store
#: (rebuild all, 10M messages in 1 GiB files: 163 MiB peak with 512 MiB pieces, 93 MiB at 1M)
MAX_PIECE = 64 << 20
#: tasks queued or running per worker process, ahead of the consumer
IN_FLIGHT_PER_WORKER = 2


def default_workers() -> int:
    """Worker processes of the ordered pool when none are asked for: the CPUs, at most 8."""
    from rmqtool.engines.base import default_jobs
    return min(default_jobs(), 8)


# --- shipping arrays from the workers ----------------------------------------------------------
# Pickled through the pool's pipe, ~90 MB of results per million records land in fresh pages of
# the main process (twice: the message, then the unpickled arrays). Instead every worker appends
# its arrays to an anonymous memory file the main process created before forking the pool, and
# returns only their places; the main process maps them (read-only): no copy, no fresh pages.
# Without memfd, or when a write fails, results go through the pipe as they are.
# A region the main process has used is given back by number (``OrderedPool.release``: the highest
# number released, per worker, in memory shared with the workers), and the worker writes its next
# results into the first gap between the regions still in use: the memory file's pages are written
# again, not allocated, zeroed and then freed for every task (half the CPU a result costs: bench/README.md).
_ship_fd: tuple[int, int] | None = None    # this worker's (slot, memory file), set by init_worker
_ship_end = 0
_released = None                           # per slot: the highest region number given back (shared)
_regions: list[tuple[int, int, int]] = []  # this worker's regions maybe still in use: (start, end, number)
_number = 0


@dataclass
class Shipped:
    """Where one task's arrays lie in a worker's memory file."""
    slot: int
    offset: int                            # page-aligned
    length: int
    items: list                            # per item: (meta, [(dtype, count, at)])
    number: int | None = None              # given back by number (``OrderedPool.release``), else by punching


def init_worker(fds: list[int], counter, released=None) -> None:
    """Pool initializer: this worker takes the next memory file (``released``: the pool's shared
    table of regions given back, one number per memory file)."""
    global _ship_fd, _ship_end, _released, _regions, _number
    start_worker()
    with counter.get_lock():
        slot = counter.value
        counter.value += 1
    _ship_fd, _ship_end = (slot, fds[slot]) if slot < len(fds) else None, 0
    _released, _regions, _number = released, [], 0


def _place(slot: int, need: int) -> int:
    """Where ``need`` bytes go in this worker's memory file: the first gap between its regions not
    given back yet (released in the order they were shipped: the file is used as a ring), else
    after the last of them."""
    global _regions
    done = _released[slot]
    _regions = [r for r in _regions if r[2] > done]
    at = 0
    for start, end, _ in sorted(_regions):
        if start - at >= need:
            return at
        at = max(at, end)
    return at


def ship(items: list):
    """In a worker: ``items`` [(meta, [numpy arrays])] as a ``Shipped`` (the arrays written to
    this worker's memory file), or ``items`` themselves where there is no file or a write fails."""
    global _ship_end, _number
    if _ship_fd is None or not items:
        return items
    slot, fd = _ship_fd
    arrays = [[np.ascontiguousarray(a) for a in group] for _, group in items]
    size = sum(-(-a.nbytes // 64) * 64 for group in arrays for a in group)
    granule = mmap.ALLOCATIONGRANULARITY
    ring = _released is not None and slot < len(_released)
    base = _place(slot, -(-max(size, 1) // granule) * granule) if ring else _ship_end
    pos = end = base
    meta, views = [], []
    for (m, _), group in zip(items, arrays):
        cols = []
        for a in group:
            cols.append((a.dtype.str, len(a), pos - base))
            if a.nbytes:
                views.append((pos, memoryview(a.reshape(-1).view(np.uint8))))
                end = pos + a.nbytes
            pos += -(-a.nbytes // 64) * 64
        meta.append((m, cols))
    try:
        for at, view in views:
            pwrite_all(fd, view, at)
    except OSError:
        return items
    if not ring:
        _ship_end = -(-end // granule) * granule
        return Shipped(slot, base, end - base, meta)
    _number += 1
    _regions.append((base, base + -(-max(end - base, 1) // granule) * granule, _number))
    return Shipped(slot, base, end - base, meta, _number)


def unship(shipped, fds: list[int]) -> list:
    """In the main process: what ``ship`` was given, [(meta, [arrays])], the arrays read-only
    views of the memory file (no copy)."""
    if not isinstance(shipped, Shipped):
        return shipped
    if not shipped.length:
        mem = b""
    else:
        # shared and read-only, page tables filled in one call (no fault per page, no copy)
        mem = mmap.mmap(fds[shipped.slot], shipped.length, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                        prot=mmap.PROT_READ, offset=shipped.offset)
    return [(m, [np.frombuffer(mem, dtype=np.dtype(dt), count=count, offset=at) if count else
                 np.zeros(0, np.dtype(dt)) for dt, count, at in cols]) for m, cols in shipped.items]


_PUNCH_HOLE = 0x02 | 0x01                 # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def release(shipped, fds: list[int], released=None) -> None:
    """Give back a task's arrays in its worker's memory file once they have been consumed
    (nothing may keep a view of them), so the files stay the size of the results in flight,
    not of every result of the run: by number into ``released`` (the worker writes there again),
    else by punching a hole."""
    if not isinstance(shipped, Shipped):
        return
    if shipped.number is not None and released is not None:
        if shipped.number > released[shipped.slot]:
            released[shipped.slot] = shipped.number
        return
    if not shipped.length:
        return
    fallocate = _fallocate()
    if fallocate:
        fallocate(fds[shipped.slot], _PUNCH_HOLE, shipped.offset, shipped.length)


@lru_cache(maxsize=1)
def _fallocate():
    import ctypes
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    return fn


class _Throttle:
    """The tasks fed to ``pool.imap`` at most ``window`` ahead of the results consumed, so
    the workers never run further ahead of the consumer than that (their results wait in
    memory). ``stop`` lets the pool's feeder thread end before the pool is terminated."""

    def __init__(self, tasks: list, window: int):
        import threading
        self.tasks, self.window = tasks, window
        self._slots = threading.Semaphore(window)
        self._stopped = False

    def __iter__(self):
        for task in self.tasks:
            self._slots.acquire()
            if self._stopped:
                return
            yield task

    def consumed(self) -> None:
        self._slots.release()

    def stop(self) -> None:
        self._stopped = True
        self._slots.release(len(self.tasks) + 1)


class OrderedPool:
    """``map(fn, tasks)``: ``fn(task)`` of every task, in task order; with ``workers`` > 1 and more
    than one task, in forked worker processes (each with a memory file for ``ship``), at most
    ``IN_FLIGHT_PER_WORKER`` tasks per worker ahead of the consumer; otherwise here, one by one.
    Use it as a context manager: ``close(failed)`` ends the workers (see there)."""

    def __init__(self, workers: int, ntasks: int):
        self.procs = min(workers, ntasks) if workers > 1 and ntasks > 1 else 0
        self.fds: list[int] = []
        self._pool = self._throttle = self._raw = self._released = None

    def map(self, fn: Callable, tasks: list) -> Iterator:
        if not self.procs:
            return map(fn, tasks)
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        try:
            self.fds = [os.memfd_create("rmqtool-pool", getattr(os, "MFD_CLOEXEC", 0)) for _ in range(self.procs)]
        except (AttributeError, OSError):      # no memfd: results come through the pipe
            for fd in self.fds:
                os.close(fd)
            self.fds = []
        # the throttle exists before the pool: a Ctrl-C right after the fork finds it in ``close``
        self._throttle = _Throttle(tasks, IN_FLIGHT_PER_WORKER * self.procs)
        # regions given back, per memory file: the workers write into them again (``ship``)
        self._released = ctx.Array("q", len(self.fds), lock=False) if self.fds else None
        with interrupts_held():                 # a Ctrl-C now reaches the parent, not a forking worker
            self._pool = ctx.Pool(self.procs, initializer=init_worker,
                                  initargs=(self.fds, ctx.Value("i", 0), self._released))
        self._raw = self._pool.imap(fn, self._throttle)
        return self._consumed(self._raw, self._throttle)

    @staticmethod
    def _consumed(results, throttle: _Throttle):
        """``results``, telling ``throttle`` as each one is taken."""
        for result in results:
            throttle.consumed()
            yield result

    def unship(self, shipped) -> list:
        return unship(shipped, self.fds)

    def release(self, shipped) -> None:
        release(shipped, self.fds, self._released)

    def close(self, failed: bool) -> None:
        """End the pool. After a walk that ended (at the end or early) no new task starts, the
        ones in flight (at most the throttle's window) finish and are dropped, and the workers
        exit on their own. Only after a failure (Ctrl-C, an error) are they killed at once: a
        worker killed while it sends a result would leave the pool's result queue locked, and
        ``Pool.terminate`` then waits for that lock forever."""
        try:
            if self._pool is not None:
                self._throttle.stop()
                if failed or self._raw is None:
                    self._pool.terminate()
                else:
                    for shipped, *_ in self._raw:
                        self.release(shipped)
                    self._pool.close()
                    self._pool.join()
        finally:
            self._pool = None
            for fd in self.fds:          # the mappings made from them stay valid
                os.close(fd)
            self.fds = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.close(exc_type is not None)


# --- a walk over files cut into pieces ---------------------------------------------------------
def pieces(files: list, workers: int) -> list[tuple]:
    """(path, base, lo, hi, exact) of ``files`` [(path, base, lo, hi, size)]: each file whole, or
    cut into pieces when the files are too few to keep ``workers`` processes equally busy or larger
    than ``MAX_PIECE`` (with more than one worker: a piece's results are held whole by the consumer). Only
    a file's first piece starts at a known record; the others start at the resync's first
    record (``chained`` checks that it is where the previous piece's chain arrived)."""
    span = sum((hi if hi is not None else size) - lo for _, _, lo, hi, size in files)
    piece = min(max(MIN_PIECE, -(-span // max(1, workers * PIECES_PER_WORKER))), max(MAX_PIECE, MIN_PIECE))
    out = []
    for path, base, lo, hi, size in files:
        stop = hi if hi is not None else size
        if workers <= 1 or stop - lo < 2 * piece:
            out.append((path, base, lo, hi, True))
            continue
        cuts = list(range(lo, stop, piece))
        if stop - cuts[-1] < piece // 2:          # no sliver at the end
            cuts.pop()
        for k, at in enumerate(cuts):
            out.append((path, base, at, cuts[k + 1] if k + 1 < len(cuts) else hi, k == 0))
    return out


def chained(tasks: list, results, pool: OrderedPool, rescan: Callable, stopped: Callable):
    """In file order, per piece: (path, base, its items (``unship``-ed), the file's end or None).

    ``tasks``: ``pieces``' tuples (path, base, lo, hi, exact); ``results``: per task
    (shipped items, FileEnd, count, first record start or None); ``rescan(task, at)`` scans
    a piece from ``at`` (a record start) and returns such a result; ``stopped(items)`` says
    whether the walk ends after these items. The end is given with the piece where the file's
    walk ended (BLANK, zero, corrupt, the last piece); the pieces after it are drained and
    dropped. A piece is used only where the previous piece's chain arrived at its first
    record; when the resync started elsewhere (a record spanning the cut, a stray anchor in a
    body) the piece is scanned again from where the chain arrived."""
    results = iter(results)
    k = 0
    while k < len(tasks):
        j = k + 1
        while j < len(tasks) and tasks[j][0] == tasks[k][0] and not tasks[j][4]:
            j += 1
        arrived = None
        for i in range(k, j):
            task = tasks[i]
            shipped, piece_end, _, began = next(results)
            if arrived is None and i > k:             # the file ended in an earlier piece
                pool.release(shipped)
                continue
            if i > k and began != arrived:
                pool.release(shipped)
                shipped, piece_end, _, began = rescan(task, arrived)
            got = pool.unship(shipped)
            ended = i == j - 1 or piece_end.kind != END_RANGE or stopped(got)
            arrived = None if ended else piece_end.position
            yield task[0], task[1], got, piece_end if ended else None
            del got
            pool.release(shipped)
        k = j
