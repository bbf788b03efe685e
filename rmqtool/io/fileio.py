"""Bounded, read-only file access: pread with explicit limits, never a long-lived mmap.

A file that shrinks, grows or vanishes while we read it gives a ``FileChangedError``
naming the file and offset, never a SIGBUS or a short read taken for data.
"""
from __future__ import annotations

import errno
import os
import stat
from functools import lru_cache
from pathlib import Path


from rmqtool.io import throttle
from rmqtool.io.storage import RemoteFile, is_remote
from rmqtool.errors import CorruptDataError, FileChangedError, RefusedError, StoreLayoutError, UnreadableError

#: read granularity for bulk scans
CHUNK_SIZE = 64 << 20
#: the window of the native scan of a local file (``scan.FileScan``'s default there; remote
#: objects keep CHUNK_SIZE, one ranged GET per window): small enough that the passes over a
#: batch after the scan (rebuild's dispatch, deep verify's record checks) find it in the CPU's
#: last-level cache, and that the pooled read buffers and columns are few pages to fault in.
#: rebuild all of 1M messages: CPU 4.47 s with 64 MiB windows, 3.80 s with 8 MiB (4 MiB the
#: same within noise); deep verify of 1 GiB: index keys 0.34 s -> 0.09-0.16 s; scan of 1 GiB to
#: record batches: 1.30-1.40 x crc32 with 64 MiB windows, 2.21-2.59 x with 8 MiB (fresh processes)
CACHE_WINDOW = 8 << 20
#: reads larger than this are capped at the file's current size before allocating
LARGE_READ = 1 << 20


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: a window's pieces are read by a second thread while the first scans those read
#: (``window_scan.read_and_take``): where this process has another CPU to itself. A pool worker
#: turns it off (``engines.interrupts.start_worker``): the pool already gives every CPU a walk.
READ_AHEAD = _cpus() > 1


def file_size(path) -> int:
    """Size of the file at a resolved location (a ``pathlib.Path``/local path, or a ``RemotePath``)."""
    if is_remote(path):
        with ReadOnlyFile(path) as fh:
            return fh.size()
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        raise FileChangedError("file vanished", path) from None
    except OSError as exc:
        raise UnreadableError(f"cannot stat: {exc.strerror}", path) from None


