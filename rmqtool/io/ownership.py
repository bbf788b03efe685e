"""Who owns what rmqtool writes into a store, and with which mode (docs/limits.md, "Owners and modes").

A broker runs as its own user; rmqtool is often run as root. Everything rmqtool puts into a
store must be usable by the broker afterwards, so every file and directory it writes or
replaces is given:

* **what it replaces** (an entry at the same path before the run, of the same type): that
  entry's owner, group and permission bits (setgid and sticky included);
* **a new entry**: the owner and group of the directory it is created in; its mode is that of
  the last sibling of the same kind in the store's directory (for a file whose name is all
  digits, the last file whose name has as many digits: a new CommitLog, ConsumeQueue or
  IndexFile gets the mode of the one before it; for a directory, the last sibling directory),
  else the default under the umask within what the parent grants, the owner keeping
  read-write (``rw-``/``rwx``): 0644 files and 0755 directories under 0755 or 0555 parents with
  umask 022, 0640/0750 under a 0750 parent. A directory keeps its parent's setgid bit. The top
  of an install that is new (a new store's root, a first ``index/``) takes no sibling's mode.

Owner and group are set before the mode (a chown by root clears setuid/setgid bits), on the
open descriptor where there is one, never following a link. Where the user may not give a file
away (not root, or a filesystem without owners), the owner stays the running user and the group
is set when allowed; nothing fails for it.
"""
from __future__ import annotations

import errno
import os
import stat
from functools import lru_cache
from pathlib import Path

#: errors of a chown the running user or the filesystem does not allow: the entry keeps its owner
_NOT_ALLOWED = (errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EROFS)


@lru_cache(maxsize=1)
def _umask() -> int:
    """The process umask, read without changing it (two threads may be installing at once)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _lstat(path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _kind(name: str, is_dir: bool):
    """Which siblings a new entry takes its mode from: any directory, or files whose name is as
    many digits (a CommitLog, ConsumeQueue or IndexFile series); None: no sibling rule."""
    if is_dir:
        return "dir"
    return ("digits", len(name)) if name.isdigit() else None


def _sibling_mode(directory, name: str, is_dir: bool, cache: dict | None) -> int | None:
    """The mode of the last entry (by name) of ``name``'s kind in ``directory``, ``name`` itself
    left out; None when there is none. Only that entry is stat'ed."""
    kind = _kind(name, is_dir)
    if kind is None or directory is None:
        return None
    key = os.fspath(directory)
    entries = None if cache is None else cache.get(key)
    if entries is None:
        try:
            with os.scandir(key) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            entries = []
        if cache is not None:
            cache[key] = entries
    for e in reversed(entries):
        if e.name == name or ".rmqtool-" in e.name or ".backup-" in e.name:
            continue                      # itself; rmqtool's own builds and backups are no model
        try:
            if e.is_symlink() or _kind(e.name, e.is_dir(follow_symlinks=False)) != kind:
                continue
            if not is_dir and not e.is_file(follow_symlinks=False):
                continue
            return stat.S_IMODE(e.stat(follow_symlinks=False).st_mode)
        except OSError:
            continue
    return None


def new_entry(parent, name: str, is_dir: bool, siblings=None, cache: dict | None = None) -> tuple[int, int, int]:
    """(uid, gid, mode) for a new entry ``name`` created in the directory ``parent``;
    ``siblings``: the store's directory whose entries of the same kind set the mode (None: no
    sibling rule)."""
    pst = os.stat(parent)
    pmode = stat.S_IMODE(pst.st_mode)
    mode = _sibling_mode(siblings, name, is_dir, cache)
    if mode is None:
        if is_dir:
            mode = (0o777 & ~_umask() & (pmode | 0o700)) | (pmode & stat.S_ISGID)
        else:
            mode = 0o666 & ~_umask() & (pmode | 0o600)
    return pst.st_uid, pst.st_gid, mode


def wanted(path, old: os.stat_result | None, siblings=None, cache: dict | None = None,
           is_dir: bool = False) -> tuple[int, int, int]:
    """(uid, gid, mode) the file or directory ``path`` should have: those of ``old`` (the stat of
    what it replaces) when it is of the same type, else a new entry's in ``path``'s directory."""
    path = Path(path)
    if old is not None and not stat.S_ISLNK(old.st_mode) and stat.S_ISDIR(old.st_mode) == is_dir:
        return old.st_uid, old.st_gid, stat.S_IMODE(old.st_mode)
    return new_entry(path.parent, path.name, is_dir, siblings, cache)


