"""Ctrl-C and worker processes: the parent ends the pool; a worker never prints a traceback.

A worker ignores SIGINT from its initializer on (``ignore_interrupts``). Before that it runs the
parent's handler, so a Ctrl-C that reaches the process group while workers are being forked would
raise KeyboardInterrupt in each of them; the forks are therefore made with SIGINT blocked
(``interrupts_held``): a worker starts with it blocked and pending, the initializer discards it
(setting SIG_IGN drops a pending signal) and unblocks it, and the parent takes its Ctrl-C as soon as
the forks are done.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager

_CAN_MASK = hasattr(signal, "pthread_sigmask")


def ignore_interrupts() -> None:
    """A pool worker's initializer: Ctrl-C is left to the parent, which ends the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _CAN_MASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextmanager
def interrupts_held():
    """SIGINT blocked in this thread (the one that forks the workers) for the block's duration."""
    if not _CAN_MASK:
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
