"""Read a controller-mode store's ``epochFileCheckpoint`` (and ``.bak``) and ``brokerIdentity``.

The grammar is ``formats.controller``; which file the broker loads, and what it does with bad
content, is docs/format-controller.md. In short: a missing or entry-less main file, or one whose
entry count or CRC is wrong (or that is not UTF-8), sends the broker to ``.bak``; a number it cannot
parse stops it (``NumberFormatException`` is not caught), and so does it stop us: ``ControllerFileError``.
"""
from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from formats import controller as fc
from rmqtool.errors import CorruptDataError
from rmqtool.io.fileio import file_size, read_file, regular_file_present
from rmqtool.io import storage

#: more than any epoch or identity file holds; a larger file is refused unread
MAX_FILE_SIZE = 16 << 20


class ControllerFileError(CorruptDataError):
    """An epoch or identity file the broker cannot parse; names the file and, where known, the line."""

    def __init__(self, message: str, path, line: int | None = None):
        super().__init__(message, path if line is None else f"{path}:{line}")


@dataclass
class EpochFileRead:
    """One of the two files, read as CheckpointFile.read(String) reads it."""
    path: str
    status: str                     # ok | missing | no-entries | count | crc | encoding | unread
    declared_count: int | None = None
    declared_crc: int | None = None
    crc: int | None = None          # of the entry lines, as UtilAll.crc32
    entries: list[tuple[int, int]] = field(default_factory=list)   # (epoch, start offset), file order
    skipped_lines: list[int] = field(default_factory=list)         # not "<int>-<long>": not entries
    problem: str = ""

    @property
    def crc_checked(self) -> bool:
        return self.declared_crc not in (None, fc.CRC_NOT_CHECKED)

    @property
    def rejected(self) -> bool:
        """The broker throws IOException on it (and goes to the other file)."""
        return self.status in ("count", "crc", "encoding")


@dataclass
class EpochFile:
    """What the broker loads (CheckpointFile.read()): ``used`` is "main", "bak" or None (nothing)."""
    used: str | None
    why: str
    main: EpochFileRead
    bak: EpochFileRead

    @property
    def chosen(self) -> EpochFileRead | None:
        return {"main": self.main, "bak": self.bak}.get(self.used)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return self.chosen.entries if self.chosen else []

    def as_dict(self) -> dict:
        def one(r: EpochFileRead) -> dict:
            return {**asdict(r), "entries": [list(e) for e in r.entries], "crc_checked": r.crc_checked}
        return {"used": self.used, "why": self.why, "main": one(self.main), "bak": one(self.bak)}


def _text(path: Path) -> bytes | None:
    if not regular_file_present(path):
        return None
    if file_size(path) > MAX_FILE_SIZE:
        raise ControllerFileError(f"{file_size(path)} bytes, larger than any such file ({MAX_FILE_SIZE})", path)
    return read_file(path, exact=False)


def _number(kind: fc.JavaInt, text: str | None, path: Path, line: int) -> int:
    if text is None:
        raise ControllerFileError(f"no line {line} ({kind.name}): the broker fails to load the file", path, line)
    try:
        return kind.parse(text)
    except ValueError as exc:
        raise ControllerFileError(f"{exc}: the broker fails to load the file", path, line) from None


