"""Host addresses, offsetMsgId and UNIQ_KEY (format.md §2.7)."""
from __future__ import annotations

import datetime as dt
import re
import struct

HEX_ID = re.compile(r"^[0-9A-Fa-f]+$")
_QUARTER_HOUR_MS = 15 * 60 * 1000
_MAX_TZ_MS = 14 * 3600 * 1000


def format_address(address: bytes) -> str:
    """Java InetAddress text: dotted IPv4, or 8 uncompressed lowercase groups for IPv6."""
    if len(address) == 4:
        return ".".join(str(b) for b in address)
    groups = struct.unpack(">8H", address)
    return ":".join(f"{g:x}" for g in groups)


def format_host(address: bytes, port: int) -> str:
    text = format_address(address)
    return f"{text}:{port}" if len(address) == 4 else f"[{text}]:{port}"


def offset_msg_id(store_address: bytes, store_port: int, phy_offset: int) -> str:
    """STOREHOST address + int port + long offset, uppercase hex."""
    return (store_address + struct.pack(">iq", store_port, phy_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[bytes, int, int] | None:
    """(address, port, commitlog offset) for a 32/56-hex id, else None."""
    if len(msg_id) not in (32, 56) or not HEX_ID.match(msg_id):
        return None
    raw = bytes.fromhex(msg_id)
    ip_len = 4 if len(msg_id) == 32 else 16
    port, offset = struct.unpack(">iq", raw[ip_len:])
    return raw[:ip_len], port, offset


def decode_uniq_key(uniq_key: str | None, born_timestamp: int | None = None,
                    store_timestamp: int | None = None) -> dict | None:
    """Client IP, pid and creation time of a UNIQ_KEY in the Java client's format.

    The time is the 32-bit millisecond offset from a month start in the producer's time
    zone; we anchor it to the record's born timestamp: the month start (in a zone offset
    that is a whole quarter hour) nearest to born - diff. When the born clock does not fit
    (a producer that set it), the store timestamp is tried next.
    """
    if not uniq_key or len(uniq_key) not in (32, 56) or not HEX_ID.match(uniq_key):
        return None
    raw = bytes.fromhex(uniq_key)
    ip_len = len(raw) - 12
    ip = format_address(raw[:ip_len])
    pid = struct.unpack_from(">H", raw, ip_len)[0]
    diff = struct.unpack_from(">I", raw, ip_len + 6)[0]
    counter = struct.unpack_from(">H", raw, ip_len + 10)[0]
    info = {"ip": ip, "pid": pid, "counter": counter, "month_offset_ms": diff,
            "timestamp": None, "anchor": None}
    for anchor, value in (("born", born_timestamp), ("store", store_timestamp)):
        if value and value > 0:
            when = _anchor_time(diff, value)
            if when is not None:
                info["timestamp"], info["anchor"] = when, anchor
                break
    return info


def _anchor_time(diff: int, born_ms: int) -> int | None:
    approx = born_ms - diff
    try:
        day = dt.datetime.fromtimestamp(approx / 1000, dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    best = None
    for year, month in _neighbour_months(day.year, day.month):
        try:
            utc_start = int(dt.datetime(year, month, 1, tzinfo=dt.timezone.utc).timestamp()) * 1000
        except ValueError:          # year 0 or 10000: outside datetime's range, no such month start
            continue
        tz = round((approx - utc_start) / _QUARTER_HOUR_MS) * _QUARTER_HOUR_MS
        if abs(tz) > _MAX_TZ_MS:
            continue
        start = utc_start + tz
        if best is None or abs(approx - start) < abs(approx - best):
            best = start
    return None if best is None else best + diff


def _neighbour_months(year: int, month: int):
    for delta in (-1, 0, 1):
        m = month + delta
        y = year + (m - 1) // 12
        yield y, (m - 1) % 12 + 1