#: what a store file that is not a regular file is, by its ``st_mode`` type
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def not_regular(mode: int) -> str | None:
    """What a file of ``st_mode`` is when it is not a regular file ("a FIFO", ...); None for one."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a file")


def refuse_not_regular(path, what: str) -> RefusedError:
    """The one refusal of a store file the broker could not read as a file (exit 3)."""
    return RefusedError(f"is {what}, not a regular file; rmqtool reads only regular files (a FIFO or "
                        "device could block or never end): replace it by the file it stands for", path)


def require_regular(path, mode: int) -> None:
    """Raise for a file of ``st_mode`` (reached through ``path``) that is not a regular file: a
    directory is a layout error (exit 2), a FIFO, socket or device a refusal (exit 3)."""
    what = not_regular(mode)
    if what is None:
        return
    if what == "a directory":
        raise StoreLayoutError("is a directory, expected a file", path)
    if os.path.islink(path):
        what = f"a symbolic link to {what} ({os.path.realpath(path)})"
    raise refuse_not_regular(path, what)


def _dangling(path) -> RefusedError:
    return refuse_not_regular(path, f"a symbolic link to {os.readlink(path)!r} that leads nowhere")


def open_regular(path: Path) -> int:
    """Open a local file read-only, as the one place every read of a store file opens it.

    ``O_NONBLOCK``: opening a FIFO never waits for a writer; ``fstat`` on the descriptor then
    refuses (``RefusedError``, exit 3) anything that is not a regular file, before any read
    that could block. A symbolic link to a regular file is followed, as the broker's
    ``File``/``RandomAccessFile`` follow it; a dangling one is refused."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if os.path.islink(path):
            raise _dangling(path) from None
        raise FileChangedError("file vanished", path) from None
    except IsADirectoryError:
        raise StoreLayoutError("is a directory, expected a file", path) from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:            # a socket: open() never opens one
            try:
                mode = os.stat(path).st_mode
            except OSError:
                mode = None
            if mode is not None:
                require_regular(path, mode)
        raise UnreadableError(f"cannot open: {exc.strerror}", path) from None
    try:
        require_regular(path, os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


#: store files this process read through a symbolic link (path -> resolved target), in the order found
_FOLLOWED: dict[str, str] = {}


def followed_link(path) -> None:
    """Record that the store file ``path`` is a symbolic link read through (the CLI says so once)."""
    _FOLLOWED.setdefault(os.fspath(path), os.path.realpath(path))


def followed_links() -> list[tuple[str, str]]:
    """(path, resolved target) of every store file read through a symbolic link so far."""
    return list(_FOLLOWED.items())


def forget_followed_links() -> None:
    _FOLLOWED.clear()


#: what every command does with a store file that is a symbolic link to a regular file
READ_THROUGH = "read through it as the broker does"


def how_link_is_read(path) -> str:
    """What rmqtool does with the symbolic link ``path`` in a store: a link to a regular file is
    read through, as the broker does; any other link is not followed."""
    return READ_THROUGH if os.path.isfile(path) else "not followed"


def link_note(path, target: str | None = None) -> str:
    """What a command says of a store file that is a symbolic link it reads through."""
    return f"is a symbolic link to {target or os.path.realpath(path)}; {READ_THROUGH}"


def regular_size(path) -> int | None:
    """Size of a store file the broker reads by name, as its ``File`` API sees it: None when
    nothing is at ``path``; a symbolic link to a regular file is followed (and recorded,
    ``followed_links``); anything else there (FIFO, socket, device, dangling link) is refused
    (exit 3) rather than taken for an absent file, a directory is a layout error."""
    if is_remote(path):
        return path.stat().st_size if path.is_file() else None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise _dangling(path) from None
        return None
    except NotADirectoryError:
        return None
    except OSError as exc:
        raise UnreadableError(f"cannot stat: {exc.strerror}", path) from None
    require_regular(path, st.st_mode)
    if os.path.islink(path):
        followed_link(path)
    return st.st_size


def regular_file_present(path) -> bool:
    """Whether a store file the broker reads when present (checkpoint, config, ...) is there
    (``regular_size``: a FIFO or device is refused, never taken for an absent file)."""
    return regular_size(path) is not None


class ReadOnlyFile:
    """An open file descriptor used only with pread (a remote object: ranged reads). ``path`` is a
    resolved location: a ``RemotePath`` is read by ranged reads, anything else is a local path."""

    def __init__(self, path):
        self.remote = None
        self.fd = -1
        if is_remote(path):
            self.path = path
            self.remote = RemoteFile(path)
            return
        self.path = Path(path)
        self.fd = open_regular(self.path)

    def size(self) -> int:
        if self.remote is not None:
            return self.remote.size()
        return os.fstat(self.fd).st_size

    def read(self, pos: int, length: int, exact: bool = True) -> bytes:
        """Read ``length`` bytes at ``pos``; with ``exact`` a short read is an error."""
        if length <= 0:
            return b""
        if self.remote is not None:
            data = self.remote.read_at(pos, length)
            throttle.consume(len(data))
            if exact and len(data) < length:
                raise FileChangedError(
                    f"file shorter than expected (wanted {length} bytes, got {len(data)})",
                    self.path, pos + len(data))
            return data
        chunks, got = [], 0
        while got < length:
            want = min(length - got, 1 << 30)
            if want > LARGE_READ:        # pread allocates what is asked: never more than the file has
                want = min(want, max(self.size() - pos - got, LARGE_READ))
            try:
                part = os.pread(self.fd, want, pos + got)
            except OSError as exc:
                raise UnreadableError(f"read failed: {exc.strerror}", self.path, pos + got) from None
            if not part:
                break
            chunks.append(part)
            got += len(part)
            throttle.consume(len(part))
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if exact and len(data) < length:
            raise FileChangedError(
                f"file shorter than expected (wanted {length} bytes, got {len(data)})",
                self.path, pos + len(data))
        return data

    def read_into(self, view: memoryview, pos: int) -> None:
        """Fill ``view`` with the bytes at ``pos`` (exact: a short read is FileChangedError)."""
        want = len(view)
        if self.remote is not None:
            data = self.read(pos, want, exact=True)
            view[:want] = data
            return
        got = 0
        while got < want:
            try:
                n = os.preadv(self.fd, [view[got:]], pos + got)
            except OSError as exc:
                raise UnreadableError(f"read failed: {exc.strerror}", self.path, pos + got) from None
            if not n:
                raise FileChangedError(f"file shorter than expected (wanted {want} bytes, got {got})",
                                       self.path, pos + got)
            got += n
            throttle.consume(n)

    def read_array(self, pos: int, length: int, exact: bool = True) -> "np.ndarray":
        import numpy as np
        return np.frombuffer(self.read(pos, length, exact), dtype=np.uint8)

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
            return
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_file(path: Path | str, pos: int = 0, length: int | None = None, exact: bool = True,
              max_length: int | None = None, what: str = "file") -> bytes:
    """``length`` bytes at ``pos`` (default: the rest of the file). With ``max_length``, a file
    holding more than that from ``pos`` is refused (``too_large``) before anything is read: the
    read never allocates what a hostile file's size says (docs/limits.md lists each kind's cap)."""
    with ReadOnlyFile(path) as fh:
        if length is None:
            size = fh.size()
            length = max(size - pos, 0)
            if max_length is not None and length > max_length:
                raise too_large(path, size, max_length, what)
        return fh.read(pos, length, exact)


def unit_file_head(fh: "ReadOnlyFile", unit: int, limit: int | None, largest: int,
                   what: str) -> tuple[bytes, int, int]:
    """The bytes worth reading of an open file of ``unit``-byte records (a ConsumeQueue, a timer
    log), the file's size, and where it ends as read: no further than the queue's file size
    ``limit`` (the broker maps no more of a file; a file larger than ``largest`` with no smaller
    ``limit`` to go by is refused, ``too_large``), and past the file's last data run only one unit:
    a pre-allocated tail's hole reads as zeros, and one unit of them stands for the rest."""
    size = fh.size()
    cap = min(limit or largest, largest)
    if size > cap == largest:
        raise too_large(fh.path, size, largest, what)
    end = min(size, cap)
    length = min(-(-data_extent(fh, end) // unit) * unit + unit, end)
    return fh.read(0, length, exact=False), size, end


def too_large(path: Path | str, size: int, max_length: int, what: str = "file") -> CorruptDataError:
    """The one-line error for a file larger than the most rmqtool reads of its kind."""
    return CorruptDataError(f"{what} is {size} bytes, more than the {max_length} bytes rmqtool reads "
                            f"of one (docs/limits.md)", path, max_length)


def tune_allocator(mmap_threshold: int = 16 << 20, trim_threshold: int = (1 << 31) - 1) -> bool:
    """Let glibc keep freed memory for reuse (process-wide; for a command's entry, never on import).

    Bulk commands allocate and free the same large numpy temporaries once per 64 MiB window.
    With glibc's defaults, arrays above the (dynamic) mmap threshold are mapped and unmapped
    each time and the heap top is trimmed, so every window faults its pages in afresh; on a VM
    a page fault costs far more than the arithmetic on the page. A fixed 16 MiB mmap threshold
    and a trim threshold near 2 GiB keep those pages (larger arrays, such as an index file's
    columns, are still mapped, where numpy asks for huge pages). Returns False when not on glibc.
    """
    try:
        import ctypes
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) & bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))


