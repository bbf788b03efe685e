"""A write's backup: the bytes ``write`` changed, as they were, and how to put them back.

``write`` swaps its stage in with ``rmqtool.io.install``; the old root lands in
``<root>.backup-<UTC ts>``, holding whole copies of the files the run wrote to (and hard links of
the others). ``shrink`` turns that directory into a backup proportional to the change:

- ``rmqtool-write-backup.json`` (the manifest, fsynced) lists every file the write changed or
  created and every directory it created;
- ``rmqtool-saved.bin`` holds the old bytes of the changed ranges that were not all zeros;

then removes everything else from it. ``restore`` (``rmqtool write STORE --undo BACKUP``) puts
the old bytes back, truncates each file to its old length, deletes the files and directories
the write created, after checking that the store still holds what the write left.

Manifest (``version`` 1)::

    {"format": "rmqtool-write-backup", "version": 1, "store": "/abs/root", "saved": "rmqtool-saved.bin",
     "files": [{"path": "commitlog/00000000001073741824", "existed": true, "size": 1073741824,
                "new_size": 1073741824, "old_crc32": 0, "new_crc32": 123,
                "ranges": [{"offset": 5000, "length": 700, "saved": "zeros"},
                           {"offset": 0, "length": 40, "saved": {"at": 0}}]}],
     "new_dirs": ["consumequeue/T/3"]}

A range is what the write wrote: ``offset`` and ``length`` in the file. ``saved`` says what the
file held there before, up to its old length ``size``: ``"zeros"`` (a hole, or unwritten space),
``{"at": N}`` (the bytes are at ``N`` in the saved file, ``min(length, size - offset)`` of them), or
``"none"`` (the range starts at or past ``size``, or the file did not exist: ``existed`` false).
``new_crc32`` is the CRC32 of the ranges' bytes as the write left them (``new_size`` long), and
``old_crc32`` that of the old bytes (a restore that was interrupted is finished by running it again).
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from rmqtool.errors import RefusedError, RmqError, UsageError
from rmqtool.io import install as inst

MANIFEST = "rmqtool-write-backup.json"
SAVED = "rmqtool-saved.bin"
FORMAT = "rmqtool-write-backup"
VERSION = 1
CHUNK = 8 << 20
#: the granularity at which saved bytes are told from zeros (a page)
ZERO_BLOCK = 4096
#: the longest manifest ``restore`` reads (a write of millions of keys lists its slot ranges)
MAX_MANIFEST = 256 << 20


def merge(ranges) -> list[tuple[int, int]]:
    """(offset, length) pairs -> sorted, non-overlapping, adjacent ones joined."""
    out: list[list[int]] = []
    for lo, n in sorted((int(o), int(n)) for o, n in ranges if n > 0):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], lo + n)
        else:
            out.append([lo, lo + n])
    return [(lo, hi - lo) for lo, hi in out]


def _pieces(fd: int, lo: int, hi: int, path):
    """The bytes of [lo, hi) of an open file, CHUNK at a time (a short file is an error)."""
    while lo < hi:
        data = os.pread(fd, min(CHUNK, hi - lo), lo)
        if not data:
            raise RmqError("file ended inside a range the write changed", path, lo)
        yield lo, data
        lo += len(data)


def _crc(fd: int, ranges, size: int, path) -> int:
    crc = 0
    for offset, length in ranges:
        for _, data in _pieces(fd, offset, min(offset + length, size), path):
            crc = zlib.crc32(data, crc)
    return crc


def _zero_runs(data: bytes, block: int = ZERO_BLOCK):
    """(start, end, all zeros?) runs of ``data``, told apart ``block`` bytes at a time."""
    import numpy as np
    n = len(data)
    if n == 0:
        return
    full = n // block * block
    flags = np.frombuffer(data, np.uint8, full).reshape(-1, block).any(axis=1) if full else np.zeros(0, bool)
    if full < n:
        flags = np.append(flags, data.count(0, full) != n - full)
    cuts = np.flatnonzero(flags[1:] != flags[:-1]) + 1
    starts = np.r_[0, cuts]
    ends = np.r_[cuts, len(flags)]
    for a, b in zip(starts.tolist(), ends.tolist()):
        yield a * block, min(b * block, n), not bool(flags[a])


def _tree(root: Path) -> tuple[dict[str, os.stat_result], set[str]]:
    """Regular files (rel path -> lstat) and directories (rel paths) below ``root``."""
    files, dirs = {}, set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in dirnames:
            dirs.add(os.path.normpath(os.path.join(rel_dir, name)))
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if os.path.isfile(os.path.join(dirpath, name)) and not os.path.islink(os.path.join(dirpath, name)):
                files[os.path.normpath(os.path.join(rel_dir, name))] = st
    return files, dirs


def shrink(backup: Path, root: Path, written: dict[str, list[tuple[int, int]]]) -> tuple[int, int]:
    """Turn ``backup`` (the old root, moved aside by the install) into the manifest form.
    ``written``: for each file of ``root`` (relative path) the (offset, length) ranges the write
    wrote; a changed file it does not name is saved whole. Returns (files listed, bytes on disk
    of the backup). A crash before the manifest is complete leaves the whole old root."""
    backup, root = Path(backup), Path(root)
    old_files, old_dirs = _tree(backup)
    new_files, new_dirs = _tree(root)
    entries: list[dict] = []
    saved_at = [0]

    def saved_chunks():
        for rel in sorted(set(new_files) | set(old_files)):
            old, new = old_files.get(rel), new_files.get(rel)
            if old is not None and new is not None and os.path.samestat(old, new):
                continue                                  # a hard link: the write did not touch it
            size = old.st_size if old is not None else 0
            new_size = new.st_size if new is not None else 0
            ranges = merge(written.get(rel) or [(0, max(size, new_size))])
            entry = {"path": rel, "existed": old is not None, "size": size, "new_size": new_size,
                     "ranges": [], "old_crc32": 0, "new_crc32": 0}
            if new is not None:
                with open(root / rel, "rb") as fh:
                    entry["new_crc32"] = _crc(fh.fileno(), ranges, new_size, root / rel)
            fd = os.open(backup / rel, os.O_RDONLY) if old is not None else -1
            try:
                crc = 0
                for offset, length in ranges:
                    end = min(offset + length, size)
                    if fd < 0 or offset >= end:
                        entry["ranges"].append({"offset": offset, "length": length, "saved": "none"})
                        continue
                    parts = []                  # (zeros?, first byte, where saved) runs of the old bytes
                    for at, data in _pieces(fd, offset, end, backup / rel):
                        crc = zlib.crc32(data, crc)
                        for lo, hi, zeros in _zero_runs(data):
                            if not zeros:
                                yield memoryview(data)[lo:hi]
                            if not parts or parts[-1][0] != zeros:
                                parts.append((zeros, at + lo, saved_at[0]))
                            if not zeros:
                                saved_at[0] += hi - lo
                    for k, (zeros, at, pos) in enumerate(parts):
                        stop = parts[k + 1][1] if k + 1 < len(parts) else offset + length
                        entry["ranges"].append({"offset": at, "length": stop - at,
                                                "saved": "zeros" if zeros else {"at": pos}})
                entry["old_crc32"] = crc
            finally:
                if fd >= 0:
                    os.close(fd)
            entries.append(entry)

    inst.write_synced(backup / SAVED, saved_chunks())
    manifest = {"format": FORMAT, "version": VERSION, "store": str(root), "saved": SAVED,
                "files": entries, "new_dirs": sorted(new_dirs - old_dirs, key=lambda d: (-d.count(os.sep), d))}
    inst.write_synced(backup / MANIFEST, json.dumps(manifest, separators=(",", ":")))
    inst.fsync_path(backup)
    inst.crash_point("backup")
    for child in os.listdir(backup):                    # the whole old files: no longer needed
        if child not in (MANIFEST, SAVED):
            inst.remove_build(backup / child)
    inst.fsync_path(backup)
    used = sum(os.lstat(backup / n).st_blocks * 512 for n in os.listdir(backup))
    return len(entries), used


# --- restore ------------------------------------------------------------------------------------
def read_manifest(backup: Path) -> dict:
    path = Path(backup) / MANIFEST
    if not path.is_file():
        if Path(backup).is_dir() and (Path(backup) / "commitlog").is_dir():
            raise UsageError("this backup is a whole store root (no manifest): it is the store as it was; "
                             "move it into place instead", backup)
        raise UsageError(f"not a write backup: no {MANIFEST}", backup)
    size = path.stat().st_size
    if size > MAX_MANIFEST:
        raise UsageError(f"manifest of {size} bytes is longer than {MAX_MANIFEST}", path)
    try:
        m = json.loads(path.read_bytes())
        if m.get("format") != FORMAT or m.get("version") != VERSION or not isinstance(m.get("files"), list):
            raise ValueError(f"not a {FORMAT} manifest of version {VERSION}")
        for f in m["files"]:
            _check_rel(f["path"])
            int(f["size"]), int(f["new_size"]), bool(f["existed"])
            for r in f["ranges"]:
                if int(r["offset"]) < 0 or int(r["length"]) < 0:
                    raise ValueError("a negative range")
        for d in m.get("new_dirs", []):
            _check_rel(d)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"unreadable manifest: {exc}", path) from None
    return m


def _check_rel(rel) -> None:
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or ".." in Path(rel).parts:
        raise ValueError(f"path {rel!r} is not inside the store")


def _state(store: Path, f: dict) -> str:
    """'new' (as the write left it), 'old' (already restored) or 'other'."""
    path = store / f["path"]
    ranges = [(int(r["offset"]), int(r["length"])) for r in f["ranges"]]
    if not path.exists():
        return "old" if not f["existed"] else "other"
    if not path.is_file() or path.is_symlink():
        return "other"
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size != f["new_size"] and not (f["existed"] and size == f["size"]):
            return "other"
        crc = _crc(fh.fileno(), ranges, size, path)       # the ranges read once, whichever it matches
    if size == f["new_size"] and crc == f["new_crc32"]:
        return "new"
    if f["existed"] and size == f["size"] and crc == f["old_crc32"]:
        return "old"
    return "other"


def restore(backup: Path, store: Path | None = None) -> dict:
    """Put the store back as it was before the write ``backup`` was made by (module docstring).
    Refused (exit 3) when a file holds neither what the write left nor what it replaced (the
    broker or another run changed it since); nothing is changed then. Runs again after a crash."""
    from rmqtool.io.storelock import WriterLock
    backup = Path(backup)
    m = read_manifest(backup)
    store = Path(os.path.realpath(store if store is not None else m["store"]))
    if not store.is_dir():
        raise UsageError("no store directory here to restore", store)
    lock = WriterLock(store, "rmqtool write --undo").acquire()
    try:
        lock.take_store_lock()
        states = [(f, _state(store, f)) for f in m["files"]]
        for f, state in states:
            if state == "other":
                raise RefusedError("holds neither what the write left nor what it replaced (changed since "
                                   "the write, e.g. by the broker): not restored, nothing changed",
                                   store / f["path"])
        saved = os.open(backup / m.get("saved", SAVED), os.O_RDONLY) if any(s == "new" for _, s in states) else -1
        rewritten = removed = 0
        try:
            for f, state in states:
                if state != "new":
                    continue
                path = store / f["path"]
                if not f["existed"]:
                    path.unlink()
                    removed += 1
                    continue
                _put_back(path, f, saved, backup)
                rewritten += 1
                inst.crash_point("undo")          # test hook: killed with files left to put back
        finally:
            if saved >= 0:
                os.close(saved)
        dirs = 0
        for d in m.get("new_dirs", []):                # deepest first
            try:
                (store / d).rmdir()
                dirs += 1
            except FileNotFoundError:
                pass
            except OSError:
                pass                                    # holds files the write did not make: kept
        for d in {(store / f["path"]).parent for f in m["files"]} | {store}:
            if d.is_dir():
                inst.fsync_path(d)
    finally:
        lock.release()
    return {"store": str(store), "backup": str(backup), "files_rewritten": rewritten, "files_removed": removed,
            "directories_removed": dirs,
            "already_restored": sum(1 for _, s in states if s == "old")}


def _put_back(path: Path, f: dict, saved: int, backup: Path) -> None:
    size = int(f["size"])
    fd = os.open(path, os.O_RDWR)
    try:
        for r in f["ranges"]:
            offset, end = int(r["offset"]), min(int(r["offset"]) + int(r["length"]), size)
            how = r["saved"]
            pos = offset
            while pos < end:
                n = min(CHUNK, end - pos)
                if how == "zeros":
                    data = bytes(n)
                elif isinstance(how, dict):
                    data = os.pread(saved, n, int(how["at"]) + pos - offset)
                    if len(data) != n:
                        raise UsageError("the saved bytes end early", backup / SAVED, int(how["at"]) + pos - offset)
                else:
                    break
                inst.pwrite_all(fd, data, pos)
                pos += n
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
