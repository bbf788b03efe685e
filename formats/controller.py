"""Controller mode (RocketMQ 5.x ``enableControllerMode``): the epoch file and the broker identity.

Both are text in the store root; their rules, with upstream citations: docs/format-controller.md.
The grammar is declared here once: the line break, the separators, and each field's kind (a Java
``int``/``long`` as ``Integer.parseInt``/``Long.parseLong`` take it, or a string). The readers in
``rmqtool/io/controller.py`` parse with ``split_fields`` and ``parse_field`` and nothing else.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: file names in the store root (MessageStoreConfig.getStorePathEpochFile / getStorePathBrokerIdentity)
EPOCH_FILE = "epochFileCheckpoint"
BROKER_IDENTITY_FILE = "brokerIdentity"
#: the previous content of a file rewritten by MixAll.string2File
BACKUP_SUFFIX = ".bak"
#: the identity being registered with the controller (TempBrokerMetadata), beside brokerIdentity
TEMP_SUFFIX = "-temp"

#: what BufferedReader.readLine ends a line at; lines are written with System.lineSeparator, "\n" on
#: the Linux hosts brokers run on, and the CRC is taken over the lines joined by it
LINE_BREAK = re.compile(r"\r\n|\r|\n")
LINE_SEPARATOR = "\n"
ENCODING = "utf-8"


@dataclass(frozen=True)
class JavaInt:
    """A decimal integer as Integer.parseInt/Long.parseLong read it: an optional sign, then decimal
    digits (any Unicode decimal digit, as Character.digit), within the type's range."""
    name: str
    bits: int

    def parse(self, text: str) -> int:
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"{self.name} {text!r} is not a decimal integer")
        try:
            value = int(text)
        except ValueError:                  # more digits than Python converts: far out of range
            value = 1 << self.bits
        if not -(1 << (self.bits - 1)) <= value < (1 << (self.bits - 1)):
            raise ValueError(f"{self.name} {text!r} is out of range for a {self.bits}-bit integer")
        return value


@dataclass(frozen=True)
class JavaString:
    name: str

    def parse(self, text: str) -> str:
        return text


_INTEGER = re.compile(r"[+-]?\d+")

# -- epochFileCheckpoint (CheckpointFile<EpochEntry>) --------------------------------------------
#: line 1 and line 2; then one EPOCH_ENTRY per line
EPOCH_COUNT = JavaInt("entry count", 32)
EPOCH_CRC = JavaInt("crc32", 32)
HEADER_LINES = 2
#: "<epoch>-<startOffset>"; a line that does not split into exactly these fields is skipped
EPOCH_ENTRY_SEPARATOR = "-"
EPOCH_ENTRY = (JavaInt("epoch", 32), JavaInt("start offset", 64))
#: a stored CRC of 0 is never checked
CRC_NOT_CHECKED = 0
#: UtilAll.crc32 keeps the low 31 bits of java.util.zip.CRC32
CRC_MASK = 0x7FFFFFFF
#: EpochEntry's endOffset until something sets it: Long.MAX_VALUE, "open"
OPEN_END = (1 << 63) - 1

# -- brokerIdentity (BrokerMetadata) and brokerIdentity-temp (TempBrokerMetadata) -------------------
#: the whole file is one line, no line break: "<clusterName>#<brokerName>#<brokerId>[#<registerCheckCode>]"
IDENTITY_SEPARATOR = "#"
BROKER_IDENTITY = (JavaString("clusterName"), JavaString("brokerName"), JavaInt("brokerId", 64))
TEMP_BROKER_IDENTITY = BROKER_IDENTITY + (JavaString("registerCheckCode"),)


def split_fields(text: str, separator: str) -> list[str]:
    """Java's ``String.split`` on a one-character literal: trailing empty fields are dropped, and a
    text without the separator is one field."""
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def split_lines(text: str) -> list[str]:
    """The lines BufferedReader.readLine returns, one after the other."""
    lines = LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines

