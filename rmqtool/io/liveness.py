"""Is a running broker -- or another rmqtool writer -- holding the store's ``lock``? Tested
without taking the lock.

The broker locks byte 0 (length 1) of ``STORE/lock`` with ``FileChannel.tryLock``, a POSIX
record lock. An rmqtool writer (``rmqtool.io.storelock``) takes a conflicting lock on the same
byte, so the two exclude each other, and records who it is in a side file beside the store
(``<parent>/.<store name>.rmqtool-lock``, never inside the broker's ``lock``): that is how a
refusal names "another rmqtool (pid N, `rmqtool rebuild all`)" rather than a broker.
"""
from __future__ import annotations

import fcntl
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
_FLOCK = "hhqqi4x"

#: the rmqtool side file is ``<parent>/.<store name>`` + this suffix
SIDE_SUFFIX = ".rmqtool-lock"
#: the side file's JSON carries this marker (and pid, command, store)
SIDE_MARKER = "rmqtool-writer-lock"

#: (st_dev, st_ino) of the ``lock`` files this process holds as an rmqtool writer: they are
#: not reported as held (a POSIX lock is never "held by someone else" for its own process)
HELD: set[tuple[int, int]] = set()


def side_path(root: str | Path) -> Path:
    """The rmqtool side file of the store at ``root``: beside the store, not inside it, so a
    killed writer leaves the store itself exactly as it was."""
    real = Path(os.path.realpath(root))
    return real.parent / f".{real.name}{SIDE_SUFFIX}"


@dataclass(frozen=True)
class LockOwner:
    """Who holds a store's lock: ``kind`` is ``broker`` or ``rmqtool``; ``pid`` -1 when unknown."""
    kind: str
    pid: int
    command: str | None = None

    def describe(self) -> str:
        pid = "unknown" if self.pid < 0 else str(self.pid)
        if self.kind == "rmqtool":
            return f"another rmqtool (pid {pid}, `{self.command or 'rmqtool'}`)"
        return f"a running broker (pid {pid})"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "pid": self.pid, "command": self.command}


def read_side(root: str | Path) -> dict | None:
    """The side file's record ``{marker, pid, command, store}``, or None (absent, partial, foreign)."""
    try:
        with open(side_path(root), "rb") as fh:
            data = json.loads(fh.read(4096).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("marker") != SIDE_MARKER or not isinstance(data.get("pid"), int):
        return None
    return data


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def held_here(lock_path: Path) -> bool:
    """True when this process holds ``lock_path`` as an rmqtool writer (no fd is opened: with
    classic POSIX locks, closing any fd of the file would drop the process's lock)."""
    try:
        st = os.stat(lock_path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in HELD


def lock_owner(lock_path: Path) -> LockOwner | None:
    """Who holds a POSIX lock on byte 0 of ``lock_path`` (another process), else None.

    The kernel names a classic lock's holder (the broker's ``FileChannel`` lock); rmqtool
    takes an open-file-description lock, which the kernel reports as pid -1: then the side
    file names the rmqtool process. A pid the side file records is trusted only if it is
    the kernel's answer, or the kernel gave none and that process is alive."""
    lock_path = Path(lock_path)
    if held_here(lock_path):
        return None
    pid = _kernel_holder(lock_path)
    if pid is None:
        return None
    side = read_side(lock_path.parent)
    if side is not None and (side["pid"] == pid or (pid < 0 and _alive(side["pid"]))):
        return LockOwner("rmqtool", side["pid"], side.get("command"))
    return LockOwner("broker", pid)


def lock_holder(lock_path: Path) -> int | None:
    """PID of the process holding a POSIX lock on byte 0 of ``lock_path``, else None.

    The broker locks byte 0 (length 1) with FileChannel.tryLock, a POSIX record lock.
    F_GETLK asks the kernel who would block a write lock; we never take one.
    Returns -1 when a lock is held but the holder is unknown. Locks this process holds
    as an rmqtool writer are not reported."""
    owner = lock_owner(Path(lock_path))
    return None if owner is None else owner.pid


def _kernel_holder(lock_path: Path) -> int | None:
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
        return l_pid if l_pid > 0 else -1
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
