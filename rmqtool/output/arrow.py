"""Record batches as Arrow: the one columnar form both engines, Parquet and JSONL share.

The Arrow schema is derived from ``rmqtool.output.schema.RECORD_FIELDS`` (declared once there):
``int`` -> int64, ``str`` -> string, ``bool`` -> bool, ``map`` -> map<string, string>,
``obj`` -> the struct declared in ``OBJECT_TYPES``. Only ``body`` depends on ``--body``:
``raw`` keeps the stored bytes (binary), ``text`` decodes them (inflated when
compressed), ``none`` leaves it null.

``batch_to_arrow`` is the bulk path; ``record_to_dict`` in ``rmqtool.output.schema`` is the
reference it is tested against, record for record. Low-cardinality texts (hosts, tags,
IPs) are formatted once per distinct value; anything odd (IPv6 UNIQ_KEY anchors outside
the usual calendar range, compressed bodies, delayed messages) goes through the
reference helpers for those rows only.
"""
from __future__ import annotations

import base64
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from formats import commitlog as cl
from rmqtool.records.ids import decode_uniq_key, format_address, format_host
from rmqtool.kernels.javahash import tags_code
from rmqtool.kernels.gather import gather_bytes
from rmqtool.broker.delay import tags_code_of
from rmqtool.output.schema import RECORD_FIELDS, decompress

EXPORT_BODY_MODES = ("none", "raw", "text")

#: structs for ``obj`` fields (their keys are those of the reference decoder's dict)
OBJECT_TYPES = {
    "uniq_key_info": pa.struct([
        ("ip", pa.string()), ("pid", pa.int64()), ("counter", pa.int64()),
        ("month_offset_ms", pa.int64()), ("timestamp", pa.int64()), ("anchor", pa.string()),
    ]),
}
_SCALAR_TYPES = {"int": pa.int64(), "str": pa.string(), "bool": pa.bool_(), "bytes": pa.binary(),
                 "map": pa.map_(pa.string(), pa.string())}


def arrow_type(field, body: str = "none") -> pa.DataType:
    if field.name == "body":
        return pa.binary() if body == "raw" else pa.string()
    if field.type == "obj":
        return OBJECT_TYPES[field.name]
    return _SCALAR_TYPES[field.type]


def arrow_schema(body: str = "none") -> pa.Schema:
    """The record schema as Arrow, for one ``--body`` mode."""
    return pa.schema([pa.field(f.name, arrow_type(f, body)) for f in RECORD_FIELDS])


# --- helpers ------------------------------------------------------------------------------
def _validity(valid: np.ndarray):
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _raw(buf) -> bytes | memoryview:
    """A bytes object for cheap slicing: the scanner's window itself when ``buf`` wraps one."""
    base = getattr(buf, "base", None)
    if isinstance(base, bytes) and len(base) == len(buf):
        return base
    return buf.tobytes() if isinstance(buf, np.ndarray) else bytes(buf)


def _span_bytes(raw, starts: np.ndarray, size: np.ndarray, offsets: np.ndarray) -> bytes:
    """The spans concatenated: a numpy gather for short spans, slicing + join for long ones."""
    total = int(offsets[-1])
    if total == 0:
        return b""
    if total <= 64 * max(int(np.count_nonzero(size)), 1):
        arr = np.frombuffer(raw, dtype=np.uint8)
        rel = np.repeat(starts - offsets[:-1], size) + np.arange(total, dtype=np.int64)
        return arr[rel].tobytes()
    return b"".join([raw[s:s + k] for s, k in zip(starts.tolist(), size.tolist()) if k])


