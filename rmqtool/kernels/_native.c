/*
 * rmqtool's native core: the per-record loops numpy cannot express.
 *
 *   message_run       the chain of whole MESSAGE records at the start of a read window
 *   entry_run         the same for DLedger entries (each wrapping one MESSAGE record)
 *   crc32_spans       zlib's crc32 of every record body
 *   split_properties  the TAGS / KEYS / UNIQ_KEY / DELAY value spans of every record
 *   split_tokens      the tokens of KEYS values (split on spaces, empty ones dropped)
 *   java_hash_spans   Java String.hashCode of ASCII spans (topics, keys)
 *   index_chains      IndexFile.putKey's slot chains, key by key
 *
 * Inputs are read-only buffers and C-contiguous int64 arrays; outputs are caller-provided
 * arrays. Every position is checked against its buffer before a byte there is read; a span
 * or slot outside makes the call fail with ValueError naming it. Layout constants (magics,
 * the smallest record, property names) are passed in from formats/, never restated here.
 * The loops run without the GIL.
 *
 * The numpy formulations (core=None in rmqtool/kernels and rmqtool/records/scan.py) are the
 * reference; tests/test_fastpath_equivalence.py and the 'native' fuzz target prove these
 * equal to them, and CI runs those under AddressSanitizer and UBSan.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <zlib.h>

/* spans ahead whose first bytes are asked for early: spans lie far apart (one per record) */
#define PREFETCH_AHEAD 8

typedef struct {
    Py_buffer buf, starts, lengths;
    int have_buf, have_starts, have_lengths;
} spans_t;

static void spans_release(spans_t *s)
{
    if (s->have_buf) PyBuffer_Release(&s->buf);
    if (s->have_starts) PyBuffer_Release(&s->starts);
    if (s->have_lengths) PyBuffer_Release(&s->lengths);
}

/* Take (buffer, starts, lengths); 0 on success, -1 with an exception set. */
static int spans_get(PyObject *buf, PyObject *starts, PyObject *lengths, spans_t *s, Py_ssize_t *n)
{
    memset(s, 0, sizeof(*s));
    if (PyObject_GetBuffer(buf, &s->buf, PyBUF_C_CONTIGUOUS) < 0) return -1;
    s->have_buf = 1;
    if (PyObject_GetBuffer(starts, &s->starts, PyBUF_C_CONTIGUOUS) < 0) return -1;
    s->have_starts = 1;
    if (PyObject_GetBuffer(lengths, &s->lengths, PyBUF_C_CONTIGUOUS) < 0) return -1;
    s->have_lengths = 1;
    if (s->starts.len % 8 || s->lengths.len != s->starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths must be int64 arrays of one length");
        return -1;
    }
    *n = s->starts.len / 8;
    return 0;
}

/* A writable output of exactly n items (any size when itemsize is 0). */
static int out_get(PyObject *out, Py_buffer *view, Py_ssize_t n, Py_ssize_t itemsize)
{
    if (PyObject_GetBuffer(out, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return -1;
    if (itemsize && view->len != n * itemsize) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "output must hold %zd items of %zd bytes", n, itemsize);
        return -1;
    }
    return 0;
}

/* Index of the first span outside [0, size), or -1 when all are inside. */
static Py_ssize_t first_bad_span(const int64_t *st, const int64_t *ln, Py_ssize_t n, int64_t size)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] < 0 || ln[i] < 0 || st[i] > size || ln[i] > size - st[i]) return i;
    }
    return -1;
}

static PyObject *bad_span(Py_ssize_t i, const int64_t *st, const int64_t *ln, int64_t size)
{
    PyErr_Format(PyExc_ValueError, "span %zd [%lld, +%lld) is outside the %lld-byte buffer", i,
                 (long long)st[i], (long long)ln[i], (long long)size);
    return NULL;
}

/* crc32_spans(buf, starts, lengths, out_uint32): zlib's crc32 of every span. */
static PyObject *crc32_spans(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf, *starts, *lengths, *out;
    if (!PyArg_ParseTuple(args, "OOOO", &buf, &starts, &lengths, &out)) return NULL;
    spans_t s;
    Py_ssize_t n;
    Py_buffer o;
    if (spans_get(buf, starts, lengths, &s, &n) < 0) { spans_release(&s); return NULL; }
    if (out_get(out, &o, n, 4) < 0) { spans_release(&s); return NULL; }
    const unsigned char *b = s.buf.buf;
    const int64_t *st = s.starts.buf, *ln = s.lengths.buf;
    uint32_t *crc = o.buf;
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = first_bad_span(st, ln, n, s.buf.len);
    if (bad < 0) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + PREFETCH_AHEAD < n) __builtin_prefetch(b + st[i + PREFETCH_AHEAD]);
            crc[i] = (uint32_t)crc32_z(0L, b + st[i], (z_size_t)ln[i]);
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *result = bad < 0 ? Py_NewRef(Py_None) : bad_span(bad, st, ln, s.buf.len);
    PyBuffer_Release(&o);
    spans_release(&s);
    return result;
}

