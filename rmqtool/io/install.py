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
``built``, ``journal``, ``exchanged``, ``moved``; for ``write`` also ``staged``,
``mid-file`` and ``backup``: its backup's manifest written, the whole old files not yet
removed, ``rmqtool.io.writebackup``; ``write --undo``: ``undo``, after a file is put back),
the process SIGKILLs itself there.
"""
from __future__ import annotations

import ctypes
import datetime as dt
import errno
import json
import os
import shutil
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path

from rmqtool.io import ownership, storage, writeback
from rmqtool.io.fileio import not_regular, open_regular, read_file, refuse_not_regular
from rmqtool.errors import RefusedError, RmqError
from rmqtool.io.topicpath import queue_selected

CRASH_ENV = "RMQTOOL_CRASH_AT"
CRASH_STEPS = ("build", "built", "journal", "exchanged", "moved")
WRITE_CRASH_STEPS = ("staged", "mid-file") + CRASH_STEPS + ("backup",)
TMP_MARK = ".rmqtool-tmp-"
BACKUP_MARK = ".backup-"
JOURNAL_SUFFIX = ".rmqtool-install"
#: the most of an install journal read back (a few paths; anything larger is not rmqtool's)
MAX_JOURNAL_SIZE = 1 << 20
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def pwrite_all(fd: int, data, pos: int, start_writeback: bool = False) -> None:
    """Write all of ``data`` at ``pos`` (pwrite may write less than asked). ``start_writeback``:
    the bytes are a build's, to be made durable before its install: their writeback starts now
    (``writeback.written``), so the fsync before the install finds little left to write."""
    view = memoryview(data).cast("B")
    first, total = pos, len(view)
    while view:
        done = os.pwrite(fd, view[:1 << 30], pos)
        view, pos = view[done:], pos + done
    if start_writeback and total:
        writeback.written(fd, first, total)


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
        writeback.raise_deferred(fd)         # an early flush's failure, which this fsync cannot see
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
    stray = journal.with_name(journal.name + ".part")
    if stray.exists():                      # a journal write that never finished: no swap began
        stray.unlink()
        notes.append(f"removed an unfinished install journal {stray.name}")
    if journal.exists():
        try:
            j = json.loads(read_file(journal, max_length=MAX_JOURNAL_SIZE,    # a FIFO: refused (exit 3)
                                     what="install journal"))
            tmp, backup, old_ino = Path(j["tmp"]), Path(j["backup"]), j.get("old_ino")
        except (ValueError, KeyError, TypeError):
            # empty or torn (written in place by older versions, e.g. on a full disk): the swap
            # starts only once the journal is complete, so the target is the original tree
            notes.append(f"removed an incomplete install journal {journal.name}: the swap never began, "
                         f"{target.name} is the original")
        else:
            notes.append(_finish_swap(target, tmp, backup, old_ino))
        journal.unlink()
        fsync_path(parent)
    prefix = target.name + TMP_MARK
    for entry in sorted(parent.iterdir()):
        if entry.name.startswith(prefix) and (entry.is_dir() or entry.is_file()):
            remove_build(entry)
            notes.append(f"removed an unfinished build left by a crash: {entry.name}")
    if notes:
        fsync_path(parent)
    return notes


def _finish_swap(target: Path, tmp: Path, backup: Path, old_ino) -> str:
    """Complete or undo the swap a complete journal describes; say what was done."""
    parent = target.parent
    target_ino = target.stat().st_ino if target.exists() else None
    if old_ino is not None and target_ino == old_ino:
        # the swap never happened: target is the old tree, tmp an unused new tree
        if tmp.exists():
            remove_build(tmp)
        return f"interrupted install before the swap: kept the original {target}, removed the unused build {tmp.name}"
    if target_ino is None and tmp.exists():
        # rename fallback died between its two renames: the old tree is at backup
        os.rename(tmp, target)
        fsync_path(parent)
        return f"interrupted install: moved the new tree {tmp.name} into place"
    if tmp.exists():
        os.rename(tmp, backup)
        fsync_path(parent)
        return f"interrupted install after the swap: the originals were moved to {backup.name}"
    return f"interrupted install had completed; originals are in {backup.name}"


def remove_build(path: Path) -> None:
    """Remove a build (or what a write's backup no longer needs): a tree, or one file."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def discard_build(build: Path, keep_dir: bool) -> None:
    """Remove a build that will not be installed (``keep_dir``: empty the --output directory it
    was made in, keep the directory)."""
    if not keep_dir:
        remove_build(build)
        return
    for child in build.iterdir():
        remove_build(child)


def new_build_dir(target: Path) -> Path:
    """A new build directory beside ``target``, owned like ``target`` (its mode is settled by
    ``install``: the build must stay writable while it is being made)."""
    tmp = target.parent / f"{target.name}{TMP_MARK}{utc_stamp()}"
    tmp.mkdir(parents=False)
    ownership.inherit(tmp, like=target, mode=False)
    return tmp


def install(target: Path, tmp: Path, drop_empty_backup: bool = False) -> InstallResult:
    """Steps 1 (fsync) to 5 for a tree already built in ``tmp`` (see module docstring).
    ``drop_empty_backup``: an original that was an empty directory is removed, not kept."""
    crash_point("built")
    ownership.settle_tree(tmp, target)      # owners and modes of what it replaces, before it is made durable
    if tmp.is_dir():
        fsync_tree(tmp, skip_linked=True)
        files = sum(len(f) for _, _, f in os.walk(tmp))
        size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(tmp) for f in fs)
    else:                                   # one file (the timer wheel): the same protocol
        fsync_path(tmp)
        files, size = 1, os.lstat(tmp).st_size
    fsync_path(target.parent)
    if not target.exists():
        os.rename(tmp, target)
        fsync_path(target.parent)
        return InstallResult(str(target), None, files, size)
    backup = target.parent / f"{target.name}{BACKUP_MARK}{utc_stamp()}"
    journal = journal_path(target)
    try:
        write_synced(journal, json.dumps({"tmp": str(tmp), "backup": str(backup),
                                           "old_ino": target.stat().st_ino}))
    except BaseException:                   # nothing swapped: the build goes, the original stays
        remove_build(tmp)
        raise
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
    if drop_empty_backup and backup.is_dir() and not any(backup.iterdir()):
        backup.rmdir()
        backup = None
    fsync_path(target.parent)
    return InstallResult(str(target), str(backup) if backup else None, files, size)