def apply(path, uid: int, gid: int, mode: int, fd: int | None = None, have: os.stat_result | None = None) -> None:
    """Set owner, group and (``mode`` >= 0) mode of ``path`` (or of its open descriptor ``fd``),
    only what differs; a chown the user or filesystem does not allow is left out."""
    if have is None:
        have = os.fstat(fd) if fd is not None else os.lstat(path)
    if (have.st_uid, have.st_gid) != (uid, gid):
        target = fd if fd is not None else path
        kw = {} if fd is not None else {"follow_symlinks": False}
        try:
            os.chown(target, uid, gid, **kw)
        except OSError as exc:
            if exc.errno not in _NOT_ALLOWED:
                raise
            try:
                os.chown(target, -1, gid, **kw)       # a group the user belongs to
            except OSError as exc2:
                if exc2.errno not in _NOT_ALLOWED:
                    raise
        have = os.fstat(fd) if fd is not None else os.lstat(path)   # a chown may clear setgid
    if mode >= 0 and not stat.S_ISLNK(have.st_mode) and stat.S_IMODE(have.st_mode) != mode:
        if fd is not None:
            os.fchmod(fd, mode)
        else:
            os.chmod(path, mode)


def inherit(path, like=None, fd: int | None = None, siblings=None, mode: bool = True) -> None:
    """Give ``path`` (or its open descriptor ``fd``) the owner, group and mode of ``like`` (the
    entry it replaces), or, when ``like`` is None or missing, those of a new entry in its
    directory (module docstring). ``mode=False``: owner and group only (a build directory
    still being written into)."""
    _settle(Path(path), None if like is None else Path(like), siblings, None, fd=fd, mode=mode)


def settle_tree(build, target) -> None:
    """Before ``build`` (a directory or one file) replaces ``target``: give ``build`` and every
    entry below it what the entry at the same path under ``target`` has, or, for one that is
    new, what a new entry gets (siblings looked up in ``target``'s directories). Top-down, so a
    new entry's directory is settled before it."""
    build, target = Path(build), Path(target)
    cache: dict = {}
    _settle(build, target, None, cache)             # a new top: no siblings (it may sit anywhere)
    if not os.path.isdir(build) or os.path.islink(build):
        return
    for dirpath, dirnames, filenames in os.walk(build):
        rel = os.path.relpath(dirpath, build)
        old_dir = target if rel == "." else target / rel
        for name in dirnames + filenames:
            _settle(Path(dirpath) / name, old_dir / name, old_dir, cache)


def open_file(path, flags: int) -> int:
    """``os.open(path, flags | O_CREAT, 0o644)``; a file this creates is given, on its descriptor
    and before anything is written into it, a new entry's owner, group and mode (siblings of its
    kind in its directory). An existing file is left as it is."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return os.open(path, flags | os.O_CREAT, 0o644)
    try:
        inherit(path, fd=fd, siblings=path.parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


def makedirs(path) -> None:
    """``mkdir -p``: each directory this creates is given a new entry's owner, group and mode
    (the last sibling directory's, else derived from its parent)."""
    path = Path(path)
    if path.is_dir():
        return
    makedirs(path.parent)
    try:
        path.mkdir()
    except FileExistsError:
        if path.is_dir():
            return
        raise
    inherit(path, siblings=path.parent)


def _settle(path: Path, like: Path | None, siblings: Path | None, cache: dict | None,
            fd: int | None = None, mode: bool = True) -> None:
    have = os.fstat(fd) if fd is not None else os.lstat(path)
    old = _lstat(like) if like is not None else None
    if stat.S_ISLNK(have.st_mode):                  # a link has no mode: its owner only
        src = old if old is not None and stat.S_ISLNK(old.st_mode) else os.stat(path.parent)
        apply(path, src.st_uid, src.st_gid, -1, have=have)
        return
    if old is not None and (old.st_dev, old.st_ino) == (have.st_dev, have.st_ino):
        return                                      # carried over by hard link: it is the original
    uid, gid, m = wanted(path, old, siblings, cache, is_dir=stat.S_ISDIR(have.st_mode))
    apply(path, uid, gid, m if mode else -1, fd=fd, have=have)
