"""Is a running broker holding the store's ``lock``? Tested without taking the lock."""
from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
_FLOCK = "hhqqi4x"


def lock_holder(lock_path: Path) -> int | None:
    """PID of the process holding a POSIX lock on byte 0 of ``lock_path``, else None.

    The broker locks byte 0 (length 1) with FileChannel.tryLock, a POSIX record lock.
    F_GETLK asks the kernel who would block a write lock; we never take one.
    Returns -1 when a lock is held but the holder is unknown.
    """
    try:
        fd = os.open(lock_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        try:
            answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        except OSError:
            return _lock_holder_by_probe(fd)
        l_type, _, _, _, l_pid = struct.unpack(_FLOCK, answer)
        if l_type == fcntl.F_UNLCK:
            return None
        return l_pid or -1
    finally:
        os.close(fd)


def _lock_holder_by_probe(fd: int) -> int | None:
    """Fallback: take a shared lock for an instant and release it."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
    except OSError:
        return -1
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
    return None