/* split_tokens(buf, starts, lengths, sep, out_rec, out_start, out_len) -> count: the tokens of
 * every span split on the byte ``sep``, empty tokens dropped (a KEYS value split on single
 * spaces), spans in order and tokens in text order: the span number, the token's start in
 * buf and its length. The outputs are int64 with room for sum((length + 1) / 2) tokens. */
static PyObject *split_tokens(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf, *starts, *lengths, *rec_out, *start_out, *len_out;
    int sep;
    if (!PyArg_ParseTuple(args, "OOOiOOO", &buf, &starts, &lengths, &sep, &rec_out, &start_out, &len_out))
        return NULL;
    spans_t s;
    Py_ssize_t n;
    Py_buffer r, st_o, ln_o;
    if (spans_get(buf, starts, lengths, &s, &n) < 0) { spans_release(&s); return NULL; }
    if (out_get(rec_out, &r, 0, 0) < 0) { spans_release(&s); return NULL; }
    if (out_get(start_out, &st_o, 0, 0) < 0) { PyBuffer_Release(&r); spans_release(&s); return NULL; }
    if (out_get(len_out, &ln_o, 0, 0) < 0) {
        PyBuffer_Release(&st_o); PyBuffer_Release(&r); spans_release(&s); return NULL;
    }
    const unsigned char *b = s.buf.buf;
    const int64_t *st = s.starts.buf, *ln = s.lengths.buf;
    int64_t *rec = r.buf, *tok = st_o.buf, *tl = ln_o.buf;
    Py_ssize_t room = r.len / 8;
    if (st_o.len / 8 < room) room = st_o.len / 8;
    if (ln_o.len / 8 < room) room = ln_o.len / 8;
    Py_ssize_t bad, count = 0, short_room = 0;
    Py_BEGIN_ALLOW_THREADS
    bad = first_bad_span(st, ln, n, s.buf.len);
    if (bad < 0) {
        for (Py_ssize_t i = 0; i < n && !short_room; i++) {
            const unsigned char *p = b + st[i];
            int64_t len = ln[i], j = 0;
            while (j < len) {
                while (j < len && p[j] == (unsigned char)sep) j++;
                if (j == len) break;
                int64_t from = j;
                while (j < len && p[j] != (unsigned char)sep) j++;
                if (count == room) { short_room = 1; break; }
                rec[count] = i;
                tok[count] = st[i] + from;
                tl[count] = j - from;
                count++;
            }
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *result;
    if (bad >= 0) result = bad_span(bad, st, ln, s.buf.len);
    else if (short_room) { PyErr_SetString(PyExc_ValueError, "token outputs have too little room"); result = NULL; }
    else result = PyLong_FromSsize_t(count);
    PyBuffer_Release(&ln_o);
    PyBuffer_Release(&st_o);
    PyBuffer_Release(&r);
    spans_release(&s);
    return result;
}

/* java_hash_spans(buf, starts, lengths, out_int32, out_high_uint8): Java String.hashCode of
 * every span read as ASCII (Horner, * 31, wrapping in 32 bits); high[i] = 1 when the span
 * holds a byte >= 0x80, whose UTF-8 decoding the caller hashes instead. */
static PyObject *java_hash_spans(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf, *starts, *lengths, *out, *high_out;
    if (!PyArg_ParseTuple(args, "OOOOO", &buf, &starts, &lengths, &out, &high_out)) return NULL;
    spans_t s;
    Py_ssize_t n;
    Py_buffer o, h;
    if (spans_get(buf, starts, lengths, &s, &n) < 0) { spans_release(&s); return NULL; }
    if (out_get(out, &o, n, 4) < 0) { spans_release(&s); return NULL; }
    if (out_get(high_out, &h, n, 1) < 0) { PyBuffer_Release(&o); spans_release(&s); return NULL; }
    const unsigned char *b = s.buf.buf;
    const int64_t *st = s.starts.buf, *ln = s.lengths.buf;
    uint32_t *hash = o.buf;
    uint8_t *high = h.buf;
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = first_bad_span(st, ln, n, s.buf.len);
    if (bad < 0) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + PREFETCH_AHEAD < n) __builtin_prefetch(b + st[i + PREFETCH_AHEAD]);
            const unsigned char *p = b + st[i];
            uint32_t v = 0;
            unsigned char any = 0;
            for (int64_t j = 0; j < ln[i]; j++) {
                v = v * 31u + p[j];
                any |= p[j];
            }
            hash[i] = v;
            high[i] = any >> 7;
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *result = bad < 0 ? Py_NewRef(Py_None) : bad_span(bad, st, ln, s.buf.len);
    PyBuffer_Release(&h);
    PyBuffer_Release(&o);
    spans_release(&s);
    return result;
}

/* split_properties(buf, starts, lengths, names, out_start, out_len): the spans of the values of
 * ``names`` (a tuple of bytes) in every record's properties, as the broker's parser reads them:
 * segments split on 0x02, a segment's key up to its first 0x01, its value the rest (non-empty);
 * the last duplicate wins. out_start/out_len are int64 (len(names), records) arrays, written
 * only where a value is found (absolute buffer positions). Records with length <= 0 are skipped. */
#define MAX_NAMES 16
static PyObject *split_properties(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf, *starts, *lengths, *names, *out_start, *out_len;
    if (!PyArg_ParseTuple(args, "OOOO!OO", &buf, &starts, &lengths, &PyTuple_Type, &names, &out_start, &out_len))
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(names);
    if (k > MAX_NAMES) {
        PyErr_SetString(PyExc_ValueError, "too many property names");
        return NULL;
    }
    const char *name[MAX_NAMES];
    Py_ssize_t name_len[MAX_NAMES];
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *item = PyTuple_GET_ITEM(names, j);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "property names must be bytes");
            return NULL;
        }
        name[j] = PyBytes_AS_STRING(item);
        name_len[j] = PyBytes_GET_SIZE(item);
    }
    spans_t s;
    Py_ssize_t n;
    Py_buffer os, ol;
    if (spans_get(buf, starts, lengths, &s, &n) < 0) { spans_release(&s); return NULL; }
    if (out_get(out_start, &os, 0, 0) < 0) { spans_release(&s); return NULL; }
    if (os.len % (8 * (k ? k : 1)) || (k && os.len / (8 * k) < n)) {
        PyBuffer_Release(&os);
        spans_release(&s);
        PyErr_SetString(PyExc_ValueError, "out_start must be int64 (names, >= records)");
        return NULL;
    }
    Py_ssize_t stride = k ? os.len / (8 * k) : 0;
    if (out_get(out_len, &ol, stride * k, 8) < 0) { PyBuffer_Release(&os); spans_release(&s); return NULL; }
    const unsigned char *b = s.buf.buf;
    const int64_t *st = s.starts.buf, *ln = s.lengths.buf;
    int64_t *vs = os.buf, *vl = ol.buf;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {            /* records with no properties are not checked */
        if (ln[i] > 0 && (st[i] < 0 || st[i] > s.buf.len || ln[i] > s.buf.len - st[i])) { bad = i; break; }
    }
    if (bad < 0) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (ln[i] <= 0) continue;
            const unsigned char *p = b + st[i], *end = p + ln[i];
            while (p < end) {
                const unsigned char *seg_end = memchr(p, 0x02, (size_t)(end - p));
                if (!seg_end) seg_end = end;
                const unsigned char *eq = memchr(p, 0x01, (size_t)(seg_end - p));
                if (eq && eq + 1 < seg_end) {
                    Py_ssize_t key_len = eq - p;
                    for (Py_ssize_t j = 0; j < k; j++) {
                        if (key_len == name_len[j] && memcmp(p, name[j], (size_t)key_len) == 0) {
                            vs[j * stride + i] = (eq + 1) - b;
                            vl[j * stride + i] = seg_end - (eq + 1);
                        }
                    }
                }
                p = seg_end + 1;
            }
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *result = bad < 0 ? Py_NewRef(Py_None) : bad_span(bad, st, ln, s.buf.len);
    PyBuffer_Release(&ol);
    PyBuffer_Release(&os);
    spans_release(&s);
    return result;
}

static uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Take a read-only window and an int64 output with room for one start per ``step`` bytes of it
 * (plus one); 0 on success, -1 with an exception set and nothing held. */
static int window_and_starts(PyObject *window, PyObject *out, long long step, Py_buffer *w, Py_buffer *o)
{
    if (PyObject_GetBuffer(window, w, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (out_get(out, o, 0, 0) < 0) { PyBuffer_Release(w); return -1; }
    if (o->len / 8 < w->len / step + 1) {
        PyBuffer_Release(o);
        PyBuffer_Release(w);
        PyErr_SetString(PyExc_ValueError, "out_starts has too little room");
        return -1;
    }
    return 0;
}

/* message_run(window, limit, min_message, magic_v1, magic_v2, out_starts) -> (count, stop):
 * from position 0, follow TOTALSIZE while a MESSAGE magic sits at a position below ``limit``
 * (with room for the 8-byte prefix) whose TOTALSIZE is at least ``min_message`` and whose
 * record ends inside the window. out_starts receives the record starts (int64; room for
 * len(window) / min_message + 1); stop is the first position not taken. */
static PyObject *message_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *window, *out;
    long long limit, min_message;
    unsigned long magic_v1, magic_v2;
    if (!PyArg_ParseTuple(args, "OLLkkO", &window, &limit, &min_message, &magic_v1, &magic_v2, &out)) return NULL;
    if (min_message < 8) {
        PyErr_SetString(PyExc_ValueError, "min_message must be at least the 8-byte prefix");
        return NULL;
    }
    Py_buffer w, o;
    if (window_and_starts(window, out, min_message, &w, &o) < 0) return NULL;
    const unsigned char *b = w.buf;
    int64_t n = w.len, count = 0, p = 0;
    int64_t last = n - 8 + 1;                 /* the prefix must fit */
    if (limit < last) last = limit;
    int64_t *starts = o.buf;
    Py_BEGIN_ALLOW_THREADS
    while (p >= 0 && p < last) {
        uint32_t magic = be32(b + p + 4);
        if (magic != magic_v1 && magic != magic_v2) break;
        int64_t total = (int32_t)be32(b + p);
        if (total < min_message || total > n - p) break;
        starts[count++] = p;                  /* count <= n / min_message: p grows by >= min_message */
        p += total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&o);
    PyBuffer_Release(&w);
    return Py_BuildValue("LL", (long long)count, (long long)p);
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)be32(p) << 32) | be32(p + 4));
}

