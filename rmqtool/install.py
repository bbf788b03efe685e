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

Test hook: when the environment variable ``RMQTOOL_CRASH_AT`` names a step (``build``,
``built``, ``journal``, ``exchanged``, ``moved``), the process SIGKILLs itself there.
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


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under root, then root itself."""
    for dirpath, dirnames, filenames in os.walk(root):
        for f in filenames:
            fsync_path(Path(dirpath) / f)
        fsync_path(Path(dirpath))


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


def install(target: Path, tmp: Path) -> InstallResult:
    """Steps 1 (fsync) to 5 for a tree already built in ``tmp`` (see module docstring)."""
    crash_point("built")
    fsync_tree(tmp)
    fsync_path(target.parent)
    files = sum(len(f) for _, _, f in os.walk(tmp))
    size = sum((Path(d) / f).stat().st_size for d, _, fs in os.walk(tmp) for f in fs)
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
    fsync_path(target.parent)
    return InstallResult(str(target), str(backup), files, size)


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