def write_synced(path: Path, text) -> None:
    """Write ``path`` whole or not at all: a temporary file, fsynced, renamed over it (the caller
    fsyncs the directory). A crash or a full disk leaves the old file or none, never a torn one.
    ``text``: a str, bytes, or an iterable of bytes written one after another."""
    part = path.with_name(path.name + ".part")
    chunks = [text.encode()] if isinstance(text, str) else [text] if isinstance(text, (bytes, bytearray)) else text
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            ownership.inherit(part, like=path, fd=fd)
            for chunk in chunks:
                data = memoryview(chunk)
                while data:
                    data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def open_build(target: Path, output: Path | None) -> tuple[Path, list[str]]:
    """Where a rebuild of ``target`` writes: a new build beside it, after finishing or undoing what
    a crashed install left there (the notes of ``recover_leftovers``); or the ``--output``
    directory (``prepare_output``), the store untouched."""
    if output is not None:
        return prepare_output(output), []
    notes = recover_leftovers(target)
    return new_build_dir(target), notes


def prepare_output(output: Path) -> Path:
    """``--output DIR``: must not exist, or be an empty directory."""
    if output.exists():
        if not output.is_dir() or any(output.iterdir()):
            raise RefusedError("output directory exists and is not empty", output)
    else:
        output.mkdir(parents=True)
    return output