/* entry_run(window, limit, window_pos, entry_magic, body_offset, pos_at, body_length_at,
 *           min_message, magic_v1, magic_v2, out_starts) -> (count, stop):
 * the DLedger entries from position 0 that the scalar entry walk (scan._walk_entries) takes
 * without stopping: below ``limit``, the entry magic, a size that holds a message and ends
 * inside the window, a stored pos equal to window_pos + position, and a body that is one whole
 * MESSAGE record (body length = size - body_offset = the record's TOTALSIZE, a MESSAGE magic).
 * out_starts receives the record starts (position + body_offset; room for
 * len(window) / (body_offset + min_message) + 1); stop is the first position not taken. */
static PyObject *entry_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *window, *out;
    long long limit, window_pos, body_offset, pos_at, body_length_at, min_message;
    long entry_magic;
    unsigned long magic_v1, magic_v2;
    if (!PyArg_ParseTuple(args, "OLLlLLLLkkO", &window, &limit, &window_pos, &entry_magic, &body_offset, &pos_at,
                          &body_length_at, &min_message, &magic_v1, &magic_v2, &out)) return NULL;
    if (min_message < 8 || pos_at < 0 || body_length_at < 0 || pos_at + 8 > body_offset
        || body_length_at + 4 > body_offset) {
        PyErr_SetString(PyExc_ValueError, "entry layout: fields must lie inside the header, min_message >= 8");
        return NULL;
    }
    Py_buffer w, o;
    if (window_and_starts(window, out, body_offset + min_message, &w, &o) < 0) return NULL;
    const unsigned char *b = w.buf;
    int64_t n = w.len, count = 0, p = 0;
    int64_t *starts = o.buf;
    Py_BEGIN_ALLOW_THREADS
    while (p < limit && p <= n - body_offset - 8) {        /* header and the record's prefix fit */
        if ((int32_t)be32(b + p) != entry_magic) break;
        int64_t size = (int32_t)be32(b + p + 4);
        if (size < body_offset + min_message || size > n - p) break;
        if (be64(b + p + pos_at) != window_pos + p) break;
        int64_t body = (int32_t)be32(b + p + body_length_at);
        int64_t total = (int32_t)be32(b + p + body_offset);
        uint32_t magic = be32(b + p + body_offset + 4);
        if (body != size - body_offset || total != body || (magic != magic_v1 && magic != magic_v2)) break;
        starts[count++] = p + body_offset;    /* count <= n / size: p grows by >= body_offset + min_message */
        p += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&o);
    PyBuffer_Release(&w);
    return Py_BuildValue("LL", (long long)count, (long long)p);
}

