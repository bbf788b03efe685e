"""Is a running broker -- or another rmqtool writer -- holding the store's ``lock``? Tested
without taking the lock.

The broker locks byte 0 (length 1) of ``STORE/lock`` with ``FileChannel.tryLock``, a POSIX
record lock. An rmqtool writer (``rmqtool.io.storelock``) takes a conflicting lock on the same
byte, so the two exclude each other, and records who it is in a side file beside the store
(``<parent>/.<store name>.rmqtool-lock``, never inside the broker's ``lock``): that is how a
refusal names "another rmqtool (pid N, `rmqtool rebuild all`)" rather than a broker.

The lock file can be deleted under a running broker (an operator's cleanup): its lock then lives
on an unlinked file, and a new ``lock`` is free. So a writer also asks ``store_in_use``: with
``abort`` present (the broker writes it at start and removes it at a clean shutdown), is a running
process holding a file of the store open -- a descriptor (``/proc/PID/fd``) or a mapping
(``/proc/PID/maps``: the broker maps its CommitLog and ConsumeQueue files)? This process, its
descendants (pool workers) and other rmqtool processes (their writers take the lock, their
readers change nothing) are not counted. Only processes whose ``/proc`` entries this user may
read are seen (all of them as root).
"""
from __future__ import annotations

import fcntl
import json
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from rmqtool.errors import RmqError
from rmqtool.io.fileio import open_regular

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
    #: kind ``process``: the store file it has open
    holds: str | None = None

    def describe(self) -> str:
        pid = "unknown" if self.pid < 0 else str(self.pid)
        if self.kind == "rmqtool":
            return f"another rmqtool (pid {pid}, `{self.command or 'rmqtool'}`)"
        if self.kind == "process":
            return (f"a running process (pid {pid}, `{self.command}`) has {self.holds} open while "
                    "`abort` is present (a broker whose `lock` file was removed?)")
        return f"a running broker (pid {pid})"

    def as_dict(self) -> dict:
        out = {"kind": self.kind, "pid": self.pid, "command": self.command}
        if self.holds is not None:
            out["holds"] = self.holds
        return out


def read_side(root: str | Path) -> dict | None:
    """The side file's record ``{marker, pid, command, store}``, or None (absent, partial, foreign)."""
    try:
        fd = open_regular(side_path(root))          # a FIFO there is refused, never waited on
    except (OSError, RmqError):
        return None
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
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
    """O_NONBLOCK and a regular file only: a FIFO there is never waited on (nobody locks one)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
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


# --- a live process holding the store's files ---------------------------------------------------
_PROC = Path("/proc")
_COMMAND_HEAD = 80                     # characters of a command line shown in a refusal


def store_in_use(root: str | Path) -> LockOwner | None:
    """With ``root/abort`` present, the first running process (not this one, its descendants or
    another rmqtool) that has a file under ``root`` open or mapped, as ``LockOwner("process",
    pid, command head, holds=the file)``; None when ``abort`` is absent, nobody holds a file, or
    there is no ``/proc``."""
    root = Path(os.path.realpath(root))
    if not (root / "abort").is_file() or not _PROC.is_dir():
        return None
    prefix = str(root) + os.sep
    parents = _parents()
    mine = _descendants(os.getpid(), parents)
    for pid in sorted(parents):
        if pid in mine:
            continue
        held = _held_under(pid, prefix)
        if held is None:
            continue
        command = _command(pid)
        if command is None or _is_rmqtool(command):
            continue
        return LockOwner("process", pid, _head(command), held)
    return None


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process now."""
    out = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{entry.path}/stat", "rb") as fh:
                line = fh.read(4096)
            out[int(entry.name)] = int(line[line.rindex(b")") + 2:].split()[1])   # after "(comm) state"
        except (OSError, ValueError, IndexError):
            continue
    return out


def _descendants(pid: int, parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _held_under(pid: int, prefix: str) -> str | None:
    """A path under ``prefix`` that process ``pid`` has open (a descriptor) or mapped, else None."""
    base = f"/proc/{pid}"
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:                        # gone, or not ours to read
        fds = []
    for fd in fds:
        try:
            target = os.readlink(f"{base}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix):
            return target
    try:
        with open(f"{base}/maps", "rb") as fh:
            for line in fh:
                parts = line.rstrip(b"\n").split(None, 5)
                if len(parts) == 6 and parts[5].startswith(prefix.encode()):
                    return os.fsdecode(parts[5])
    except OSError:
        pass
    return None


def _command(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [os.fsdecode(a) for a in fh.read(65536).split(b"\0") if a]
        if argv:
            return argv
        with open(f"/proc/{pid}/comm", "rb") as fh:
            return [os.fsdecode(fh.read().strip())]
    except OSError:
        return None


def _is_rmqtool(argv: list[str]) -> bool:
    """``rmqtool ...`` or ``python -m rmqtool ...`` (and the pool workers such a run forks)."""
    if os.path.basename(argv[0]) == "rmqtool":
        return True
    return any(a == "-m" and b == "rmqtool" for a, b in zip(argv, argv[1:]))


def _head(argv: list[str]) -> str:
    text = " ".join(argv)
    return text if len(text) <= _COMMAND_HEAD else text[:_COMMAND_HEAD - 1] + "…"