def link_or_copy(src: Path, dst: Path) -> None:
    """Carry an unchanged file into the new tree: hard link, else copy (from object storage: copy)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if storage.is_remote(src):
        dst.write_bytes(src.read_bytes())
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_tree(src: Path, dst: Path) -> int:
    """Mirror ``src`` into the existing directory ``dst``: directories recreated, regular files
    hard-linked (copied where linking fails). Returns the number of entries carried. A mount
    point inside ``src`` is refused: its files cannot be linked, and the swap would leave the
    mount behind with the original. A symlink is refused too (``write`` refuses a store that
    holds one before staging it): staged, it would be written through, and the old tree kept
    as the backup would share it. So is a FIFO, socket or device (exit 3, naming it): the new
    store would silently lack it."""
    n = 0
    dev = os.stat(src).st_dev
    with os.scandir(src) as it:
        for e in it:
            target = dst / e.name
            if e.is_symlink():
                raise RefusedError(f"a symlink inside the store (to {os.readlink(e.path)!r}) cannot be "
                                   "staged: rmqtool never writes through links", e.path)
            elif e.is_dir(follow_symlinks=False):
                if e.stat(follow_symlinks=False).st_dev != dev:
                    raise RefusedError("a mount point inside the store cannot be staged for a "
                                       "crash-safe swap", e.path)
                target.mkdir()
                ownership.inherit(target, like=e.path, mode=False)     # its mode once the stage is built
                n += link_tree(Path(e.path), target)
            elif e.is_file(follow_symlinks=False):
                try:
                    os.link(e.path, target)
                except OSError:
                    shutil.copy2(e.path, target)
                    ownership.inherit(target, like=e.path)
            else:                           # a FIFO, socket or device: never dropped from the new store
                raise refuse_not_regular(e.path, not_regular(e.stat(follow_symlinks=False).st_mode))
            n += 1
    return n


def make_private(path: Path) -> None:
    """Before writing into a staged file: if it is a hard link shared with the original tree,
    replace it by a private copy (holes kept), so the original never changes."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    if st.st_nlink <= 1 and stat.S_ISREG(st.st_mode):
        return
    tmp = path.with_name(path.name + ".rmqtool-copy")
    copy_sparse(path, tmp)                  # owned like the original, with its mode
    os.rename(tmp, path)


_FICLONE = 0x40049409


def copy_sparse(src: Path, dst: Path) -> None:
    """Copy a file: a reflink where the filesystem can, else only its data extents
    (SEEK_DATA/SEEK_HOLE), so a preallocated-by-truncate file costs only what it holds. The
    copy gets the owner, group and mode of ``src`` before any byte is written."""
    import fcntl
    fin = open_regular(src)             # a directory, FIFO or device: one line naming it, never read
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            ownership.inherit(dst, like=src, fd=fout)
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
            pwrite_all(fout, data, pos)
            n = len(data)
        pos += n


# --- symlinks inside a store ---------------------------------------------------------------------
def symlinks_under(root: Path) -> list[tuple[Path, str]]:
    """Every symlink below ``root`` (``root`` itself is followed if it is one), with its target
    as stored, in path order; links are listed, never followed."""
    found: list[tuple[Path, str]] = []

    def walk(d: str) -> None:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return
        for e in entries:
            if e.is_symlink():
                try:
                    found.append((Path(e.path), os.readlink(e.path)))
                except OSError:                       # removed since listing
                    pass
            elif e.is_dir(follow_symlinks=False):
                walk(e.path)

    walk(os.fspath(root))
    return found