@lru_cache(maxsize=1)
def _zero_chunk() -> bytes:
    return bytes(CHUNK_SIZE)


def _skip_hole(fd: int, pos: int, end: int) -> int:
    """The next position at or after ``pos`` that may hold data: a hole of a sparse file (the
    broker's pre-allocated files are sparse unless warmed) reads as zeros, so it is skipped
    without reading it. Where the filesystem cannot say, ``pos`` itself."""
    try:
        return min(os.lseek(fd, pos, os.SEEK_DATA), end)
    except OSError as exc:                  # ENXIO: only a hole from pos to the end of the file
        return end if exc.errno == errno.ENXIO else pos
    except AttributeError:                  # no SEEK_DATA on this platform
        return pos


def next_data(fh: "ReadOnlyFile", pos: int, end: int) -> int:
    """``_skip_hole`` for an open file: the next position at or after ``pos`` that may hold data
    (``pos`` itself for a remote object)."""
    return pos if fh.remote is not None or pos >= end else _skip_hole(fh.fd, pos, end)


def _next_hole(fd: int, pos: int, end: int) -> int:
    """Where the data run at ``pos`` ends: the next hole of a sparse file (``end`` when the
    filesystem cannot say or there is none before it)."""
    try:
        return min(os.lseek(fd, pos, os.SEEK_HOLE), end)
    except (OSError, AttributeError):
        return end


def data_extent(fh: "ReadOnlyFile", size: int) -> int:
    """Where the last data run of an open file ends: past it a sparse file holds only holes,
    which read as zeros. ``size`` when the filesystem cannot say (or for a remote object)."""
    if fh.remote is not None:
        return size
    pos = end = 0
    try:
        while pos < size:
            pos = os.lseek(fh.fd, pos, os.SEEK_DATA)
            end = pos = min(os.lseek(fh.fd, pos, os.SEEK_HOLE), size)
    except OSError as exc:
        if exc.errno != errno.ENXIO:              # ENXIO: no data from pos on
            return size
    except AttributeError:                        # no SEEK_DATA on this platform
        return size
    return end


def first_nonzero(path, lo: int, hi: int | None = None) -> int | None:
    """Position of the first non-zero byte in [lo, hi) of a file, read in bounded chunks; the
    holes of a sparse file (zeros by definition) are skipped, not read."""
    with ReadOnlyFile(path) as fh:
        end = fh.size() if hi is None else min(hi, fh.size())
        pos = lo
        while pos < end:
            run_end = end
            if fh.remote is None:
                pos = _skip_hole(fh.fd, pos, end)
                run_end = _next_hole(fh.fd, pos, end) if pos < end else end
            if pos >= end:
                return None
            chunk = fh.read(pos, min(CHUNK_SIZE, max(run_end - pos, 1)), exact=False)
            if not chunk:
                return None
            if chunk == (_zero_chunk() if len(chunk) == CHUNK_SIZE else bytes(len(chunk))):   # memcmp speed
                pos += len(chunk)
                continue
            import numpy as np
            raw = np.frombuffer(chunk, np.uint8)
            nz = np.flatnonzero(raw)
            if len(nz):
                return pos + int(nz[0])
            pos += len(raw)
    return None