def _binary(raw, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    """Binary array of spans of ``raw`` (bytes); length -1 is null."""
    n = len(starts)
    valid = lens >= 0
    size = np.where(valid, lens, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(size, out=offsets[1:])
    data = _span_bytes(raw, starts, size, offsets)
    if offsets[-1] >= (1 << 31):
        return pa.Array.from_buffers(pa.large_binary(), n, [_validity(valid), pa.py_buffer(offsets),
                                                            pa.py_buffer(data)])
    return pa.Array.from_buffers(pa.binary(), n, [_validity(valid), pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(data)])


def _text(arr: pa.Array) -> pa.Array:
    """Binary -> string, decoding invalid UTF-8 with replacement like ``bytes.decode``."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in arr.to_pylist()],
                        pa.string())


def _by_value(values: np.ndarray, fmt) -> pa.Array:
    """Format each distinct row of a (n, w) uint8 matrix once (hash-based), then expand."""
    n, width = values.shape
    if not n:
        return pa.array([], pa.string())
    fixed = pa.Array.from_buffers(pa.binary(width), n,
                                  [None, pa.py_buffer(np.ascontiguousarray(values))])
    enc = fixed.dictionary_encode()
    texts = pa.array([fmt(np.frombuffer(v, dtype=np.uint8)) for v in enc.dictionary.to_pylist()],
                     pa.string())
    return texts.take(enc.indices)


def _hosts(buf: np.ndarray, start: np.ndarray, v6: np.ndarray) -> tuple[np.ndarray, pa.Array]:
    """(address+port bytes matrix padded to the IPv6 size, formatted host strings)."""
    n = len(start)
    mat = np.zeros((n, cl.HOST_V6_SIZE + 1), dtype=np.uint8)
    mat[:, 0] = v6
    if (~v6).any():
        mat[~v6, 1:cl.HOST_V4_SIZE + 1] = gather_bytes(buf, start[~v6], cl.HOST_V4_SIZE)
    if v6.any():
        mat[v6, 1:] = gather_bytes(buf, start[v6], cl.HOST_V6_SIZE)

    def fmt(row):
        size = cl.HOST_V6_SIZE if row[0] else cl.HOST_V4_SIZE
        raw = row[1:size + 1].tobytes()
        return format_host(raw[:-4], int.from_bytes(raw[-4:], "big", signed=True))
    return mat, _by_value(mat, fmt)


_HEX_UPPER = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def _hex_rows(mat: np.ndarray) -> np.ndarray:
    """(n, w) uint8 -> (n, 2w) uppercase ASCII hex."""
    out = np.empty((mat.shape[0], mat.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = _HEX_UPPER[mat >> 4]
    out[:, 1::2] = _HEX_UPPER[mat & 15]
    return out


def _fixed_strings(rows: np.ndarray) -> list[str]:
    width = rows.shape[1]
    raw = rows.tobytes().decode("ascii")
    return [raw[i:i + width] for i in range(0, len(raw), width)]


def _offset_msg_ids(host_mat: np.ndarray, v6: np.ndarray, stored_phy: np.ndarray) -> pa.Array:
    """STOREHOST address + port + PHYSICALOFFSET, uppercase hex, per record."""
    out = np.empty(len(v6), dtype=object)
    phy = stored_phy.astype(">i8").view(np.uint8).reshape(-1, 8)
    for flag, size in ((False, cl.HOST_V4_SIZE), (True, cl.HOST_V6_SIZE)):
        sel = v6 == flag
        if sel.any():
            mat = np.concatenate([host_mat[sel, 1:size + 1], phy[sel]], axis=1)
            out[sel] = _fixed_strings(_hex_rows(mat))
    return pa.array(out, pa.string())


# --- properties ---------------------------------------------------------------------------------
def _properties(mv: memoryview, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    """map<string,string> per record, parsed like ``cl.decode_properties`` (byte-level equal:
    the separators are ASCII and UTF-8 replacement never swallows ASCII)."""
    n = len(starts)
    size = np.where(lens > 0, lens, 0)
    rec_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(size, out=rec_off[1:])
    data = _span_bytes(mv, starts, size, rec_off)
    arr = np.frombuffer(data, dtype=np.uint8)
    seps = np.flatnonzero(arr == 2)
    ones = np.flatnonzero(arr == 1)
    has = np.flatnonzero(size > 0)
    seg_x = np.concatenate([rec_off[has], seps + 1])
    seg_owner = np.concatenate([has, np.searchsorted(rec_off, seps, side="right") - 1])
    rec_end = rec_off[seg_owner + 1]
    k = np.searchsorted(seps, seg_x)
    nxt = seps[np.minimum(k, len(seps) - 1)] if len(seps) else np.zeros_like(seg_x)
    seg_e = np.where((k < len(seps)) & (nxt < rec_end), nxt, rec_end)
    k1 = np.searchsorted(ones, seg_x)
    kv = ones[np.minimum(k1, len(ones) - 1)] if len(ones) else np.zeros_like(seg_x)
    ok = (k1 < len(ones)) & (kv > seg_x) & (kv < seg_e - 1)
    seg_x, seg_e, kv, seg_owner = seg_x[ok], seg_e[ok], kv[ok], seg_owner[ok]
    order = np.lexsort((seg_x, seg_owner))
    seg_x, seg_e, kv, seg_owner = seg_x[order], seg_e[order], kv[order], seg_owner[order]
    dmv = data
    keys = _text(_binary(dmv, seg_x, kv - seg_x))
    values = _text(_binary(dmv, kv + 1, seg_e - kv - 1))
    if len(keys):
        # a later duplicate key overwrites the value but keeps the first one's place
        codes = keys.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.int64)
        pair = seg_owner * (int(codes.max()) + 1) + codes
        uniq, first, inverse, counts = np.unique(pair, return_index=True, return_inverse=True,
                                                 return_counts=True)
        if (counts > 1).any():
            last = np.zeros(len(uniq), dtype=np.int64)
            last[inverse.reshape(-1)] = np.arange(len(pair))      # later index wins
            keep = np.sort(first)
            src = last[inverse.reshape(-1)[keep]]
            keys = keys.take(pa.array(keep))
            values = values.take(pa.array(src))
            seg_owner = seg_owner[keep]
    counts = np.bincount(seg_owner, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values)


# --- UNIQ_KEY -------------------------------------------------------------------------------
_NIBBLE = np.full(256, -1, dtype=np.int16)
for _i, _c in enumerate(b"0123456789abcdef"):
    _NIBBLE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _NIBBLE[_c] = 10 + _i
_QUARTER_HOUR_MS = 15 * 60 * 1000
_MAX_TZ_MS = 14 * 3600 * 1000
_SAFE_MS = (np.datetime64("1900-01-01", "ms").astype(np.int64),
            np.datetime64("9000-01-01", "ms").astype(np.int64))


def _anchor(diff: np.ndarray, when: np.ndarray) -> np.ndarray:
    """Vector form of ``ids._anchor_time``; -1 where there is no anchor."""
    approx = when - diff
    month = approx.astype("datetime64[ms]").astype("datetime64[M]")
    best = np.zeros(len(diff), dtype=np.int64)
    have = np.zeros(len(diff), dtype=bool)
    for delta in (-1, 0, 1):
        utc_start = (month + np.timedelta64(delta, "M")).astype("datetime64[ms]").astype(np.int64)
        tz = np.round((approx - utc_start) / _QUARTER_HOUR_MS) * _QUARTER_HOUR_MS
        ok = np.abs(tz) <= _MAX_TZ_MS
        start = utc_start + tz.astype(np.int64)
        better = ok & (~have | (np.abs(approx - start) < np.abs(approx - best)))
        best = np.where(better, start, best)
        have |= ok
    return np.where(have, best + diff, -1)


def _uniq_info(buf: np.ndarray, u_start: np.ndarray, u_len: np.ndarray, born: np.ndarray,
               store: np.ndarray, texts: pa.Array) -> pa.Array:
    """Struct array equal to ``ids.decode_uniq_key`` per record (None when not a hex id)."""
    n = len(u_start)
    cols = {name: np.zeros(n, dtype=np.int64) for name in ("pid", "counter", "month_offset_ms", "timestamp")}
    anchor = np.full(n, None, dtype=object)
    ip = np.full(n, None, dtype=object)
    valid = np.zeros(n, dtype=bool)
    ts_valid = np.zeros(n, dtype=bool)
    slow = []
    for width in (32, 56):
        sel = np.flatnonzero(u_len == width)
        if not len(sel):
            continue
        nib = _NIBBLE[gather_bytes(buf, u_start[sel], width)]
        good = (nib >= 0).all(axis=1)
        slow.extend(sel[~good].tolist())          # non-hex of the right length: reference path
        sel, nib = sel[good], nib[good].astype(np.int64)
        raw = (nib[:, 0::2] << 4) | nib[:, 1::2]
        ip_len = raw.shape[1] - 12
        ip[sel] = np.asarray(_by_value(raw[:, :ip_len].astype(np.uint8),
                                       lambda r: format_address(r.tobytes())).to_pylist(), dtype=object)
        cols["pid"][sel] = (raw[:, ip_len] << 8) | raw[:, ip_len + 1]
        diff = ((raw[:, ip_len + 6] << 24) | (raw[:, ip_len + 7] << 16) | (raw[:, ip_len + 8] << 8)
                | raw[:, ip_len + 9])
        cols["month_offset_ms"][sel] = diff
        cols["counter"][sel] = (raw[:, ip_len + 10] << 8) | raw[:, ip_len + 11]
        valid[sel] = True
        left = np.ones(len(sel), dtype=bool)
        for name, clock in (("born", born[sel]), ("store", store[sel])):
            usable = left & (clock > 0)
            odd = usable & ((clock - diff < _SAFE_MS[0]) | (clock - diff > _SAFE_MS[1]))
            slow.extend(sel[odd].tolist())
            usable &= ~odd
            left &= ~odd
            if usable.any():
                t = _anchor(diff[usable], clock[usable])
                hit = t >= 0
                idx = sel[usable][hit]
                cols["timestamp"][idx] = t[hit]
                anchor[idx] = name
                ts_valid[idx] = True
                left[np.flatnonzero(usable)[hit]] = False
    fields = [pa.array(ip, pa.string()), pa.array(cols["pid"]), pa.array(cols["counter"]),
              pa.array(cols["month_offset_ms"]),
              pa.array(cols["timestamp"], mask=~ts_valid), pa.array(anchor, pa.string())]
    result = pa.StructArray.from_arrays(fields, fields=list(OBJECT_TYPES["uniq_key_info"]),
                                        mask=pa.array(~valid))
    if not slow:
        return result
    out = result.to_pylist()
    text = texts.to_pylist()
    for i in set(slow):
        try:
            out[i] = decode_uniq_key(text[i], int(born[i]), int(store[i]))
        except ValueError:
            out[i] = None
    return pa.array(out, OBJECT_TYPES["uniq_key_info"])


# --- the batch ------------------------------------------------------------------------------------
def select(batch, idx: np.ndarray):
    """The same RecordBatch restricted to rows ``idx`` (columns only; buf is shared)."""
    from rmqtool.records.scan import RecordBatch
    cols = {k: (v[idx] if isinstance(v, np.ndarray) and v.shape[:1] == (len(batch),) else v)
            for k, v in batch.columns.items()}
    hashes = {k: v[idx] for k, v in (getattr(batch, "hashes", None) or {}).items()}
    return RecordBatch(batch.path, batch.file_base, batch.buf, batch.buf_base, cols, batch.carved, hashes)


def batch_to_arrow(batch, store: str | None = None, body: str = "none") -> pa.RecordBatch:
    """Every schema field of every record of a scanner RecordBatch, as one Arrow batch."""
    c = batch.columns
    n = len(batch)
    buf = batch.buf
    mv = _raw(buf)
    out: dict[str, pa.Array] = {}
    sys_flag = c["sys_flag"]
    magic = c["magic"]
    const = lambda v, t=pa.string(): pa.array(np.full(n, v, dtype=object), t) if v is not None \
        else pa.nulls(n, t)
    out["store"] = const(store)
    out["file"] = const(batch.path)
    out["kind"] = const("MESSAGE")
    for name in ("position", "phy_offset", "size", "body_crc", "queue_id", "flag", "queue_offset",
                 "stored_phy_offset", "sys_flag", "born_timestamp", "store_timestamp",
                 "reconsume_times", "prepared_transaction_offset", "body_length"):
        out[name] = pa.array(c[name].astype(np.int64))
    out["magic"] = _by_value(magic.astype(">u4").view(np.uint8).reshape(-1, 4),
                             lambda r: f"0x{int.from_bytes(r.tobytes(), 'big'):08X}")
    out["version"] = pa.array(np.where(magic == cl.MESSAGE_MAGIC_V2, 2, 1).astype(np.int64))
    out["transaction_type"] = pa.array((sys_flag & cl.TRANSACTION_MASK).astype(np.int64))
    born_v6 = (sys_flag & cl.BORNHOST_V6_FLAG) != 0
    store_v6 = (sys_flag & cl.STOREHOST_V6_FLAG) != 0
    _, out["born_host"] = _hosts(buf, c["born_host_start"], born_v6)
    store_mat, out["store_host"] = _hosts(buf, c["store_host_start"], store_v6)
    topic = _text(_binary(mv, c["topic_start"], c["topic_len"]))
    out["topic"] = topic
    out["properties"] = _properties(mv, c["props_start"], c["props_len"])
    out["properties_raw"] = _binary(mv, c["props_start"], c["props_len"])
    out["keys"] = _text(_binary(mv, c["keys_start"], c["keys_len"]))
    tags = _text(_binary(mv, c["tags_start"], c["tags_len"]))
    out["tags"] = tags
    uniq = _text(_binary(mv, c["uniq_start"], c["uniq_len"]))
    out["uniq_key"] = uniq
    out["tags_code"] = _tags_codes(batch, tags, topic)
    out["offset_msg_id"] = _offset_msg_ids(store_mat, store_v6, c["stored_phy_offset"])
    out["uniq_key_info"] = _uniq_info(buf, c["uniq_start"], c["uniq_len"], c["born_timestamp"],
                                      c["store_timestamp"], uniq)
    raw_body = _binary(mv, c["body_start"], c["body_len"])
    _bodies(out, raw_body, sys_flag, body)
    out.update(_kind_fields(batch))
    out.update(_system_fields(batch, topic))
    return pa.RecordBatch.from_pydict(out, schema=arrow_schema(body))


def _system_fields(batch, topic: pa.Array) -> dict[str, pa.Array]:
    """``system_topics`` for the rows of the broker's own topics (decoded one by one: they are few), nulls
    elsewhere."""
    from rmqtool.output.system_topics import SYSTEM_FIELDS, is_system_topic, system_fields
    n = len(batch)
    names = topic.to_pylist()
    values = {name: [None] * n for name in SYSTEM_FIELDS}
    for i, t in enumerate(names):
        if t is not None and is_system_topic(t):
            for name, v in system_fields(t, batch.properties(i), batch.body(i)).items():
                values[name][i] = v
    return {name: pa.array(v, pa.int64() if SYSTEM_FIELDS[name] else pa.string()) for name, v in values.items()}


def _kind_fields(batch) -> dict[str, pa.Array]:
    """``kinds_fields`` for the rows whose properties bytes name one of its properties (found by a
    byte search), nulls elsewhere."""
    from rmqtool.broker.dispatch import rows_with_property
    from rmqtool.output.kinds_fields import KIND_FIELDS, kind_fields
    n = len(batch)
    rows = np.arange(n)
    hit = np.zeros(n, dtype=bool)
    for prop, _ in KIND_FIELDS.values():
        hit |= rows_with_property(batch, rows, prop)
    values = {name: [None] * n for name in KIND_FIELDS}
    for i in np.flatnonzero(hit).tolist():
        for name, v in kind_fields(batch.properties(i)).items():
            values[name][i] = v
    return {name: pa.array(v, pa.int64() if KIND_FIELDS[name][1] else pa.string()) for name, v in values.items()}


def _tags_codes(batch, tags: pa.Array, topic: pa.Array) -> pa.Array:
    enc = tags.dictionary_encode()
    codes = np.array([tags_code(t) for t in enc.dictionary.to_pylist()] + [tags_code(None)],
                     dtype=np.int64)
    idx = enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False)
    out = codes[idx]
    delayed = np.flatnonzero(pc.fill_null(pc.equal(topic, cl.SCHEDULE_TOPIC), False)
                             .to_numpy(zero_copy_only=False))
    for i in delayed.tolist():
        out[i] = tags_code_of(cl.SCHEDULE_TOPIC, batch.properties(i), int(batch.columns["store_timestamp"][i]))
    return pa.array(out)


def _bodies(out: dict, raw_body: pa.Array, sys_flag: np.ndarray, body: str) -> None:
    n = len(raw_body)
    compressed = np.flatnonzero(sys_flag & cl.COMPRESSED_FLAG)
    codec = np.full(n, None, dtype=object)
    inflated_len = np.zeros(n, dtype=np.int64)
    inflated_ok = np.zeros(n, dtype=bool)
    note = np.full(n, None, dtype=object)
    shown = raw_body
    if len(compressed):
        shown_list = raw_body.to_pylist() if body == "text" else None
        for i in compressed.tolist():
            data, name, why = decompress(raw_body[i].as_py(), int(sys_flag[i]))
            codec[i], note[i] = name, why
            if data is not None:
                inflated_len[i], inflated_ok[i] = len(data), True
            if shown_list is not None:      # text: the inflated body, never the compressed bytes
                shown_list[i] = data
        if shown_list is not None:
            shown = pa.array(shown_list, pa.binary())
    out["compression"] = pa.array(codec, pa.string())
    out["inflated_body_length"] = pa.array(inflated_len, mask=~inflated_ok)
    out["note"] = pa.array(note, pa.string())
    if body == "none":
        out["body_encoding"] = pa.array(np.full(n, "none", dtype=object), pa.string())
        out["body"] = pa.nulls(n, pa.string())
    elif body == "raw":
        out["body_encoding"] = pa.array(np.full(n, "raw", dtype=object), pa.string())
        out["body"] = raw_body
    else:
        out["body_encoding"] = pa.array(np.full(n, "text", dtype=object), pa.string())
        out["body"] = _text(shown)


# --- JSON lines ---------------------------------------------------------------------------------
def rows_for_json(table) -> list[dict]:
    """Rows of an Arrow table/batch as JSON-ready dicts (map -> object, raw body -> base64)."""
    rows = table.to_pylist()
    for r in rows:
        props = r.get("properties")
        if isinstance(props, list):
            r["properties"] = dict(props)
        b = r.get("body")
        if isinstance(b, (bytes, bytearray)):
            r["body"] = base64.b64encode(b).decode("ascii")
            r["body_encoding"] = "raw"
        pr = r.get("properties_raw")
        if isinstance(pr, (bytes, bytearray)):
            r["properties_raw"] = base64.b64encode(pr).decode("ascii")
    return rows


def json_line(row: dict) -> str:
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


class ScanStage:
    """A stage giving the records of each task as Arrow batches, optionally filtered
    (``flt`` is a ``rmqtool.ops.dump.RecordFilter``)."""

    def __init__(self, body: str = "none", flt=None):
        self.body, self.flt = body, flt

    def schema(self) -> pa.Schema:
        return arrow_schema(self.body)

    def __call__(self, task, batches):
        for b in batches:
            if self.flt is not None:
                mask = self.flt.batch_mask(b)
                if not mask.any():
                    continue
                if not mask.all():
                    b = select(b, np.flatnonzero(mask))
            yield batch_to_arrow(b, task.store, self.body)
