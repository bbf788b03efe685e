"""Ctrl-C and worker processes: the parent ends the pool; a worker never prints a traceback.

A worker ignores SIGINT from its initializer on (``ignore_interrupts``). Before that it runs the
parent's handler, so a Ctrl-C that reaches the process group while workers are being forked would
raise KeyboardInterrupt in each of them; the forks are therefore made with SIGINT blocked
(``interrupts_held``): a worker starts with it blocked and pending, the initializer discards it
(setting SIG_IGN drops a pending signal) and unblocks it, and the parent takes its Ctrl-C as soon as
the forks are done.

A worker also dies with its parent (``die_with_parent``): killed (SIGKILL of the main process,
the OOM killer), the parent leaves no orphan behind to finish its task and then fail, with a
traceback, to send the result to nobody. On Linux the kernel kills the worker when the thread
that forked it ends (``prctl(PR_SET_PDEATHSIG)``); elsewhere, or when the fork was made by a
thread other than the main one (which may end before the pool does), a watcher thread polls
``getppid()``. A worker that finds the pipe to its parent broken exits quietly: its stderr is
the user's terminal, and nobody is left to whom the traceback would mean anything.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

_CAN_MASK = hasattr(signal, "pthread_sigmask")
_PR_SET_PDEATHSIG = 1                  # <linux/prctl.h>
_WATCH_SECONDS = 0.5                   # the fallback watcher's poll

#: (pid, forked by the main thread) of the process that made the last fork, recorded in the
#: parent just before it forks, so a child knows its parent even if that one died meanwhile
_forked_by: tuple[int, bool] | None = None


def _before_fork() -> None:
    global _forked_by
    _forked_by = (os.getpid(), threading.current_thread() is threading.main_thread())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)


def ignore_interrupts() -> None:
    """Ctrl-C is left to the parent, which ends the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _CAN_MASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def start_worker() -> None:
    """A pool worker's initializer: Ctrl-C left to the parent, death with the parent, and its
    walks read by the walking thread itself (the pool keeps every CPU busy: ``fileio.READ_AHEAD``)."""
    from rmqtool.io import fileio
    ignore_interrupts()
    die_with_parent()
    fileio.READ_AHEAD = False


def _set_parent_death_signal() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent() -> None:
    """In a forked worker: end this process when its parent ends (see the module docstring).
    A no-op in a process that was not forked by a Python parent."""
    if _forked_by is None or _forked_by[0] == os.getpid():
        return
    parent, by_main_thread = _forked_by
    if not (by_main_thread and _set_parent_death_signal()):
        threading.Thread(target=_watch_parent, args=(parent,), name="rmqtool-parent-watch",
                         daemon=True).start()
    if os.getppid() != parent:          # it died before the death signal was armed
        os._exit(0)
    sys.stderr = _QuietOrphanStream(sys.stderr, parent)


def _watch_parent(parent: int) -> None:
    import time
    while os.getppid() == parent:
        time.sleep(_WATCH_SECONDS)
    os._exit(0)


#: what a worker raises when its parent's end of the pipe is gone
_PARENT_GONE = (BrokenPipeError, ConnectionResetError, EOFError)


class _QuietOrphanStream:
    """A worker's stderr: a write made while handling a broken pipe to the parent (the pool's
    result or task pipe; the parent is dying or ending the pool), or once the parent is gone,
    ends the worker at once instead of printing the traceback to the user's terminal."""

    def __init__(self, stream, parent: int):
        self._stream, self._parent = stream, parent

    def write(self, text):
        if os.getppid() != self._parent or isinstance(sys.exc_info()[1], _PARENT_GONE):
            os._exit(0)
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


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
