"""Crash-safe replacement of a store directory (design.md §4).

Protocol for replacing ``<parent>/<name>`` (e.g. ``consumequeue`` or ``index``):

1. build the new tree in the sibling ``<name>.rmqtool-tmp-<ts>``; fsync every file, the
   directories and the parent;
2. write the journal ``.<name>.rmqtool-install`` (tmp and backup paths, the inode of the
   directory being replaced) and fsync it;
3. swap tmp and ``<name>`` atomically (``renameat2(RENAME_EXCHANGE)``; without it two
   renames, which the journal lets the next run finish); fsync the parent;
4. rename the old tree (now at the tmp path) to ``<name>.backup-<UTC ts>``; fsync the parent;
5. remove the journal.

At every instant ``<name>`` is either the complete old or the complete new tree.
``recover_leftovers`` runs first on every install: it removes unfinished builds and
finishes an interrupted swap (the old tree is moved to its backup name, never deleted).

``write`` replaces the whole store root the same way (target = the root): ``link_tree``
stages a hard-link mirror of the root, ``make_private`` turns a staged link into a private
copy before the first write into it (so the old root, kept as the backup, never changes),
and ``install`` swaps the stage in.

Test hook: when the environment variable ``RMQTOOL_CRASH_AT`` names a step (``build``,
``built``, ``journal``, ``exchanged``, ``moved``; for ``write`` also ``staged`` and
``mid-file``), the process SIGKILLs itself there.
"""
from __future__ import annotations

import ctypes
import datetime as dt
import errno
import json
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

from rmqtool.errors import RefusedError, RmqError

CRASH_ENV = "RMQTOOL_CRASH_AT"
CRASH_STEPS = ("build", "built", "journal", "exchanged", "moved")
WRITE_CRASH_STEPS = ("staged", "mid-file") + CRASH_STEPS
TMP_MARK = ".rmqtool-tmp-"
BACKUP_MARK = ".backup-"
JOURNAL_SUFFIX = ".rmqtool-install"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def crash_point(step: str) -> None:
    """Test hook: die here, hard, if RMQTOOL_CRASH_AT names this step."""
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def utc_stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if path.is_dir() else os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: fsyncs in flight at once: concurrent fsyncs share journal commits (a rebuilt ConsumeQueue
#: tree of 32 files + the index file: 0.31 s one after another, 0.06 s eight at a time)
FSYNC_THREADS = 8


def fsync_tree(root: Path, skip_linked: bool = False) -> None:
    """fsync every file and directory under root, root included; returns when all are done
    (several at a time: nothing relies on an order among them). ``skip_linked``: files
    with more than one link are carried-over originals whose data predates the build; their
    new names are made durable by the directory fsync (and syncing each would force a
    journal commit per file, for its changed link count)."""
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        for f in filenames:
            path = Path(dirpath) / f
            if skip_linked and os.stat(path, follow_symlinks=False).st_nlink > 1:
                continue
            if not os.path.islink(path):
                paths.append(path)
        paths.append(Path(dirpath))
    if len(paths) < 2:
        for path in paths:
            fsync_path(path)
        return
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(min(FSYNC_THREADS, len(paths))) as pool:
        for _ in pool.map(fsync_path, paths):    # re-raises the first failure
            pass


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False when the kernel or filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise RmqError(f"cannot swap directories: {os.strerror(err)}", b)


@dataclass
class InstallResult:
    target: str
    backup: str | None
    files: int
    bytes: int
    recovered: list[str] = field(default_factory=list)


def journal_path(target: Path) -> Path:
    return target.parent / f".{target.name}{JOURNAL_SUFFIX}"


def recover_leftovers(target: Path) -> list[str]:
    """Finish or undo what a crashed install left next to ``target``; describe each action."""
    notes: list[str] = []
    parent = target.parent
    journal = journal_path(target)
    if journal.exists():
        try:
            j = json.loads(journal.read_text())
            tmp, backup, old_ino = Path(j["tmp"]), Path(j["backup"]), j.get("old_ino")
        except (OSError, ValueError, KeyError) as exc:
            raise RmqError(f"unreadable install journal ({exc}); inspect it by hand", journal) from None
        target_ino = target.stat().st_ino if target.exists() else None
        if old_ino is not None and target_ino == old_ino:
            # the swap never happened: target is the old tree, tmp an unused new tree
            if tmp.exists():
                shutil.rmtree(tmp)
            notes.append(f"interrupted install before the swap: kept the original {target}, "
                         f"removed the unused build {tmp.name}")
        elif target_ino is None and tmp.exists():
            # rename fallback died between its two renames: the old tree is at backup
            os.rename(tmp, target)
            fsync_path(parent)
            notes.append(f"interrupted install: moved the new tree {tmp.name} into place")
        else:
            if tmp.exists():
                os.rename(tmp, backup)
                fsync_path(parent)
                notes.append(f"interrupted install after the swap: the originals were moved to "
                             f"{backup.name}")
            else:
                notes.append(f"interrupted install had completed; originals are in {backup.name}")
        journal.unlink()
        fsync_path(parent)
    prefix = target.name + TMP_MARK
    for entry in sorted(parent.iterdir()):
        if entry.name.startswith(prefix) and entry.is_dir():
            shutil.rmtree(entry)
            notes.append(f"removed an unfinished build left by a crash: {entry.name}")
    if notes:
        fsync_path(parent)
    return notes


def new_build_dir(target: Path) -> Path:
    tmp = target.parent / f"{target.name}{TMP_MARK}{utc_stamp()}"
    tmp.mkdir(parents=False)
    return tmp


def install(target: Path, tmp: Path, drop_empty_backup: bool = False) -> InstallResult:
    """Steps 1 (fsync) to 5 for a tree already built in ``tmp`` (see module docstring).
    ``drop_empty_backup``: an original that was an empty directory is removed, not kept."""
    crash_point("built")
    fsync_tree(tmp, skip_linked=True)
    fsync_path(target.parent)
    files = sum(len(f) for _, _, f in os.walk(tmp))
    size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(tmp) for f in fs)
    if not target.exists():
        os.rename(tmp, target)
        fsync_path(target.parent)
        return InstallResult(str(target), None, files, size)
    backup = target.parent / f"{target.name}{BACKUP_MARK}{utc_stamp()}"
    journal = journal_path(target)
    _write_synced(journal, json.dumps({"tmp": str(tmp), "backup": str(backup),
                                       "old_ino": target.stat().st_ino}))
    fsync_path(target.parent)
    crash_point("journal")
    if not _exchange(tmp, target):
        os.rename(target, backup)           # fallback: two renames, journal covers the gap
        os.rename(tmp, target)
        fsync_path(target.parent)
    else:
        fsync_path(target.parent)
        crash_point("exchanged")
        os.rename(tmp, backup)
        fsync_path(target.parent)
    crash_point("moved")
    journal.unlink()
    if drop_empty_backup and not any(backup.iterdir()):
        backup.rmdir()
        backup = None
    fsync_path(target.parent)
    return InstallResult(str(target), str(backup) if backup else None, files, size)


def _write_synced(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_output(output: Path) -> Path:
    """``--output DIR``: must not exist, or be an empty directory."""
    if output.exists():
        if not output.is_dir() or any(output.iterdir()):
            raise RefusedError("output directory exists and is not empty", output)
    else:
        output.mkdir(parents=True)
    return output


def link_or_copy(src: Path, dst: Path) -> None:
    """Carry an unchanged file into the new tree: hard link, else copy."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_tree(src: Path, dst: Path) -> int:
    """Mirror ``src`` into the existing directory ``dst``: directories recreated, regular files
    hard-linked (copied where linking fails), symlinks recreated as symlinks (never followed).
    Returns the number of entries carried. A mount point inside ``src`` is refused: its
    files cannot be linked, and the swap would leave the mount behind with the original."""
    n = 0
    dev = os.stat(src).st_dev
    with os.scandir(src) as it:
        for e in it:
            target = dst / e.name
            if e.is_symlink():
                os.symlink(os.readlink(e.path), target)
            elif e.is_dir(follow_symlinks=False):
                if e.stat(follow_symlinks=False).st_dev != dev:
                    raise RefusedError("a mount point inside the store cannot be staged for a "
                                       "crash-safe swap", e.path)
                target.mkdir()
                n += link_tree(Path(e.path), target)
            elif e.is_file(follow_symlinks=False):
                try:
                    os.link(e.path, target)
                except OSError:
                    shutil.copy2(e.path, target)
            else:
                continue                    # sockets, fifos, devices: not store content
            n += 1
    return n


def make_private(path: Path) -> None:
    """Before writing into a staged file: if it is a hard link shared with the original tree,
    replace it by a private copy (holes kept), so the original never changes."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    if st.st_nlink <= 1:
        return
    tmp = path.with_name(path.name + ".rmqtool-copy")
    copy_sparse(path, tmp)
    os.chmod(tmp, st.st_mode & 0o7777)
    os.rename(tmp, path)


_FICLONE = 0x40049409


def copy_sparse(src: Path, dst: Path) -> None:
    """Copy a file: a reflink where the filesystem can, else only its data extents
    (SEEK_DATA/SEEK_HOLE), so a preallocated-by-truncate file costs only what it holds."""
    import fcntl
    fin = os.open(src, os.O_RDONLY)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            size = os.fstat(fin).st_size
            try:
                fcntl.ioctl(fout, _FICLONE, fin)
                return
            except OSError:
                pass
            os.ftruncate(fout, size)
            for lo, hi in _extents(fin, size):
                _copy_range(fin, fout, lo, hi, src)
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def _extents(fd: int, size: int):
    """(start, end) of the data regions of a file; the whole file without SEEK_DATA."""
    pos = 0
    while pos < size:
        try:
            lo = os.lseek(fd, pos, os.SEEK_DATA)
            hi = os.lseek(fd, lo, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:          # no data after pos
                return
            yield pos, size
            return
        yield lo, min(hi, size)
        pos = hi


def _copy_range(fin: int, fout: int, lo: int, hi: int, src: Path) -> None:
    pos = lo
    while pos < hi:
        n = 0
        try:
            n = os.copy_file_range(fin, fout, min(hi - pos, 1 << 30), pos, pos)
        except (OSError, AttributeError):
            n = 0
        if n <= 0:
            data = os.pread(fin, min(hi - pos, 8 << 20), pos)
            if not data:
                raise RmqError("file shrank while being copied", src, pos)
            view = memoryview(data)
            at = pos
            while view:
                w = os.pwrite(fout, view, at)
                view, at = view[w:], at + w
            n = len(data)
        pos += n