/* index_chains(slot_of_key, slots, count, out_prev) -> slots newly used: IndexFile.putKey's
 * chain for each key in turn. slot_of_key: int64 slot of every key (each in [0, slots));
 * slots: the file's slot table (native int32, updated in place); count: the file's
 * indexCount before these keys (key i becomes entry count + i). A key's prevIndex is the
 * previous key of its slot here, else the slot's old value when that is a valid entry
 * (in (0, count]), else 0. Returns how many slots had no valid value (hashSlotCount grows). */
static PyObject *index_chains(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *slot_obj, *slots_obj, *prev_obj;
    long long count;
    if (!PyArg_ParseTuple(args, "OOLO", &slot_obj, &slots_obj, &count, &prev_obj)) return NULL;
    Py_buffer sk, sl, pv;
    if (PyObject_GetBuffer(slot_obj, &sk, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (sk.len % 8) {
        PyBuffer_Release(&sk);
        PyErr_SetString(PyExc_ValueError, "slot_of_key must be int64");
        return NULL;
    }
    Py_ssize_t n = sk.len / 8;
    if (out_get(slots_obj, &sl, 0, 0) < 0) { PyBuffer_Release(&sk); return NULL; }
    if (out_get(prev_obj, &pv, n, 4) < 0) { PyBuffer_Release(&sl); PyBuffer_Release(&sk); return NULL; }
    const int64_t *slot = sk.buf;
    int32_t *table = sl.buf;
    int64_t hash_slots = sl.len / 4;
    int32_t *prev = pv.buf;
    Py_ssize_t bad = -1;
    long long fresh = 0;
    /* which slots this run has written: their value is then the previous key, always taken */
    unsigned char *touched = calloc((size_t)(hash_slots / 8 + 1), 1);
    if (!touched) {
        PyBuffer_Release(&pv);
        PyBuffer_Release(&sl);
        PyBuffer_Release(&sk);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slot[i] < 0 || slot[i] >= hash_slots) { bad = i; break; }
    }
    if (bad < 0) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + PREFETCH_AHEAD < n) __builtin_prefetch(table + slot[i + PREFETCH_AHEAD]);
            int64_t s_i = slot[i];
            int64_t value = table[s_i];
            int64_t entry = count + i;
            if (touched[s_i >> 3] & (1u << (s_i & 7))) {
                prev[i] = (int32_t)value;
            } else if (value > 0 && value <= count) {     /* putKey: other values count as empty */
                prev[i] = (int32_t)value;
            } else {
                prev[i] = 0;
                fresh++;
            }
            touched[s_i >> 3] |= (unsigned char)(1u << (s_i & 7));
            table[s_i] = (int32_t)entry;
        }
    }
    Py_END_ALLOW_THREADS
    free(touched);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&sl);
    PyBuffer_Release(&sk);
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "key %zd has slot %lld outside [0, %lld)", bad, (long long)slot[bad],
                     (long long)hash_slots);
        return NULL;
    }
    return PyLong_FromLongLong(fresh);
}

static PyMethodDef methods[] = {
    {"index_chains", index_chains, METH_VARARGS,
     "index_chains(slot_of_key, slots, count, out_prev): putKey chains; returns slots newly used"},
    {"entry_run", entry_run, METH_VARARGS,
     "entry_run(window, limit, window_pos, entry_magic, body_offset, pos_at, body_length_at, min_message, "
     "magic_v1, magic_v2, out): the DLedger entries from 0 the scalar walk takes"},
    {"message_run", message_run, METH_VARARGS,
     "message_run(window, limit, min_message, magic_v1, magic_v2, out): the chain of whole MESSAGE records from 0"},
    {"split_tokens", split_tokens, METH_VARARGS,
     "split_tokens(buf, starts, lengths, sep, out_rec, out_start, out_len): tokens of every span; returns count"},
    {"split_properties", split_properties, METH_VARARGS,
     "split_properties(buf, starts, lengths, names, out_start, out_len): spans of the named property values"},
    {"crc32_spans", crc32_spans, METH_VARARGS, "crc32_spans(buf, starts, lengths, out): zlib crc32 of each span"},
    {"java_hash_spans", java_hash_spans, METH_VARARGS,
     "java_hash_spans(buf, starts, lengths, out, high): Java hashCode of each ASCII span; high marks the rest"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "rmqtool's native core", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
