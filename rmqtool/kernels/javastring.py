"""Java ``String.hashCode`` of one string, without numpy (format.md §4.2, §5.2): the scalar
formulation the vectorized kernels in ``javahash`` are proven equal to, and what a query that
hashes one key needs.
"""
from __future__ import annotations

INT_MIN = -(1 << 31)
_MASK = 0xFFFFFFFF


def _to_int32(value: int) -> int:
    value &= _MASK
    return value - (1 << 32) if value & 0x80000000 else value


def utf16_units(text: str) -> list[int]:
    """UTF-16 code units of a string (surrogate pairs for non-BMP characters)."""
    data = text.encode("utf-16-be", "surrogatepass")
    return [(data[i] << 8) | data[i + 1] for i in range(0, len(data), 2)]


def java_string_hash(text: str) -> int:
    """``String.hashCode()`` as a signed 32-bit int."""
    h = 0
    if text.isascii():
        for ch in text.encode("ascii"):
            h = (31 * h + ch) & _MASK
    else:
        for unit in utf16_units(text):
            h = (31 * h + unit) & _MASK
    return _to_int32(h)


def java_bytes_hash(raw: bytes) -> int:
    """hashCode of ``new String(raw, UTF_8)`` (malformed input becomes U+FFFD)."""
    return java_string_hash(raw.decode("utf-8", "replace"))


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHash: abs(hashCode), Integer.MIN_VALUE -> 0."""
    h = java_string_hash(key)
    return 0 if h == INT_MIN else abs(h)


def index_slot(key_hash: int, hash_slots: int) -> int:
    return key_hash % hash_slots


def tags_code(tags: str | None) -> int:
    """CQ tagsCode of a TAGS value: hashCode of the whole value, 0 when absent."""
    return java_string_hash(tags) if tags else 0