def copy_link(src: Path, dst: Path) -> None:
    """Carry a symlink into a new tree as the same symlink (its target is never followed)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.readlink(src), dst)


def _queue_id(name: str) -> int | None:
    try:
        return int(name)
    except ValueError:
        return None


def _topic_selected(only, topic: str) -> bool:
    return only is None or any(t == topic for t, _ in only)


def _linked_selection(target: Path, only, rebuilt) -> list[tuple[str, str]]:
    """Symlinks a ConsumeQueue rebuild would have to write through or replace, as (path relative
    to ``target``, link target): ``target`` itself (rel ""); a linked topic directory, or linked
    queue directory, in the selection that the rebuild writes queues into (``rebuilt``: the
    (topic, queue id) pairs it writes; None: every selected one); any link inside a selected
    queue directory. Object stores have no links."""
    if storage.is_remote(target):
        return []
    if os.path.islink(target):
        return [("", os.readlink(target))]
    out = []
    try:
        topics = sorted(os.scandir(target), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return out
    for t in topics:
        if not _topic_selected(only, t.name):
            continue
        if t.is_symlink():
            if rebuilt is None or any(topic == t.name for topic, _ in rebuilt):
                out.append((t.name, os.readlink(t.path)))
            continue
        if not t.is_dir(follow_symlinks=False):
            continue
        for q in sorted(os.scandir(t.path), key=lambda e: e.name):
            if not queue_selected(only, t.name, q.name):
                continue
            rel = f"{t.name}/{q.name}"
            if q.is_symlink():
                if rebuilt is None or (t.name, _queue_id(q.name)) in rebuilt:
                    out.append((rel, os.readlink(q.path)))
            elif q.is_dir(follow_symlinks=False):
                out += [(f"{rel}/{p.relative_to(q.path)}", dest) for p, dest in symlinks_under(Path(q.path))]
    return out


def _refuse(target: Path, linked: list[tuple[str, str]]) -> None:
    if not linked:
        return
    rel, dest = linked[0]
    where = target / rel if rel else target
    what = "the consumequeue directory" if not rel else f"consumequeue/{rel}"
    more = f" (and {len(linked) - 1} more)" if len(linked) > 1 else ""
    raise RefusedError(f"{what} is a symlink to {dest!r}{more}; rmqtool neither rebuilds through a link "
                       "nor replaces one: rebuild the other topics with --topic, or replace the link by "
                       "the directory it points to", where)


def refuse_linked_topics(target: Path, only=None) -> None:
    """Before the CommitLog walk of a ConsumeQueue rebuild of ``only`` (None: every topic; else
    ``{(topic, queue id or None)}`` as in ``rebuild_consumequeue``): refuse (``RefusedError``,
    exit 3) what is refused whatever the walk finds: ``target`` (the ``consumequeue``
    directory) is a symlink; a topic or queue named by ``only`` is a linked directory; a
    selected queue directory holds a link. A linked topic of a full rebuild is decided by
    ``carried_files`` once the rebuilt queues are known."""
    target = storage.path(target)
    linked = _linked_selection(target, only, None)
    if only is None:
        linked = [(rel, dest) for rel, dest in linked if rel == "" or rel.count("/") >= 2]
    _refuse(target, linked)


@dataclass
class CarryOver:
    """What a ConsumeQueue rebuild does with the files under ``target`` (paths relative to it)."""
    replaced: list[str]        # regular files of selected queues: the rebuild replaces them
    files: list[str]           # regular files carried over: ``link_or_copy(target/rel, build/rel)``
    links: list[str]           # symlinks carried over as links: ``copy_link(target/rel, build/rel)``


def carried_files(target: Path, only=None, rebuilt=None) -> CarryOver:
    """Split the tree under ``target`` (the ``consumequeue`` directory) for a rebuild of ``only``
    (see ``refuse_linked_topics``) that writes the queues ``rebuilt`` (a set of (topic, queue
    id); None: every selected queue), following no symlink: files of selected queues
    (``<topic>/<queue id>/<file>``) are replaced; every other regular file is carried over;
    every symlink not refused (a linked topic or queue directory the rebuild writes nothing
    into, a link outside the selected queues) is carried over as the link itself, so the new
    tree points where the old one did and nothing behind a link is read, written or dropped.
    Refuses (exit 3) a link the rebuild would write through or replace."""
    target = storage.path(target)
    _refuse(target, _linked_selection(target, only, rebuilt))
    out = CarryOver([], [], [])
    remote = storage.is_remote(target)
    for dirpath, dirnames, filenames in storage.walk(target) if remote else os.walk(target):
        rel_dir = Path(str(dirpath.relative_to(target)) if remote else Path(dirpath).relative_to(target))
        parts = rel_dir.parts
        for name in sorted(dirnames):
            if not remote and os.path.islink(os.path.join(dirpath, name)):   # os.walk never descends into them
                out.links.append(str(rel_dir / name))
        for name in sorted(filenames):
            rel = str(rel_dir / name)
            if not remote and os.path.islink(os.path.join(dirpath, name)):
                out.links.append(rel)
            elif len(parts) == 2 and queue_selected(only, parts[0], parts[1]):
                out.replaced.append(rel)
            else:
                out.files.append(rel)
    return out


def refuse_links_in(target: Path) -> None:
    """Refuse (exit 3) replacing ``target`` (e.g. the ``index`` directory) when it is a symlink or
    holds one: the rebuild would drop the link's files from the new tree. Object stores have none."""
    if storage.is_remote(target):
        return
    target = Path(target)
    if os.path.islink(target):
        raise RefusedError(f"{target.name} is a symlink to {os.readlink(target)!r}; rmqtool does not "
                           "replace a linked directory", target)
    links = symlinks_under(target)
    if links:
        path, dest = links[0]
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        raise RefusedError(f"a symlink to {dest!r}{more} inside {target.name}/; rmqtool neither follows nor "
                           "drops links: replace it by the file it points to", path)


def copied_cost(tree: str | Path) -> tuple[int, int]:
    """(files, bytes on disk) of the files in ``tree`` that share no inode with another path
    (a backup's copies: a written-to file is copied whole, every other file is a hard link)."""
    files = used = 0
    for dirpath, _, names in os.walk(tree):
        for name in names:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_nlink == 1:
                files += 1
                used += st.st_blocks * 512
    return files, used
