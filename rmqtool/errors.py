"""The one exception root. The CLI catches ``RmqError`` once and prints one line."""
from __future__ import annotations

from contextlib import contextmanager

EXIT_OK = 0
EXIT_FINDINGS = 1      # verify found problems, or a query found nothing
EXIT_BAD_INPUT = 2     # bad usage or unreadable input
EXIT_REFUSED = 3       # refused for safety (live broker holds the lock, destination exists)
EXIT_INTERRUPTED = 130  # ended by Ctrl-C (the shell's code for SIGINT)


@contextmanager
def writing_to(path):
    """An OS error without a file name raised in the block (ENOSPC from a write to an open
    descriptor) names ``path``, the file or directory being written, in its one-line message;
    a short write reported without an errno (numpy's ``tofile``: "N requested and M written")
    says what it is."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None and exc.strerror is None:
            exc.strerror = f"short write ({exc}; is the disk full, or a file size limit reached?)"
        if exc.filename is None:
            exc.filename = str(path)
        raise


class RmqError(Exception):
    """An error that names a path and, where known, a byte offset."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, path=None, offset: int | None = None):
        super().__init__(message)
        self.message = message
        self.path = None if path is None else str(path)
        self.offset = offset

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.offset is None else f"{self.path}@{self.offset}"
            where += ": "
        return f"{where}{self.message}"


class UsageError(RmqError):
    """The arguments do not make sense."""


class StoreLayoutError(RmqError):
    """The directory is not a store, or its files are misnamed or missized."""


class UnreadableError(StoreLayoutError):
    """A file is there but cannot be read (permissions, an I/O error). Never taken for a file
    that vanished or shrank, so a query fails rather than answering from the rest of the store."""


class CorruptDataError(RmqError):
    """Bytes that cannot be what the format says they are."""


class FileChangedError(RmqError):
    """A file shrank, vanished or was replaced while it was being read."""


class RefusedError(RmqError):
    """Refused for safety: a broker holds the lock, or the destination exists."""

    exit_code = EXIT_REFUSED


class DeclinedError(RefusedError):
    """The person answered no at a prompt: nothing was written. A refusal they chose, not an
    error: the command says so in one line without ``error:`` and exits 3 like every refusal."""


class MissingDependencyError(RmqError):
    """An optional dependency (pyspark, Java, a codec) is not installed."""


#: the optional modules and the extra (pyproject.toml) that installs each
EXTRA_OF_MODULE = {"pyarrow": "parquet", "pyspark": "spark", "pandas": "spark", "lz4": "codecs",
                   "zstandard": "codecs", "rocksdict": "rocksdb"}


def missing_extra(exc: BaseException) -> MissingDependencyError | None:
    """An ImportError of one of the optional modules as the one line that names its extra
    (None for any other error)."""
    if not isinstance(exc, ImportError):
        return None
    module = (getattr(exc, "name", None) or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    return MissingDependencyError(f"this needs {module}, which is not installed: pip install 'rmqtool[{extra}]'")
