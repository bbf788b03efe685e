"""The rmqtool writer lock: one writer at a time per store, broker included.

Every command that changes a store (``write``; ``rebuild consumequeue|index|all`` without
``--dry-run``/``--output``) holds, for its whole run:

* the broker's lock: a POSIX lock on byte 0 (length 1) of ``STORE/lock``, the byte the broker
  locks with ``FileChannel.tryLock``, so a broker cannot start while rmqtool writes and rmqtool
  refuses a store a broker holds. ``lock`` is created when missing, with the broker's content
  (``"lock"``, also written into an empty one); other content is never touched. rmqtool takes an open-file-description lock
  (``F_OFD_SETLK``: it conflicts with the broker's classic lock, and is not dropped when some
  other code in the process closes a descriptor of the file), falling back to a classic lock;
* no live process holding the store: with ``abort`` present, a running process that has a file
  of the store open or mapped (``liveness.store_in_use``; a broker whose ``lock`` file was
  deleted and recreated holds its lock on the old, unlinked file) is refused, named;
* the side file ``<parent>/.<store name>.rmqtool-lock``, locked the same way, holding JSON
  ``{"marker", "pid", "command", "store"}``. It serialises rmqtool runs even before a new
  store's root exists, and names the holder in refusals ("another rmqtool (pid N, `rmqtool
  rebuild all`)" vs "a running broker (pid N)"). It lives beside the store so a killed writer
  leaves the store byte-for-byte as it was; a finished run removes it.

A lock is taken without waiting: a held one is refused (``RefusedError``, exit 3). Leftovers of
a crashed run are recovered only by a run that holds the lock, so a live run's build is never
mistaken for one. Read-only commands never take the lock; they treat a store an rmqtool
writer holds like a live store (``Store.is_live``, ``Store.lock_owner``).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import struct
from contextlib import contextmanager, nullcontext
from pathlib import Path

from rmqtool.io import liveness, ownership
from rmqtool.errors import RefusedError, writing_to
from rmqtool.io.fileio import not_regular
from rmqtool.io.install import pwrite_all
from rmqtool.io.liveness import HELD, SIDE_MARKER, LockOwner, lock_owner, read_side, side_path

LOCK_NAME = "lock"
LOCK_CONTENT = b"lock"               # what the broker writes at offset 0
#: O_NONBLOCK: a FIFO in the lock file's place is opened without waiting, then refused
_OPEN_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0))
_ATTEMPTS = 8                         # re-tries when the file was replaced between open and lock

_fds_here: set[int] = set()           # descriptors holding writer locks (closed in forked children)


def _forget_in_child() -> None:
    """A forked child (a worker process) must not keep the parent's lock alive after the
    parent is gone: close its copies of the descriptors (the parent's lock stays)."""
    for fd in list(_fds_here):
        try:
            os.close(fd)
        except OSError:
            pass
    _fds_here.clear()
    HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _try_lock(fd: int) -> bool:
    """Exclusive lock on byte 0 (length 1), without waiting; False when someone holds it."""
    request = struct.pack(liveness._FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    ofd = getattr(fcntl, "F_OFD_SETLK", None)
    if ofd is not None:
        try:
            fcntl.fcntl(fd, ofd, request)
            return True
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            if exc.errno != errno.EINVAL:          # EINVAL: a kernel without OFD locks
                raise
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        return True
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _open(path: Path) -> int:
    """The lock file ``path``, opened (created when missing) without waiting; a symlink, FIFO,
    socket or device there is refused (exit 3), never followed, read or written. One it creates is
    owned like a new file in its directory (``io.ownership``: a store's owner, not the user running
    rmqtool)."""
    try:
        fd = ownership.open_file(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RefusedError(f"the lock file is a symlink (to {os.readlink(path)!r}); rmqtool never "
                               "follows links inside a store", path) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):     # a socket, a directory
            raise RefusedError("the lock file is not a regular file; rmqtool only locks a regular "
                               "`lock` file, as the broker does", path) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RefusedError(f"the lock file is not a regular file ({not_regular(mode)}); rmqtool "
                           "only locks a regular `lock` file, as the broker does", path)
    return fd


class WriterLock:
    """The writer lock of the store at ``root`` (see the module docstring). ``acquire`` takes
    the side file and, when the root is a directory, ``root/lock``; ``hold`` also locks a
    ``lock`` file created in a stage (a new store); ``release`` drops everything."""

    def __init__(self, root: str | Path, command: str):
        self.root = Path(os.path.realpath(root))
        self.command = command
        self.side = side_path(self.root)
        self._side_fd = -1
        self._locks: list[tuple[int, tuple[int, int]]] = []

    # -- taking ---------------------------------------------------------------------------
    def acquire(self) -> "WriterLock":
        try:
            self._take_side()
            self.take_store_lock()
        except BaseException:
            self.release()
            raise
        return self

    def take_store_lock(self) -> None:
        """Lock ``root/lock`` (created when missing) if the root is a directory and it is not
        held yet (a store root that appeared after ``acquire``, e.g. by crash recovery)."""
        if not self.root.is_dir() or self.holds(self.root / LOCK_NAME):
            return
        self.hold(self.root / LOCK_NAME)
        refuse_if_in_use(self.root)

    def holds(self, path: Path) -> bool:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return False
        return any(key == (st.st_dev, st.st_ino) for _, key in self._locks)

    def hold(self, path: Path) -> None:
        """Lock byte 0 of the lock file ``path`` (created with the broker's content when missing)."""
        for _ in range(_ATTEMPTS):
            fd = _open(path)
            if not _try_lock(fd):
                os.close(fd)
                raise RefusedError(f"{self._holder_of(path)} holds the store lock; wait for it to "
                                   "finish (or stop the broker)", path)
            if not _same_file(fd, path):             # replaced or removed between open and lock
                os.close(fd)
                continue
            if os.fstat(fd).st_size == 0:
                pwrite_all(fd, LOCK_CONTENT, 0)
            st = os.fstat(fd)
            self._locks.append((fd, (st.st_dev, st.st_ino)))
            _fds_here.add(fd)
            HELD.add((st.st_dev, st.st_ino))
            return
        raise RefusedError("the lock file keeps being replaced; another process is working on the store", path)

    def _holder_of(self, path: Path) -> str:
        owner = lock_owner(path)
        if owner is None:
            return "another process"
        if owner.kind == "rmqtool" and owner.pid == os.getpid():
            owner = LockOwner("broker", -1)           # our own record: the kernel named nobody
        return owner.describe()

    def _take_side(self) -> None:
        for _ in range(_ATTEMPTS):
            try:
                fd = _open(self.side)
            except RefusedError:
                raise
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
                    return                           # parent not writable: the store lock alone
                raise
            if not _try_lock(fd):
                os.close(fd)
                rec = read_side(self.root)
                who = (LockOwner("rmqtool", rec["pid"], rec.get("command")) if rec is not None
                       else LockOwner("rmqtool", -1))
                raise RefusedError(f"{who.describe()} is writing this store; wait for it to finish",
                                   self.root)
            if not _same_file(fd, self.side):
                os.close(fd)
                continue
            data = json.dumps({"marker": SIDE_MARKER, "pid": os.getpid(), "command": self.command,
                               "store": str(self.root)}).encode()
            pwrite_all(fd, data, 0)
            os.ftruncate(fd, len(data))
            self._side_fd = fd
            _fds_here.add(fd)
            return
        raise RefusedError("the rmqtool lock file keeps being replaced", self.side)

    # -- releasing ------------------------------------------------------------------------
    def release(self) -> None:
        """Drop the store lock(s), then remove and unlock the side file."""
        for fd, key in self._locks:
            HELD.discard(key)
            _fds_here.discard(fd)
            os.close(fd)
        self._locks = []
        if self._side_fd >= 0:
            if _same_file(self._side_fd, self.side):
                try:
                    os.unlink(self.side)
                except OSError:
                    pass
            _fds_here.discard(self._side_fd)
            os.close(self._side_fd)
            self._side_fd = -1


def _root_of(store) -> Path:
    """A ``Store``'s root, or the path given (a ``Path``'s own ``.root`` is its anchor, not a store)."""
    if isinstance(store, (str, os.PathLike)):
        return Path(store)
    return Path(store.root)


@contextmanager
def writer_lock(store, command: str):
    """Hold the rmqtool writer lock of ``store`` (a ``Store`` or a path) for the block."""
    lock = WriterLock(_root_of(store), command).acquire()
    try:
        with writing_to(_root_of(store)):
            yield lock
    finally:
        lock.release()


def refuse_if_held(store) -> None:
    """Refuse (exit 3) a store whose lock a broker or another rmqtool holds, or that a live
    process holds (``refuse_if_in_use``), naming it."""
    lock = _root_of(store) / LOCK_NAME
    owner = lock_owner(lock)
    if owner is not None:
        raise RefusedError(f"{owner.describe()} holds the store lock; wait for it to finish, or "
                           "build elsewhere with --output", lock)
    refuse_if_in_use(_root_of(store))


def refuse_if_in_use(root: Path) -> None:
    """The broker's rule alone misses a broker whose ``lock`` file was deleted under it: refuse
    (exit 3) a store with ``abort`` present that a running process holds a file of open
    (``liveness.store_in_use``), naming the process and the file."""
    owner = liveness.store_in_use(root)
    if owner is not None:
        raise RefusedError(f"{owner.describe()}; stop it before changing the store", root)


#: what a rebuild of a store on object storage is told to do instead (``--output`` names a directory)
BUILD_ELSEWHERE = "the files into a local directory with --output DIR"


def refuse_in_place_on_object_storage(store, output, dry_run: bool, build: str = BUILD_ELSEWHERE) -> None:
    """A store on object storage is a snapshot rmqtool only reads: changing it in place (no
    ``output``, not a dry run) is a usage error saying to ``build`` the result elsewhere."""
    if getattr(store, "remote", False) and output is None and not dry_run:
        from rmqtool.errors import UsageError
        raise UsageError(f"the store is on object storage, which rmqtool only reads; build {build}", store.root)


def rebuild_lock(store, command: str, dry_run: bool, output, build: str = BUILD_ELSEWHERE):
    """What a ``rebuild`` holds: nothing for ``--output`` (the store is only read); for
    ``--dry-run`` nothing either, but a held store is refused naming its holder (as the
    rebuild would refuse a live store); otherwise the writer lock. A store on object storage
    (a snapshot nobody writes) holds no lock, and is never rebuilt in place (the refusal says
    to ``build`` the result elsewhere)."""
    if getattr(store, "remote", False):
        refuse_in_place_on_object_storage(store, output, dry_run, build)
        return nullcontext()
    if output is not None:
        return nullcontext()
    if dry_run:
        refuse_if_held(store)
        return nullcontext()
    return writer_lock(store, command)
