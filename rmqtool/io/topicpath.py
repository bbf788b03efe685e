"""Topic names come from data: which ones may become a ConsumeQueue directory name.

The broker names ``consumequeue/<topic>/<queueId>/`` after the topic verbatim. A topic read
from a CommitLog or a JSONL file may be ``../../x``, absolute, contain NUL or ``/``, or be
longer than a file name may be. ``write`` refuses such rows and ``rebuild`` reports and
skips their queues, so nothing is ever created outside the store. ``export`` encodes every
name instead (see ``rmqtool.ops.export.encode_topic``).
"""
from __future__ import annotations

import re
from pathlib import Path

from rmqtool.errors import RefusedError
from rmqtool.io import storage

#: longest file name on common file systems (ext4, xfs, btrfs, APFS, NTFS), in bytes
NAME_MAX = 255


def topic_path_problem(topic: str) -> str | None:
    """Why ``topic`` cannot be used as one directory name, or None when it can."""
    if not topic:
        return "empty topic"
    if topic in (".", ".."):
        return f"topic {topic!r} is a relative path component"
    bad = sorted({c for c in topic if c in "/\\\x00" or ord(c) < 0x20 or ord(c) == 0x7F})
    if bad:
        return f"topic contains {', '.join(repr(c) for c in bad)}"
    size = len(topic.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX:
        return f"topic is {size} bytes, longer than a file name may be ({NAME_MAX})"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` as any UTF-8 output can hold it: a byte that was not UTF-8 (a name read from a
    directory, kept by Python as a lone surrogate U+DC80..U+DCFF) as ``\\xNN``, any other lone
    surrogate (from a JSON ``\\ud800`` escape) as ``\\uNNNN``."""
    def shown(m):
        code = ord(m.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
    return _SURROGATE.sub(shown, text)


def describe(topic: str) -> str:
    """A printable, bounded rendering of a hostile topic for messages."""
    text = topic if len(topic) <= 80 else f"{topic[:60]}... ({len(topic)} chars)"
    return repr(text)


def queue_dir(base: Path, topic: str, queue_id: int) -> Path:
    """``base/topic/queue_id``, refusing any topic that would leave ``base``."""
    problem = topic_path_problem(topic)
    if problem is not None:
        raise RefusedError(f"{problem}: {describe(topic)} cannot name a directory", base)
    path = base / topic / str(int(queue_id))
    if path.parent.parent != base:
        raise RefusedError(f"topic {describe(topic)} would leave the directory", base)
    return path


def queue_selected(only: set | None, topic: str, queue_id: int | str) -> bool:
    """A rebuild's queue selection: ``only`` None (every queue), else {(topic, queue id or None
    for every queue of the topic)}; a queue id may be its directory name (not a number: no)."""
    if only is None:
        return True
    try:
        queue_id = int(queue_id)
    except ValueError:
        return False
    return (topic, queue_id) in only or (topic, None) in only


def queue_dirs(base) -> list[tuple[str, int, Path]]:
    """Every ``<base>/<topic>/<queueId>/`` (consumequeue/, batchconsumequeue/, consumequeue_ext/),
    sorted by topic and queue id: entries that are not directories (RocksDB files, strays) and
    non-integer queue directories are skipped, links are not followed. Empty when ``base`` is none."""
    out = []
    try:
        topics = sorted(storage.scandir(base), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return out
    for t in topics:
        if not t.is_dir(follow_symlinks=False):
            continue
        for q in sorted(storage.scandir(t.path), key=lambda e: e.name):
            if q.is_dir(follow_symlinks=False) and re.fullmatch(r"-?\d+", q.name):
                out.append((t.name, int(q.name), storage.path(q.path)))
    out.sort(key=lambda r: (r[0], r[1]))
    return out
