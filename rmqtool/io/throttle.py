"""Gentle on a live host: a limit on how fast this process reads store files (``--max-read-rate``)
and the idle I/O class (``--idle-io``). The two read paths (``fileio.ReadOnlyFile.read`` and the
scan's window reads) both call ``consume``; with no limit set it costs one comparison.

The limit holds the average since the first read: after ``n`` bytes the process has taken at least
``n / rate`` seconds. It is per process: worker processes (``--jobs N``) inherit it through the
environment (``RMQTOOL_MAX_READ_RATE``, bytes per second), so N workers read at most N times it.
"""
from __future__ import annotations

import os
import time

ENV = "RMQTOOL_MAX_READ_RATE"


class Throttle:
    def __init__(self, rate: float | None, clock=time.monotonic, sleep=time.sleep):
        self.rate = rate if rate and rate > 0 else None
        self.clock, self.sleep = clock, sleep
        self.start: float | None = None
        self.bytes = 0

    def consume(self, n: int) -> None:
        if self.rate is None or n <= 0:
            return
        now = self.clock()
        if self.start is None:
            self.start = now
        self.bytes += n
        ahead = self.bytes / self.rate - (now - self.start)
        if ahead > 0:
            self.sleep(ahead)


_throttle = Throttle(float(os.environ[ENV]) if os.environ.get(ENV) else None)


def consume(n: int) -> None:
    """Account ``n`` bytes just read (sleeps when the process reads faster than the limit)."""
    if _throttle.rate is not None:
        _throttle.consume(n)


def set_max_read_rate(mb_per_second: float | None) -> None:
    """Limit this process (and the workers it starts) to ``mb_per_second`` MB/s (1 MB = 10^6 bytes)."""
    global _throttle
    rate = mb_per_second * 1e6 if mb_per_second else None
    _throttle = Throttle(rate)
    if rate:
        os.environ[ENV] = str(rate)
    else:
        os.environ.pop(ENV, None)


#: Linux ioprio_set: who = this process, the idle class (IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT)
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}
_IOPRIO_WHO_PROCESS, _IOPRIO_CLASS_IDLE, _IOPRIO_CLASS_SHIFT = 1, 3, 13


def use_idle_io() -> bool:
    """Put this process in the idle I/O class (Linux: the disk serves it only when nobody else
    asks); False where the OS offers no such class (the option is then a no-op)."""
    import ctypes
    import platform
    nr = _IOPRIO_SET.get(platform.machine())
    if nr is None or not hasattr(os, "sched_getaffinity"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(nr, _IOPRIO_WHO_PROCESS, 0, _IOPRIO_CLASS_IDLE << _IOPRIO_CLASS_SHIFT) == 0
    except (OSError, AttributeError):
        return False