def read_epoch_file(path: Path) -> EpochFileRead:
    """One file: header lines, entries, then the count and CRC checks, in the broker's order."""
    data = _text(path)
    if data is None:
        return EpochFileRead(str(path), "missing")
    try:
        text = data.decode(fc.ENCODING)
    except UnicodeDecodeError as exc:
        return EpochFileRead(str(path), "encoding", problem=f"not UTF-8 at byte {exc.start}")
    lines = fc.split_lines(text)
    head = lines[:fc.HEADER_LINES] + [None] * (fc.HEADER_LINES - len(lines))
    count = _number(fc.EPOCH_COUNT, head[0], path, 1)
    crc = _number(fc.EPOCH_CRC, head[1], path, 2)
    read = EpochFileRead(str(path), "ok", count, crc)
    body = lines[fc.HEADER_LINES:]
    for n, line in enumerate(body, start=fc.HEADER_LINES + 1):
        parts = fc.split_fields(line, fc.EPOCH_ENTRY_SEPARATOR)
        if len(parts) != len(fc.EPOCH_ENTRY):
            read.skipped_lines.append(n)
            continue
        read.entries.append(tuple(_number(kind, part, path, n) for kind, part in zip(fc.EPOCH_ENTRY, parts)))
    joined = "".join(line + fc.LINE_SEPARATOR for line in body).encode(fc.ENCODING)
    read.crc = zlib.crc32(joined) & fc.CRC_MASK
    if len(read.entries) != count:
        read.status, read.problem = "count", f"declares {count} entries, holds {len(read.entries)}"
    elif read.crc_checked and read.crc != crc:
        read.status, read.problem = "crc", f"declares crc32 {crc}, the entry lines' is {read.crc}"
    elif not read.entries:
        read.status = "no-entries"
    return read


def read_epochs(root: Path) -> EpochFile | None:
    """The epoch file the broker would load from store ``root`` (CheckpointFile.read()); None when
    neither file exists. ``.bak`` is read only when the broker reads it: the main file is missing,
    holds no entries, or is rejected."""
    main_path = storage.path(root) / fc.EPOCH_FILE
    bak_path = main_path.with_name(fc.EPOCH_FILE + fc.BACKUP_SUFFIX)
    main = read_epoch_file(main_path)
    if main.status == "ok":
        return EpochFile("main", "the main file is whole", main, EpochFileRead(str(bak_path), "unread"))
    bak = read_epoch_file(bak_path)
    if main.status == "missing" and bak.status == "missing":
        return None
    why = {"missing": "the main file is missing", "no-entries": "the main file holds no entries"}.get(
        main.status, f"the main file is rejected ({main.problem})")
    if bak.status == "ok":
        return EpochFile("bak", why + "; .bak is whole", main, bak)
    if bak.rejected:
        return EpochFile(None, why + f"; .bak is rejected ({bak.problem}): the broker logs the error and "
                         "starts with no epochs", main, bak)
    return EpochFile(None, why + f"; .bak {'is missing' if bak.status == 'missing' else 'holds no entries'}: "
                     "the broker starts with no epochs", main, bak)


@dataclass
class BrokerIdentity:
    """``brokerIdentity`` (registered), or ``brokerIdentity-temp`` while registering (``pending``)."""
    path: str
    cluster_name: str
    broker_name: str
    broker_id: int
    pending: bool = False
    register_check_code: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _identity(path: Path, grammar: tuple) -> list | None:
    data = _text(path)
    if data is None:
        return None
    text = data.decode(fc.ENCODING, errors="replace")
    parts = fc.split_fields(text, fc.IDENTITY_SEPARATOR)
    if len(parts) < len(grammar):
        raise ControllerFileError(f"{len(parts)} '{fc.IDENTITY_SEPARATOR}'-separated fields, needs "
                                  f"{len(grammar)} ({', '.join(k.name for k in grammar)}): the broker "
                                  "does not take it as its identity", path, 1)
    values = []
    for kind, part in zip(grammar, parts):
        try:
            values.append(kind.parse(part))
        except ValueError as exc:
            raise ControllerFileError(f"{exc}: the broker does not take it as its identity", path, 1) from None
        if values[-1] == "":
            raise ControllerFileError(f"empty {kind.name}: the broker does not take it as its identity", path, 1)
    return values


def read_broker_identity(root: Path) -> BrokerIdentity | None:
    """The identity the broker takes at start (ReplicasManager.confirmNowRegisteringState): the
    registered one, else the one being registered; None when neither file exists."""
    path = storage.path(root) / fc.BROKER_IDENTITY_FILE
    values = _identity(path, fc.BROKER_IDENTITY)
    if values is not None:
        return BrokerIdentity(str(path), *values)
    temp = path.with_name(fc.BROKER_IDENTITY_FILE + fc.TEMP_SUFFIX)
    values = _identity(temp, fc.TEMP_BROKER_IDENTITY)
    if values is None:
        return None
    return BrokerIdentity(str(temp), *values[:3], pending=True, register_check_code=values[3])
