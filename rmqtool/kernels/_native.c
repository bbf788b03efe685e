/*
 * rmqtool's native core: the per-record loops numpy cannot express.
 *
 *   message_run       the chain of whole MESSAGE records at the start of a read window
 *   entry_run         the same for DLedger entries (each wrapping one MESSAGE record)
 *   crc32_spans       zlib's crc32 of every record body
 *   split_properties  the TAGS / KEYS / UNIQ_KEY / DELAY value spans of every record
 *   split_tokens      the tokens of KEYS values (split on spaces, empty ones dropped)
 *   java_hash_spans   Java String.hashCode of ASCII spans (topics, keys)
 *   index_entries     IndexFile.putKey key by key: slot chains and whole entries
 *   dispatch_columns  a batch's topic groups, ConsumeQueue units and index keys in one loop
 *   search_sorted     numpy.searchsorted of values in (mostly) ascending order
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
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* spans ahead whose first bytes are asked for early: spans lie far apart (one per record) */
#define PREFETCH_AHEAD 8
#ifndef SCAN_AHEAD
/* bytes ahead of the record being taken that scan_records asks for */
#define SCAN_AHEAD 4096
#endif

/* ---- CRC32 (zlib's polynomial, reflected) of one span ------------------------------------------
 * zlib's crc32_z, or on x86-64 with PCLMULQDQ and SSE4.1 the carry-less-multiply folding of Gopal et
 * al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel, 2009) for
 * the whole 16-byte blocks of spans of 64 bytes or more, zlib finishing the rest. The constants are
 * k(n) = reflect32(x^n mod P) << 1 for P = 0x104C11DB7, and Barrett's P' and mu' = floor(x^64 / P)
 * reflected (33 bits); tests/test_fastpath_equivalence.py derives them again from P and proves the
 * result equal to zlib.crc32 for every length and alignment. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CRC_FOLD_CONSTANTS 8
static const uint64_t crc_fold[CRC_FOLD_CONSTANTS] = {
    0x154442bd4, 0x1c6e41596,   /* k(4*128+32), k(4*128-32): four blocks folded 64 bytes ahead */
    0x1751997d0, 0x0ccaa009e,   /* k(128+32), k(128-32): one block folded 16 bytes ahead */
    0x163cd6124, 0x1db710640,   /* k(64), k(32): 64 bits folded to 32 */
    0x1db710641, 0x1f7011641,   /* P', mu': Barrett reduction */
};
static int crc_use_clmul = -1;  /* -1: not asked yet */

__attribute__((target("pclmul,sse4.1")))
static inline __m128i crc_fold_block(__m128i acc, __m128i k, __m128i next)
{
    __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00), hi = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* The inverted running CRC ``crc`` over ``len`` bytes (len >= 64, a multiple of 16). */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(const unsigned char *buf, size_t len, uint32_t crc)
{
    __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)buf), _mm_cvtsi32_si128((int)crc));
    __m128i b = _mm_loadu_si128((const __m128i *)(buf + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(buf + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(buf + 48));
    __m128i k = _mm_set_epi64x((long long)crc_fold[1], (long long)crc_fold[0]);
    for (buf += 64, len -= 64; len >= 64; buf += 64, len -= 64) {
        a = crc_fold_block(a, k, _mm_loadu_si128((const __m128i *)buf));
        b = crc_fold_block(b, k, _mm_loadu_si128((const __m128i *)(buf + 16)));
        c = crc_fold_block(c, k, _mm_loadu_si128((const __m128i *)(buf + 32)));
        d = crc_fold_block(d, k, _mm_loadu_si128((const __m128i *)(buf + 48)));
    }
    k = _mm_set_epi64x((long long)crc_fold[3], (long long)crc_fold[2]);
    a = crc_fold_block(a, k, b);
    a = crc_fold_block(a, k, c);
    a = crc_fold_block(a, k, d);
    for (; len >= 16; buf += 16, len -= 16) a = crc_fold_block(a, k, _mm_loadu_si128((const __m128i *)buf));
    /* 128 bits to 64: the low half times k(128-32) added to the high half */
    __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, k, 0x10));
    /* 64 bits to 32: the low 32 bits times k(64) added to the rest */
    __m128i k64 = _mm_set_epi64x(0, (long long)crc_fold[4]);
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), k64, 0x00), _mm_srli_si128(a, 4));
    /* Barrett: q = floor(a * mu' / x^32), crc = a + q * P' */
    __m128i pm = _mm_set_epi64x((long long)crc_fold[7], (long long)crc_fold[6]);
    __m128i q = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), pm, 0x10), low32);
    a = _mm_xor_si128(a, _mm_clmulepi64_si128(q, pm, 0x00));
    return (uint32_t)_mm_extract_epi32(a, 1);
}
#endif

#ifdef CRC_FOLD_CONSTANTS
/* zlib's own byte table (get_crc_table), for the few bytes after the folded blocks: a call into
 * crc32_z per record cost more than its bytes */
static const z_crc_t *crc_table;
#endif

/* zlib's crc32(0, buf, len). */
static inline uint32_t crc32_span(const unsigned char *buf, size_t len)
{
    uint32_t crc = 0;
#ifdef CRC_FOLD_CONSTANTS
    if (crc_use_clmul && len >= 64) {
        size_t blocks = len & ~(size_t)15;
        uint32_t c = crc32_clmul(buf, blocks, ~crc);       /* the register, not yet inverted */
        for (size_t i = blocks; i < len; i++) c = (uint32_t)crc_table[(c ^ buf[i]) & 0xff] ^ (c >> 8);
        return ~c;
    }
#endif
    return (uint32_t)crc32_z(crc, buf, (z_size_t)len);
}

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
            crc[i] = crc32_span(b + st[i], (size_t)ln[i]);
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

/* Java's String.hashCode continued from ``h`` over ``len`` ASCII bytes (h * 31 + c per byte,
 * wrapping in 32 bits), four bytes per step so the multiplications do not wait on each other
 * (the same sum: 32-bit arithmetic is exact modulo 2^32 in any order); ``any`` collects the bytes'
 * bits (a byte >= 0x80 leaves bit 7 set). */
/* IndexService's slot hash of a key: abs(String.hashCode), Integer.MIN_VALUE folded to 0 (format.md §5). */
static inline int32_t index_hash(uint32_t h)
{
    return (int32_t)h == INT32_MIN ? 0 : ((int32_t)h < 0 ? -(int32_t)h : (int32_t)h);
}

/* The next KEYS token of p[*j, len) split on sep, empty tokens skipped as String.split drops them:
   1 with the token at [*from, *j), or 0 past the last one. */
static inline int next_key_token(const unsigned char *p, int64_t len, unsigned char sep, int64_t *j, int64_t *from)
{
    while (*j < len && p[*j] == sep) (*j)++;
    if (*j == len) return 0;
    *from = *j;
    while (*j < len && p[*j] != sep) (*j)++;
    return 1;
}

static inline uint32_t java_hash_continue(uint32_t h, const unsigned char *p, int64_t len, unsigned char *any)
{
    const uint32_t m2 = 31u * 31u, m3 = m2 * 31u, m4 = m3 * 31u;
    unsigned char bits = 0;
    int64_t j = 0;
    for (; j + 4 <= len; j += 4) {
        h = h * m4 + (uint32_t)p[j] * m3 + (uint32_t)p[j + 1] * m2 + (uint32_t)p[j + 2] * 31u + p[j + 3];
        bits |= p[j] | p[j + 1] | p[j + 2] | p[j + 3];
    }
    for (; j < len; j++) {
        h = h * 31u + p[j];
        bits |= p[j];
    }
    *any |= bits;
    return h;
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
            unsigned char any = 0;
            hash[i] = java_hash_continue(0, b + st[i], ln[i], &any);
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

#define MAX_NAMES 16
/* Property names, with each name of at most 8 bytes also as one word (its bytes, zero-padded) so a
 * key is matched by one comparison. */
typedef struct {
    Py_ssize_t k;
    const char *name[MAX_NAMES];
    Py_ssize_t len[MAX_NAMES];
    uint64_t word[MAX_NAMES];
} names_t;

/* The word of the first ``len`` (<= 8) bytes at p, the rest zero (in memory order on any host). */
static inline uint64_t prefix_word(const unsigned char *p, Py_ssize_t len)
{
    unsigned char bytes[8] = {0};
    memcpy(bytes, p, (size_t)len);
    uint64_t w;
    memcpy(&w, bytes, 8);
    return w;
}

/* prefix_masks[n]: a word whose first n bytes in memory are 0xff */
static uint64_t prefix_masks[9];

static void init_prefix_masks(void)
{
    static const unsigned char ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    for (int n = 0; n <= 8; n++) prefix_masks[n] = prefix_word(ones, n);
}

/* The property names of a tuple of bytes (at most MAX_NAMES); 0, or -1 with an exception set.
 * The pointers stay valid while the tuple lives. */
static int take_names(PyObject *names, names_t *out)
{
    out->k = PyTuple_GET_SIZE(names);
    if (out->k > MAX_NAMES) {
        PyErr_SetString(PyExc_ValueError, "too many property names");
        return -1;
    }
    for (Py_ssize_t j = 0; j < out->k; j++) {
        PyObject *item = PyTuple_GET_ITEM(names, j);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "property names must be bytes");
            return -1;
        }
        out->name[j] = PyBytes_AS_STRING(item);
        out->len[j] = PyBytes_GET_SIZE(item);
        out->word[j] = out->len[j] <= 8 ? prefix_word((const unsigned char *)out->name[j], out->len[j]) : 0;
    }
    return 0;
}

/* The pair [seg, q) of one record's properties (which end at ``end``), its first 0x01 at ``eq``
 * (NULL: none): a non-empty value whose name is one of ``names`` goes to vs[j] / vl[j]. */
static inline void split_pair(const unsigned char *b, const unsigned char *seg, const unsigned char *eq,
                              const unsigned char *q, const unsigned char *end, const names_t *restrict names,
                              int64_t *restrict vs, int64_t *restrict vl)
{
    if (!eq || eq + 1 >= q) return;
    Py_ssize_t key_len = eq - seg, k = names->k;
    /* a key of at most 8 bytes with 8 bytes to read: compared as one word */
    int as_word = key_len <= 8 && end - seg >= 8;
    uint64_t key = 0;
    if (as_word) {
        memcpy(&key, seg, 8);
        key &= prefix_masks[key_len];
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        if (key_len != names->len[j]) continue;
        if (as_word) {
            if (key != names->word[j]) continue;
        } else {
            Py_ssize_t i = 0;
            while (i < key_len && seg[i] == (unsigned char)names->name[j][i]) i++;
            if (i != key_len) continue;
        }
        vs[j] = (eq + 1) - b;
        vl[j] = q - (eq + 1);
    }
}

#ifdef __SSE2__
/* The separators of the 16 bytes at ``block`` from its byte ``skip`` on, in order: a 0x02 ends the
 * pair that began at *seg, the first 0x01 of a pair is its *eq. */
static inline void split_block(const unsigned char *b, const unsigned char *block, unsigned skip,
                               const unsigned char **seg, const unsigned char **eq, const unsigned char *end,
                               const names_t *names, int64_t *vs, int64_t *vl)
{
    __m128i v = _mm_loadu_si128((const __m128i *)block);
    unsigned pair_ends = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x02))) >> skip << skip;
    unsigned marks = pair_ends | ((unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x01))) >> skip << skip);
    while (marks) {
        unsigned i = (unsigned)__builtin_ctz(marks);
        marks &= marks - 1;
        if (pair_ends >> i & 1) {
            split_pair(b, *seg, *eq, block + i, end, names, vs, vl);
            *seg = block + i + 1;
            *eq = NULL;
        } else if (!*eq) {
            *eq = block + i;
        }
    }
}
#endif

/* One record's property value spans (the rule of split_properties): vs[j] / vl[j] (one per name) are
 * set where name j has a value, and left as they are elsewhere. */
static void split_one(const unsigned char *b, int64_t start, int64_t len, const names_t *names, int64_t *vs,
                      int64_t *vl)
{
    const unsigned char *seg = b + start, *end = seg + len, *eq = NULL, *q = seg;
#ifdef __SSE2__
    /* sixteen bytes at a time, the separators' positions as bit masks visited in order (the values
     * are short and separators frequent: a scalar loop stopped every few bytes); the last partial
     * block as the 16 bytes that end the properties, the bytes already seen masked off */
    for (; end - q >= 16; q += 16) split_block(b, q, 0, &seg, &eq, end, names, vs, vl);
    if (q < end && len >= 16) {
        split_block(b, end - 16, (unsigned)(q - (end - 16)), &seg, &eq, end, names, vs, vl);
        q = end;
    }
#endif
    for (;; q++) {                  /* the rest, byte by byte (short properties; all without SSE2) */
        if (q == end || *q == 0x02) {
            split_pair(b, seg, eq, q, end, names, vs, vl);
            if (q == end) break;
            seg = q + 1;
            eq = NULL;
        } else if (*q == 0x01 && !eq) {
            eq = q;
        }
    }
}

/* split_properties(buf, starts, lengths, names, out_start, out_len): the spans of the values of
 * ``names`` (a tuple of bytes) in every record's properties, as the broker's parser reads them:
 * segments split on 0x02, a segment's key up to its first 0x01, its value the rest (non-empty);
 * the last duplicate wins. out_start/out_len are int64 (len(names), records) arrays, written
 * only where a value is found (absolute buffer positions). Records with length <= 0 are skipped. */
static PyObject *split_properties(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf, *starts, *lengths, *names, *out_start, *out_len;
    if (!PyArg_ParseTuple(args, "OOOO!OO", &buf, &starts, &lengths, &PyTuple_Type, &names, &out_start, &out_len))
        return NULL;
    names_t nm;
    if (take_names(names, &nm) < 0) return NULL;
    Py_ssize_t k = nm.k;
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
            int64_t found_start[MAX_NAMES], found_len[MAX_NAMES];
            for (Py_ssize_t j = 0; j < k; j++) found_len[j] = -1;
            split_one(b, st[i], ln[i], &nm, found_start, found_len);
            for (Py_ssize_t j = 0; j < k; j++) {          /* written only where found */
                if (found_len[j] < 0) continue;
                vs[j * stride + i] = found_start[j];
                vl[j * stride + i] = found_len[j];
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

static inline uint32_t be32(const unsigned char *p)
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

static inline int64_t be64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)be32(p) << 32) | be32(p + 4));
}

/* The one chain rule of the walks (message_run, scan_records): the TOTALSIZE of the MESSAGE record
 * at p when a MESSAGE magic sits there, TOTALSIZE >= min_message and the record ends inside the n
 * bytes; -1 otherwise. The caller has checked that the 8-byte prefix fits. */
static inline int64_t message_step(const unsigned char *b, int64_t n, int64_t p, uint32_t v1, uint32_t v2,
                                   int64_t min_message)
{
    uint32_t magic = be32(b + p + 4);
    if (magic != v1 && magic != v2) return -1;
    int64_t total = (int32_t)be32(b + p);
    return total < min_message || total > n - p ? -1 : total;
}

/* The one entry rule of the DLedger walks (entry_run, scan_records): the size of the entry at p when
 * it has the entry magic, a size that holds a message and ends inside the n bytes, its own pos
 * (window_pos + p) and a body that is one whole MESSAGE record (whose length goes to *total); -1
 * otherwise. The caller has checked that the header and the record's prefix fit. */
static inline int64_t entry_step(const unsigned char *b, int64_t n, int64_t p, int64_t window_pos, long entry_magic,
                                 int64_t body_offset, int64_t pos_at, int64_t body_length_at, int64_t min_message,
                                 uint32_t v1, uint32_t v2, int64_t *total)
{
    if ((int32_t)be32(b + p) != entry_magic) return -1;
    int64_t size = (int32_t)be32(b + p + 4);
    if (size < body_offset + min_message || size > n - p) return -1;
    if (be64(b + p + pos_at) != window_pos + p) return -1;
    int64_t body = (int32_t)be32(b + p + body_length_at);
    uint32_t magic = be32(b + p + body_offset + 4);
    if (body != size - body_offset || (int32_t)be32(b + p + body_offset) != body || (magic != v1 && magic != v2))
        return -1;
    *total = body;
    return size;
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
        int64_t total = message_step(b, n, p, (uint32_t)magic_v1, (uint32_t)magic_v2, min_message);
        if (total < 0) break;
        starts[count++] = p;                  /* count <= n / min_message: p grows by >= min_message */
        p += total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&o);
    PyBuffer_Release(&w);
    return Py_BuildValue("LL", (long long)count, (long long)p);
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
        int64_t total, size = entry_step(b, n, p, window_pos, entry_magic, body_offset, pos_at, body_length_at,
                                         min_message, (uint32_t)magic_v1, (uint32_t)magic_v2, &total);
        if (size < 0) break;
        starts[count++] = p + body_offset;    /* count <= n / size: p grows by >= body_offset + min_message */
        p += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&o);
    PyBuffer_Release(&w);
    return Py_BuildValue("LL", (long long)count, (long long)p);
}

/* index_entries(key_hash, phy, ts, slots, count, begin, layout, out) -> slots newly used: IndexFile.putKey
 * for each key in turn, its entry written whole. key_hash: int32 or int64 (each key's slot is its
 * floor modulo the table's length, as numpy.remainder); phy, ts: int64; slots: the file's slot
 * table (native int32, updated in place); count: the file's indexCount before these keys (key i
 * becomes entry count + i); begin: the begin timestamp the time differences count from (<= 0: all
 * 0); layout: int64 (entry size, then the positions of keyHash (4 bytes), phyOffset (8), timeDiff (4)
 * and prevIndex (4), from formats/indexfile.py); out: room for one big-endian entry per key. A key's
 * prevIndex is the previous key of its slot here, else the slot's old value when that is a valid
 * entry (in (0, count]), else 0 (the slot counts as newly used); its timeDiff (ts - begin) / 1000
 * clipped to [0, Integer.MAX_VALUE] (the difference wrapping in 64 bits, as numpy's does). */
static inline void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline int64_t floor_mod(int64_t h, int64_t m)
{
    int64_t r;
    if (h >= 0 && h <= INT32_MAX && m <= INT32_MAX) r = (int64_t)((uint32_t)h % (uint32_t)m);   /* the usual case */
    else r = h % m;
    return r < 0 ? r + m : r;
}

/* keys ahead whose slots are asked for early: a random slot of a 20 MB table is a miss to memory,
 * and a key's work is short */
#define SLOTS_AHEAD 32

enum { IX_SIZE, IX_HASH_AT, IX_PHY_AT, IX_DIFF_AT, IX_PREV_AT, IX_COUNT };

static PyObject *index_entries(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *hash_obj, *phy_obj, *ts_obj, *slots_obj, *layout_obj, *out_obj;
    long long count, begin;
    if (!PyArg_ParseTuple(args, "OOOOLLOO", &hash_obj, &phy_obj, &ts_obj, &slots_obj, &count, &begin, &layout_obj,
                          &out_obj))
        return NULL;
    Py_buffer hb, pb, tb, sl, lv, ob;
    int have = 0;
    PyObject *result = NULL;
    const char *problem = NULL;
    if (PyObject_GetBuffer(hash_obj, &hb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    have = 1;
    if (PyObject_GetBuffer(phy_obj, &pb, PyBUF_C_CONTIGUOUS) < 0) goto done;
    have = 2;
    if (PyObject_GetBuffer(ts_obj, &tb, PyBUF_C_CONTIGUOUS) < 0) goto done;
    have = 3;
    if (out_get(slots_obj, &sl, 0, 0) < 0) goto done;
    have = 4;
    if (PyObject_GetBuffer(layout_obj, &lv, PyBUF_C_CONTIGUOUS) < 0) goto done;
    have = 5;
    if (out_get(out_obj, &ob, 0, 0) < 0) goto done;
    have = 6;
    Py_ssize_t width = hb.itemsize, n = width ? hb.len / width : 0;
    const int64_t *L = lv.buf;
    const char *fmt = hb.format ? hb.format : "B";
    int native_int = (fmt[0] == 'i' || fmt[0] == 'l' || fmt[0] == 'q') && fmt[1] == 0;
    if (!native_int || (width != 4 && width != 8) || hb.len % width) problem = "key_hash must be int32 or int64";
    else if (pb.len != 8 * n || tb.len != 8 * n) problem = "phy and ts must be int64, one per key";
    else if (sl.len % 4 || sl.len == 0) problem = "slots must be a non-empty int32 table";
    else if (lv.len != 8 * IX_COUNT) problem = "layout must be (entry size, keyHash, phyOffset, timeDiff, prevIndex)";
    else if (L[IX_HASH_AT] < 0 || L[IX_HASH_AT] + 4 > L[IX_SIZE] || L[IX_PHY_AT] < 0 || L[IX_PHY_AT] + 8 > L[IX_SIZE]
             || L[IX_DIFF_AT] < 0 || L[IX_DIFF_AT] + 4 > L[IX_SIZE] || L[IX_PREV_AT] < 0
             || L[IX_PREV_AT] + 4 > L[IX_SIZE])
        problem = "an entry field outside the entry";
    else if (ob.len != L[IX_SIZE] * n) problem = "out must hold one entry per key";
    if (problem) {
        PyErr_SetString(PyExc_ValueError, problem);
        goto done;
    }
    int32_t *table = sl.buf;
    int64_t hash_slots = sl.len / 4, size = L[IX_SIZE];
    const int64_t *phy = pb.buf, *ts = tb.buf;
    const unsigned char *hashes = hb.buf;
    unsigned char *out = ob.buf;
    long long fresh = 0;
    /* which slots this call has written: their value is then the previous key, always taken */
    unsigned char *touched = calloc((size_t)(hash_slots / 8 + 1), 1);
    if (!touched) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    int64_t ring[SLOTS_AHEAD];       /* the slots of the keys ahead, asked for early */
#define KEY_HASH(i) (width == 4 ? (int64_t)((const int32_t *)hashes)[i] : ((const int64_t *)hashes)[i])
    for (Py_ssize_t i = 0; i < n && i < SLOTS_AHEAD; i++) ring[i] = floor_mod(KEY_HASH(i), hash_slots);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s_i = ring[i % SLOTS_AHEAD];
        if (i + SLOTS_AHEAD < n) {
            int64_t ahead = floor_mod(KEY_HASH(i + SLOTS_AHEAD), hash_slots);
            ring[i % SLOTS_AHEAD] = ahead;
            __builtin_prefetch(table + ahead);
        }
        int64_t value = table[s_i], prev;
        if ((touched[s_i >> 3] & (1u << (s_i & 7))) || (value > 0 && value <= count)) {
            prev = value;                /* putKey: other old values count as empty */
        } else {
            prev = 0;
            fresh++;
        }
        touched[s_i >> 3] |= (unsigned char)(1u << (s_i & 7));
        table[s_i] = (int32_t)(count + i);
        int64_t diff = 0;
        if (begin > 0) {
            diff = (int64_t)((uint64_t)ts[i] - (uint64_t)begin);
            diff = diff < 0 ? 0 : diff > (int64_t)INT32_MAX * 1000 ? (int64_t)INT32_MAX * 1000 : diff;
            diff /= 1000;
        }
        unsigned char *e = out + i * size;
        put_be32(e + L[IX_HASH_AT], (uint32_t)KEY_HASH(i));
        put_be32(e + L[IX_PHY_AT], (uint32_t)((uint64_t)phy[i] >> 32));
        put_be32(e + L[IX_PHY_AT] + 4, (uint32_t)phy[i]);
        put_be32(e + L[IX_DIFF_AT], (uint32_t)diff);
        put_be32(e + L[IX_PREV_AT], (uint32_t)prev);
    }
#undef KEY_HASH
    Py_END_ALLOW_THREADS
    free(touched);
    result = PyLong_FromLongLong(fresh);
done:
    if (have >= 6) PyBuffer_Release(&ob);
    if (have >= 5) PyBuffer_Release(&lv);
    if (have >= 4) PyBuffer_Release(&sl);
    if (have >= 3) PyBuffer_Release(&tb);
    if (have >= 2) PyBuffer_Release(&pb);
    if (have >= 1) PyBuffer_Release(&hb);
    return result;
}


/* ---- scan_records: the chain walk, every record's columns, its property spans and (asked) its
 * body CRC in one pass over a window, while each record's bytes are in the CPU cache. ------------
 *
 * The layout (field positions and sizes, host sizes, flags) is passed in as int64 values named by
 * SCAN_LAYOUT; the outputs are named by SCAN_COLUMNS. Python builds the one from formats/ and reads
 * the other by name (records/scan.py), so neither order is restated there. The numpy path
 * (scan._message_run + scan._decode_columns + extract_properties + body_crc_matches) is the
 * reference; tests/test_fastpath_equivalence.py proves this equal to it. */
enum {
    L_TOTAL_AT, L_TOTAL_SIZE, L_TOTAL_SIGNED, L_MAGIC_AT, L_MAGIC_SIZE, L_MAGIC_SIGNED,
    L_BODY_CRC_AT, L_BODY_CRC_SIZE, L_BODY_CRC_SIGNED, L_QUEUE_ID_AT, L_QUEUE_ID_SIZE, L_QUEUE_ID_SIGNED,
    L_FLAG_AT, L_FLAG_SIZE, L_FLAG_SIGNED, L_QUEUE_OFFSET_AT, L_QUEUE_OFFSET_SIZE, L_QUEUE_OFFSET_SIGNED,
    L_PHY_AT, L_PHY_SIZE, L_PHY_SIGNED, L_SYS_FLAG_AT, L_SYS_FLAG_SIZE, L_SYS_FLAG_SIGNED,
    L_BORN_TS_AT, L_BORN_TS_SIZE, L_BORN_TS_SIGNED,
    L_RECONSUME_AT, L_RECONSUME_SIZE, L_RECONSUME_SIGNED, L_PREPARED_AT, L_PREPARED_SIZE, L_PREPARED_SIGNED,
    L_BODY_LENGTH_AT, L_BODY_LENGTH_SIZE, L_BODY_LENGTH_SIGNED,
    L_STORE_TS_SIZE, L_STORE_TS_SIGNED, L_TOPIC_V1_SIZE, L_TOPIC_V2_SIZE, L_TOPIC_SIGNED,
    L_PROPS_SIZE, L_PROPS_SIGNED,
    L_HEAD_SIZE, L_TAIL_SIZE, L_FIXED_SIZE, L_HOST_V4, L_HOST_V6, L_BORN_V6_FLAG, L_STORE_V6_FLAG,
    L_MAGIC_V1, L_MAGIC_V2, L_MIN_MESSAGE, L_CRC_MASK, L_COUNT
};
static const char *const scan_layout_names[L_COUNT] = {
    "head.total_size.at", "head.total_size.size", "head.total_size.signed",
    "head.magic.at", "head.magic.size", "head.magic.signed",
    "head.body_crc.at", "head.body_crc.size", "head.body_crc.signed",
    "head.queue_id.at", "head.queue_id.size", "head.queue_id.signed",
    "head.flag.at", "head.flag.size", "head.flag.signed",
    "head.queue_offset.at", "head.queue_offset.size", "head.queue_offset.signed",
    "head.physical_offset.at", "head.physical_offset.size", "head.physical_offset.signed",
    "head.sys_flag.at", "head.sys_flag.size", "head.sys_flag.signed",
    "head.born_timestamp.at", "head.born_timestamp.size", "head.born_timestamp.signed",
    "tail.reconsume_times.at", "tail.reconsume_times.size", "tail.reconsume_times.signed",
    "tail.prepared_transaction_offset.at", "tail.prepared_transaction_offset.size",
    "tail.prepared_transaction_offset.signed",
    "tail.body_length.at", "tail.body_length.size", "tail.body_length.signed",
    "store_timestamp.size", "store_timestamp.signed", "topic_length_v1.size", "topic_length_v2.size",
    "topic_length.signed", "properties_length.size", "properties_length.signed",
    "head_size", "tail_size", "fixed_size", "host_v4_size", "host_v6_size", "born_v6_flag", "store_v6_flag",
    "magic_v1", "magic_v2", "min_message", "body_crc_mask",
};
enum {
    C_POSITION, C_SIZE, C_MAGIC, C_BODY_CRC, C_QUEUE_ID, C_FLAG, C_QUEUE_OFFSET, C_STORED_PHY, C_SYS_FLAG,
    C_BORN_TS, C_BORN_HOST_START, C_STORE_TS, C_STORE_HOST_START, C_RECONSUME, C_PREPARED, C_BODY_LENGTH,
    C_BODY_START, C_BODY_LEN, C_TOPIC_START, C_TOPIC_LEN, C_PROPS_START, C_PROPS_LEN, C_BODY_CRC_OK,
    C_TOPIC_HASH, C_PROP_HASH, C_COUNT
};
static const char *const scan_column_names[C_COUNT] = {
    "position", "size", "magic", "body_crc", "queue_id", "flag", "queue_offset", "stored_phy_offset",
    "sys_flag", "born_timestamp", "born_host_start", "store_timestamp", "store_host_start", "reconsume_times",
    "prepared_transaction_offset", "body_length", "body_start", "body_len", "topic_start", "topic_len",
    "props_start", "props_len", "body_crc_ok", "topic_hash", "prop_hash",
};
/* why scan_records stopped */
enum { SCAN_CHAIN = 0, SCAN_LENGTH = 1, SCAN_CRC = 2, SCAN_FULL = 3 };
/* what scan_records does with body CRCs: nothing (body_crc_ok -1), stop at the first that differs
 * (the recovery walk's check; body_crc_ok 1), or note each in body_crc_ok (1 matches, 0 differs) */
enum { CRC_NONE = 0, CRC_STOP = 1, CRC_NOTE = 2 };

/* A big-endian integer of 1, 2, 4 or 8 bytes (the caller has checked it lies in the buffer). */
static inline int64_t read_be(const unsigned char *p, int64_t size, int64_t is_signed)
{
    switch (size) {                 /* the sizes fields have, without a per-byte loop */
    case 1: return is_signed ? (int64_t)(int8_t)p[0] : (int64_t)p[0];
    case 2: {
        uint16_t v = (uint16_t)(((unsigned)p[0] << 8) | p[1]);
        return is_signed ? (int64_t)(int16_t)v : (int64_t)v;
    }
    case 4: {
        uint32_t v = be32(p);
        return is_signed ? (int64_t)(int32_t)v : (int64_t)v;
    }
    case 8: return be64(p);
    default: {
        uint64_t v = 0;
        for (int64_t i = 0; i < size; i++) v = (v << 8) | p[i];
        if (is_signed && size < 8 && (v >> (size * 8 - 1)) & 1) v |= ~(uint64_t)0 << (size * 8);
        return (int64_t)v;
    }
    }
}

#define FIELD(L, base, name) read_be((base) + (L)[name##_AT], (L)[name##_SIZE], (L)[name##_SIGNED])

/* Decode the record at p (TOTALSIZE total, inside the buffer) into column row ``row``; 0 when it
 * is well formed (every part inside the record, topic length >= 0, computed length == TOTALSIZE),
 * -1 otherwise (nothing is read outside the record). */
static int decode_one(const unsigned char *b, int64_t p, int64_t total, const int64_t *L, int64_t *cols,
                      Py_ssize_t cap, Py_ssize_t row)
{
    const unsigned char *r = b + p;
    int64_t end = p + total;
    if (L[L_HEAD_SIZE] > total) return -1;
    int64_t sys_flag = FIELD(L, r, L_SYS_FLAG);
    int64_t magic = FIELD(L, r, L_MAGIC);
    int64_t born = (sys_flag & L[L_BORN_V6_FLAG]) ? L[L_HOST_V6] : L[L_HOST_V4];
    int64_t store = (sys_flag & L[L_STORE_V6_FLAG]) ? L[L_HOST_V6] : L[L_HOST_V4];
    int64_t born_host = p + L[L_HEAD_SIZE];
    int64_t store_ts = born_host + born;
    int64_t store_host = store_ts + L[L_STORE_TS_SIZE];
    int64_t tail = store_host + store;
    if (tail + L[L_TAIL_SIZE] > end) return -1;
    int64_t body_length = FIELD(L, b + tail, L_BODY_LENGTH);
    int64_t body_start = tail + L[L_TAIL_SIZE];
    int64_t body_len = body_length > 0 ? body_length : 0;
    int64_t topic_field = magic == L[L_MAGIC_V2] ? L[L_TOPIC_V2_SIZE] : L[L_TOPIC_V1_SIZE];
    int64_t topic_len_pos = body_start + body_len;
    if (topic_len_pos + topic_field > end) return -1;
    int64_t topic_len = read_be(b + topic_len_pos, topic_field, L[L_TOPIC_SIGNED]);
    if (topic_len < 0) return -1;
    int64_t topic_start = topic_len_pos + topic_field;
    int64_t props_len_pos = topic_start + topic_len;
    if (props_len_pos + L[L_PROPS_SIZE] > end) return -1;
    int64_t props_length = read_be(b + props_len_pos, L[L_PROPS_SIZE], L[L_PROPS_SIGNED]);
    int64_t computed = L[L_FIXED_SIZE] + born + store + topic_field + body_len + topic_len
                       + (props_length > 0 ? props_length : 0);
    if (computed != total) return -1;
    int64_t *c = cols + row;
    c[C_POSITION * cap] = p;
    c[C_SIZE * cap] = FIELD(L, r, L_TOTAL);
    c[C_MAGIC * cap] = magic;
    c[C_BODY_CRC * cap] = FIELD(L, r, L_BODY_CRC);
    c[C_QUEUE_ID * cap] = FIELD(L, r, L_QUEUE_ID);
    c[C_FLAG * cap] = FIELD(L, r, L_FLAG);
    c[C_QUEUE_OFFSET * cap] = FIELD(L, r, L_QUEUE_OFFSET);
    c[C_STORED_PHY * cap] = FIELD(L, r, L_PHY);
    c[C_SYS_FLAG * cap] = sys_flag;
    c[C_BORN_TS * cap] = FIELD(L, r, L_BORN_TS);
    c[C_BORN_HOST_START * cap] = born_host;
    c[C_STORE_TS * cap] = read_be(b + store_ts, L[L_STORE_TS_SIZE], L[L_STORE_TS_SIGNED]);
    c[C_STORE_HOST_START * cap] = store_host;
    c[C_RECONSUME * cap] = FIELD(L, b + tail, L_RECONSUME);
    c[C_PREPARED * cap] = FIELD(L, b + tail, L_PREPARED);
    c[C_BODY_LENGTH * cap] = body_length;
    c[C_BODY_START * cap] = body_start;
    c[C_BODY_LEN * cap] = body_len;
    c[C_TOPIC_START * cap] = topic_start;
    c[C_TOPIC_LEN * cap] = topic_len;
    c[C_PROPS_START * cap] = props_len_pos + L[L_PROPS_SIZE];
    c[C_PROPS_LEN * cap] = props_length > 0 ? props_length : -1;
    return 0;
}

/* scan_records(window, p, limit, crc_mode, layout, names, cols, props, row[, entries[, hash_prop]])
 *   -> (taken, stop, why):
 * from window position p, the records message_run takes (a MESSAGE magic below ``limit``, TOTALSIZE
 * >= min_message, ending inside the window), each decoded into column row ``row`` + i of ``cols``
 * (int64, C_COUNT rows of ``cap``), its property value spans into ``props`` (int64, 2 * len(names)
 * rows of ``cap``: the starts, then the lengths; start 0 and length -1 where absent) and its body
 * CRC as ``crc_mode`` says (CRC_NONE, CRC_STOP, CRC_NOTE; an empty body always matches). Stops
 * (``why``) at the first position that is not such a record (SCAN_CHAIN), a record that is not
 * well formed (SCAN_LENGTH) or, with CRC_STOP, whose CRC differs (SCAN_CRC), or when the columns
 * are full (SCAN_FULL); ``stop`` is that position.
 * ``entries`` (window_pos, entry_magic, body_offset, pos_at, body_length_at): the window is a
 * DLedger data file's, and the walk takes the entries entry_run takes (each holding one whole
 * record at its body_offset), decoding each entry's record; positions are then entry starts.
 * ``hash_prop`` (>= 0: that one of ``names``): the topic's and that property value's Java hash as
 * java_hash_spans makes it (an absent value: 0) into topic_hash / prop_hash, while the record is in
 * the cache; -1 where a span holds a byte >= 0x80 (the caller hashes those from the decoded text)
 * or when not asked. */
static PyObject *scan_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *window, *layout, *names, *cols_obj, *props_obj, *entries = Py_None;
    long long p0, limit, row0;
    int crc_mode, hash_prop = -1;
    if (!PyArg_ParseTuple(args, "OLLiOO!OOL|Oi", &window, &p0, &limit, &crc_mode, &layout, &PyTuple_Type, &names,
                          &cols_obj, &props_obj, &row0, &entries, &hash_prop))
        return NULL;
    long long window_pos = 0, body_offset = 0, pos_at = 0, body_length_at = 0;
    long entry_magic = 0;
    int framed = entries != Py_None;
    if (framed) {
        if (!PyArg_ParseTuple(entries, "LlLLL", &window_pos, &entry_magic, &body_offset, &pos_at, &body_length_at))
            return NULL;
        if (pos_at < 0 || body_length_at < 0 || pos_at + 8 > body_offset || body_length_at + 4 > body_offset) {
            PyErr_SetString(PyExc_ValueError, "entry layout: fields must lie inside the header");
            return NULL;
        }
    }
    if (crc_mode < CRC_NONE || crc_mode > CRC_NOTE) {
        PyErr_SetString(PyExc_ValueError, "crc_mode must be CRC_NONE, CRC_STOP or CRC_NOTE");
        return NULL;
    }
    names_t nm;
    if (take_names(names, &nm) < 0) return NULL;
    Py_ssize_t k = nm.k;
    Py_buffer w, lv, cv, pv;
    if (PyObject_GetBuffer(window, &w, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(layout, &lv, PyBUF_C_CONTIGUOUS) < 0) { PyBuffer_Release(&w); return NULL; }
    if (out_get(cols_obj, &cv, 0, 0) < 0) { PyBuffer_Release(&lv); PyBuffer_Release(&w); return NULL; }
    if (out_get(props_obj, &pv, 0, 0) < 0) {
        PyBuffer_Release(&cv); PyBuffer_Release(&lv); PyBuffer_Release(&w); return NULL;
    }
    const int64_t *L = lv.buf;
    Py_ssize_t cap = cv.len / (8 * C_COUNT);
    const char *problem = NULL;
    if (lv.len != 8 * L_COUNT) problem = "layout must hold one int64 per SCAN_LAYOUT name";
    else if (cv.len % (8 * C_COUNT)) problem = "cols must be int64 (len(SCAN_COLUMNS), capacity)";
    else if (pv.len != 8 * 2 * k * cap) problem = "props must be int64 (2 * len(names), capacity)";
    else if (row0 < 0 || row0 > cap) problem = "row outside the columns";
    else if (hash_prop < -1 || hash_prop >= k) problem = "hash_prop must be -1 or the index of one of names";
    else if (p0 < 0 || p0 > w.len) problem = "start outside the window";
    else if (L[L_MIN_MESSAGE] < 8 || L[L_MIN_MESSAGE] < L[L_HEAD_SIZE]) problem = "min_message below the head";
    else {
        static const int fields[] = {L_TOTAL_AT, L_MAGIC_AT, L_BODY_CRC_AT, L_QUEUE_ID_AT, L_FLAG_AT,
                                     L_QUEUE_OFFSET_AT, L_PHY_AT, L_SYS_FLAG_AT, L_BORN_TS_AT};
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
            int64_t at = L[fields[f]], size = L[fields[f] + 1];
            if (at < 0 || size < 1 || size > 8 || at + size > L[L_HEAD_SIZE]) problem = "a head field outside the head";
        }
        static const int tails[] = {L_RECONSUME_AT, L_PREPARED_AT, L_BODY_LENGTH_AT};
        for (size_t f = 0; f < sizeof tails / sizeof *tails; f++) {
            int64_t at = L[tails[f]], size = L[tails[f] + 1];
            if (at < 0 || size < 1 || size > 8 || at + size > L[L_TAIL_SIZE]) problem = "a tail field outside the tail";
        }
        if (L[L_TOTAL_AT] != 0 || L[L_TOTAL_SIZE] != 4 || L[L_MAGIC_AT] != 4 || L[L_MAGIC_SIZE] != 4)
            problem = "the record prefix must be TOTALSIZE then MAGIC, four bytes each";
        const int sizes[] = {L_STORE_TS_SIZE, L_TOPIC_V1_SIZE, L_TOPIC_V2_SIZE, L_PROPS_SIZE};
        for (size_t f = 0; f < sizeof sizes / sizeof *sizes; f++)
            if (L[sizes[f]] < 1 || L[sizes[f]] > 8) problem = "a field size outside 1..8";
        if (L[L_HOST_V4] < 0 || L[L_HOST_V6] < 0 || L[L_TAIL_SIZE] < 0) problem = "negative layout size";
    }
    if (problem) {
        PyBuffer_Release(&pv); PyBuffer_Release(&cv); PyBuffer_Release(&lv); PyBuffer_Release(&w);
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    const unsigned char *b = w.buf;
    int64_t n = w.len, p = p0, row = row0, why = SCAN_CHAIN;
    int64_t last = n - 8 + 1;
    if (limit < last) last = limit;
    int64_t *cols = cv.buf, *vs = pv.buf, *vl = (int64_t *)pv.buf + k * cap;
    uint32_t v1 = (uint32_t)L[L_MAGIC_V1], v2 = (uint32_t)L[L_MAGIC_V2];
    Py_BEGIN_ALLOW_THREADS
    int64_t step, rec, total;          /* bytes to the next record (or entry), where this record starts, its length */
    if (framed) {                      /* entry_run's conditions: the header and the record's prefix fit */
        last = limit;
        if (n - body_offset - 8 + 1 < last) last = n - body_offset - 8 + 1;
    }
    while (p >= 0 && p < last) {
        if (framed) {
            step = entry_step(b, n, p, window_pos, entry_magic, body_offset, pos_at, body_length_at,
                              L[L_MIN_MESSAGE], v1, v2, &total);
            rec = p + body_offset;
        } else {
            step = total = message_step(b, n, p, v1, v2, L[L_MIN_MESSAGE]);
            rec = p;
        }
        if (step < 0) break;
        if (row == cap) { why = SCAN_FULL; break; }
        /* the bytes SCAN_AHEAD past this record's, asked for now: records lie one after the other,
         * but where the next starts is known only from this one's length, too late to wait for */
        for (int64_t at = p + SCAN_AHEAD, stop = p + step + SCAN_AHEAD < n ? p + step + SCAN_AHEAD : n; at < stop; at += 64)
            __builtin_prefetch(b + at);
        if (decode_one(b, rec, total, L, cols, cap, row) < 0) { why = SCAN_LENGTH; break; }
        /* each name's span found here first, then stored once (start 0, length -1: absent) */
        int64_t found_start[MAX_NAMES], found_len[MAX_NAMES];
        for (Py_ssize_t j = 0; j < k; j++) { found_start[j] = 0; found_len[j] = -1; }
        int64_t props_len = cols[C_PROPS_LEN * cap + row];
        if (props_len > 0) split_one(b, cols[C_PROPS_START * cap + row], props_len, &nm, found_start, found_len);
        for (Py_ssize_t j = 0; j < k; j++) { vs[j * cap + row] = found_start[j]; vl[j * cap + row] = found_len[j]; }
        int64_t crc_ok = crc_mode == CRC_NONE ? -1 : 1;
        if (crc_mode != CRC_NONE) {
            int64_t body_len = cols[C_BODY_LEN * cap + row];
            if (body_len > 0) {
                uint32_t crc = crc32_span(b + cols[C_BODY_START * cap + row], (size_t)body_len);
                crc_ok = (int64_t)(crc & (uint32_t)L[L_CRC_MASK]) == cols[C_BODY_CRC * cap + row];
            }
            if (!crc_ok && crc_mode == CRC_STOP) { why = SCAN_CRC; break; }
        }
        cols[C_BODY_CRC_OK * cap + row] = crc_ok;
        int64_t topic_hash = -1, prop_hash = -1;
        if (hash_prop >= 0) {           /* spans inside the record (decode_one and split_one checked) */
            unsigned char any = 0;
            uint32_t h = java_hash_continue(0, b + cols[C_TOPIC_START * cap + row], cols[C_TOPIC_LEN * cap + row], &any);
            topic_hash = any >> 7 ? -1 : (int64_t)h;
            int64_t len = found_len[hash_prop];
            any = 0;
            h = len > 0 ? java_hash_continue(0, b + found_start[hash_prop], len, &any) : 0;
            prop_hash = any >> 7 ? -1 : (int64_t)h;
        }
        cols[C_TOPIC_HASH * cap + row] = topic_hash;
        cols[C_PROP_HASH * cap + row] = prop_hash;
        row++;
        p += step;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&pv);
    PyBuffer_Release(&cv);
    PyBuffer_Release(&lv);
    PyBuffer_Release(&w);
    return Py_BuildValue("LLL", (long long)(row - row0), (long long)p, (long long)why);
}


/* span_groups(buf, starts, lengths, keys, out_group, out_first) -> groups, or -1: spans with equal
 * ``keys`` (int64; callers pass a hash and the length) numbered in order of first appearance, each
 * checked byte for byte against the first span of its key; out_group (int64, one per span) receives
 * the number, out_first (int64, room for one per span) the first span of each group. -1 when two
 * spans share a key but not their bytes (a hash collision: the caller's reference path decides). */
static PyObject *span_groups(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf, *starts, *lengths, *keys_obj, *group_obj, *first_obj;
    if (!PyArg_ParseTuple(args, "OOOOOO", &buf, &starts, &lengths, &keys_obj, &group_obj, &first_obj)) return NULL;
    spans_t s;
    Py_ssize_t n;
    Py_buffer kv, gv, fv;
    if (spans_get(buf, starts, lengths, &s, &n) < 0) { spans_release(&s); return NULL; }
    if (PyObject_GetBuffer(keys_obj, &kv, PyBUF_C_CONTIGUOUS) < 0) { spans_release(&s); return NULL; }
    if (kv.len != n * 8) {
        PyBuffer_Release(&kv); spans_release(&s);
        PyErr_SetString(PyExc_ValueError, "keys must be int64, one per span");
        return NULL;
    }
    if (out_get(group_obj, &gv, n, 8) < 0) { PyBuffer_Release(&kv); spans_release(&s); return NULL; }
    if (out_get(first_obj, &fv, n, 8) < 0) {
        PyBuffer_Release(&gv); PyBuffer_Release(&kv); spans_release(&s); return NULL;
    }
    const unsigned char *b = s.buf.buf;
    const int64_t *st = s.starts.buf, *ln = s.lengths.buf, *key = kv.buf;
    int64_t *group = gv.buf, *first = fv.buf;
    size_t cap = 64;
    while (cap < 2 * (size_t)(n < 32 ? 32 : n) && cap < ((size_t)1 << 40)) cap <<= 1;
    if (cap > 4096) cap = 4096;              /* grown below when many keys are distinct */
    int64_t *slot = malloc(cap * sizeof *slot);  /* group number + 1, 0 when free */
    if (!slot) { PyBuffer_Release(&fv); PyBuffer_Release(&gv); PyBuffer_Release(&kv); spans_release(&s); return PyErr_NoMemory(); }
    memset(slot, 0, cap * sizeof *slot);
    Py_ssize_t bad = -1, groups = 0;
    int collision = 0, oom = 0;
    Py_BEGIN_ALLOW_THREADS
    bad = first_bad_span(st, ln, n, s.buf.len);
    for (Py_ssize_t i = 0; bad < 0 && i < n && !collision && !oom; i++) {
        if ((size_t)groups * 2 >= cap) {     /* keep the table at most half full */
            size_t bigger = cap * 2;
            int64_t *grown = calloc(bigger, sizeof *grown);
            if (!grown) { oom = 1; break; }
            for (Py_ssize_t g = 0; g < groups; g++) {
                uint64_t h = (uint64_t)key[first[g]] * 0x9E3779B97F4A7C15ULL;
                size_t at = (size_t)(h >> 20) & (bigger - 1);
                while (grown[at]) at = (at + 1) & (bigger - 1);
                grown[at] = g + 1;
            }
            free(slot);
            slot = grown;
            cap = bigger;
        }
        if (i + PREFETCH_AHEAD < n) __builtin_prefetch(b + st[i + PREFETCH_AHEAD]);
        uint64_t h = (uint64_t)key[i] * 0x9E3779B97F4A7C15ULL;
        size_t at = (size_t)(h >> 20) & (cap - 1);
        for (;;) {
            int64_t g = slot[at] - 1;
            if (g < 0) {                     /* a new key */
                slot[at] = groups + 1;
                first[groups] = i;
                group[i] = groups++;
                break;
            }
            if (key[first[g]] == key[i]) {
                int64_t r = first[g];
                if (ln[r] != ln[i] || memcmp(b + st[r], b + st[i], (size_t)ln[i]) != 0) collision = 1;
                group[i] = g;
                break;
            }
            at = (at + 1) & (cap - 1);
        }
    }
    Py_END_ALLOW_THREADS
    free(slot);
    PyBuffer_Release(&fv);
    PyBuffer_Release(&gv);
    PyBuffer_Release(&kv);
    PyObject *result;
    if (bad >= 0) result = bad_span(bad, st, ln, s.buf.len);
    else if (oom) result = PyErr_NoMemory();
    else result = PyLong_FromSsize_t(collision ? -1 : groups);
    spans_release(&s);
    return result;
}


/* index_keys(buf, indexed, topic_hash, u_start, u_len, k_start, k_len, joiner, sep, out_rec, out_hash)
 *   -> count, or -1: the index keys of every record in record order, as record_index_keys makes
 * them (broker/dispatch.py, the reference): for a record with indexed[i] != 0 the key
 * topic + joiner + UNIQ_KEY when u_len[i] >= 0, then topic + joiner + token for each token of the
 * KEYS value (k_len[i] > 0) split on ``sep`` with empty tokens dropped; each key's Java hashCode
 * continued from the topic's (topic_hash, int32) byte by byte, then indexKeyHash's abs (MIN -> 0).
 * out_rec (int64) and out_hash (int32) have room for n + sum((k_len + 1) / 2) keys. -1 when a key
 * byte is >= 0x80 (its UTF-16 form differs from its bytes: the reference hashes it). */
static PyObject *index_keys(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf_obj, *ix_obj, *th_obj, *us_obj, *ul_obj, *ks_obj, *kl_obj, *rec_obj, *hash_obj;
    int joiner, sep;
    if (!PyArg_ParseTuple(args, "OOOOOOOiiOO", &buf_obj, &ix_obj, &th_obj, &us_obj, &ul_obj, &ks_obj, &kl_obj,
                          &joiner, &sep, &rec_obj, &hash_obj))
        return NULL;
    Py_buffer bv, ixv, thv, rv, hv;
    spans_t u, k;
    memset(&u, 0, sizeof u);
    memset(&k, 0, sizeof k);
    Py_ssize_t n = 0, nk = 0;
    int got_b = 0, got_ix = 0, got_th = 0, got_r = 0, got_h = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(buf_obj, &bv, PyBUF_C_CONTIGUOUS) < 0) goto done;
    got_b = 1;
    if (spans_get(buf_obj, us_obj, ul_obj, &u, &n) < 0 || spans_get(buf_obj, ks_obj, kl_obj, &k, &nk) < 0) goto done;
    if (nk != n) { PyErr_SetString(PyExc_ValueError, "UNIQ_KEY and KEYS spans must be one per record"); goto done; }
    if (PyObject_GetBuffer(ix_obj, &ixv, PyBUF_C_CONTIGUOUS) < 0) goto done;
    got_ix = 1;
    if (PyObject_GetBuffer(th_obj, &thv, PyBUF_C_CONTIGUOUS) < 0) goto done;
    got_th = 1;
    if (ixv.len != n || thv.len != 4 * n) {
        PyErr_SetString(PyExc_ValueError, "indexed (uint8) and topic_hash (int32) must be one per record");
        goto done;
    }
    if (out_get(rec_obj, &rv, 0, 0) < 0) goto done;
    got_r = 1;
    if (out_get(hash_obj, &hv, 0, 0) < 0) goto done;
    got_h = 1;
    const unsigned char *b = bv.buf, *indexed = ixv.buf;
    const int32_t *th = thv.buf;
    const int64_t *us = u.starts.buf, *ul = u.lengths.buf, *ks = k.starts.buf, *kl = k.lengths.buf;
    int64_t *rec = rv.buf;
    int32_t *hash = hv.buf;
    Py_ssize_t room = rv.len / 8 < hv.len / 4 ? rv.len / 8 : hv.len / 4;
    Py_ssize_t count = 0, bad = -1;
    int high = 0, short_room = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && bad < 0; i++) {     /* spans of indexed records must lie in the buffer */
        if (!indexed[i]) continue;
        if (ul[i] >= 0 && (us[i] < 0 || us[i] > bv.len || ul[i] > bv.len - us[i])) bad = i;
        if (kl[i] > 0 && (ks[i] < 0 || ks[i] > bv.len || kl[i] > bv.len - ks[i])) bad = i;
    }
    for (Py_ssize_t i = 0; bad < 0 && i < n && !high && !short_room; i++) {
        if (i + PREFETCH_AHEAD < n && indexed[i + PREFETCH_AHEAD]) {
            /* the spans lie a record apart: ask for them early (only spans checked above) */
            Py_ssize_t a = i + PREFETCH_AHEAD;
            if (ul[a] >= 0) __builtin_prefetch(b + us[a]);
            if (kl[a] > 0) __builtin_prefetch(b + ks[a]);
        }
        if (!indexed[i]) continue;
        uint32_t prefix = (uint32_t)th[i] * 31u + (uint32_t)joiner;
        if (ul[i] >= 0) {
            unsigned char any = 0;
            uint32_t h = java_hash_continue(prefix, b + us[i], ul[i], &any);
            if (any >> 7) { high = 1; break; }
            if (count == room) { short_room = 1; break; }
            rec[count] = i;
            hash[count++] = index_hash(h);
        }
        const unsigned char *p = b + (kl[i] > 0 ? ks[i] : 0);
        int64_t len = kl[i] > 0 ? kl[i] : 0, j = 0;
        int64_t from;
        while (next_key_token(p, len, (unsigned char)sep, &j, &from)) {
            unsigned char any = 0;
            uint32_t h = java_hash_continue(prefix, p + from, j - from, &any);
            if (any >> 7) { high = 1; break; }
            if (count == room) { short_room = 1; break; }
            rec[count] = i;
            hash[count++] = index_hash(h);
        }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) PyErr_Format(PyExc_ValueError, "record %zd has a key span outside the %zd-byte buffer", bad, bv.len);
    else if (short_room) PyErr_SetString(PyExc_ValueError, "key outputs have too little room");
    else result = PyLong_FromSsize_t(high ? -1 : count);
done:
    if (got_h) PyBuffer_Release(&hv);
    if (got_r) PyBuffer_Release(&rv);
    if (got_th) PyBuffer_Release(&thv);
    if (got_ix) PyBuffer_Release(&ixv);
    spans_release(&k);
    spans_release(&u);
    if (got_b) PyBuffer_Release(&bv);
    return result;
}


/* dispatch_columns(buf, cols, known, tables, overrides, index, cq_out, key_out, group_out) -> status:
 * the dispatch of the first n records in one loop, as broker/dispatch.py's dispatch_batch makes it
 * (the reference): each record's topic grouped by bytes, its ConsumeQueue unit (records whose
 * transaction type tables[0] marks) and its index keys (tables[1]; none when ``index`` is 0), in
 * record order.
 *   cols: 14 int64 arrays of n: sys_flag, phy, size, store_timestamp, queue_id, queue_offset,
 *         topic_start, topic_len, tags_start, tags_len, uniq_start, uniq_len, keys_start, keys_len
 *   known: (topic_hash, tags_hash): int64 arrays of n (a native scan's in-pass hashes, -1 where a
 *         span is not ASCII), or None: hashed here
 *   tables: (tx_mask, goes_to_cq uint8[tx_mask + 1], goes_to_index uint8[tx_mask + 1], joiner, sep):
 *         broker/transactions.py's rules by transaction type; the index key's joiner and the KEYS
 *         separator (formats/); keys as index_keys makes them
 *   overrides: (rows int64 ascending, values int64): the tagsCode of those records (the delay rule,
 *         decided by broker/dispatch.py's schedule_delays)
 *   cq_out: 6 int64 arrays of n: group, queue_id, queue_offset, phy, size, tags_code per unit
 *   key_out: (rec int64, hash int32, phy int64, timestamp int64) of one room
 *   group_out: (first int64 of n): the first record of each group (groups numbered by first appearance)
 * Returns (units, keys, groups), or an int: -1 when the reference must decide the batch (a span
 * byte >= 0x80 or a known hash of -1, or two topics sharing hash and length but not bytes), -2
 * when key_out has too little room. A span outside the buffer is a ValueError. */
enum { DC_SYS, DC_PHY, DC_SIZE, DC_TS, DC_QID, DC_QOFF, DC_TS_START, DC_T_LEN, DC_TAG_START, DC_TAG_LEN,
       DC_U_START, DC_U_LEN, DC_K_START, DC_K_LEN, DC_COLS };
#define DC_OUT_CQ 6
#define DC_OUT_KEYS 4

static int views_get(PyObject *seq, Py_ssize_t count, Py_buffer *views, int writable, const char *what)
{
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != count) {
        PyErr_Format(PyExc_ValueError, "%s must be a tuple of %zd arrays", what, count);
        return -1;
    }
    for (Py_ssize_t j = 0; j < count; j++) {
        int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(seq, j), &views[j], flags) < 0) {
            while (j-- > 0) PyBuffer_Release(&views[j]);
            return -1;
        }
    }
    return 0;
}

static void views_release(Py_buffer *views, Py_ssize_t count)
{
    for (Py_ssize_t j = 0; j < count; j++) PyBuffer_Release(&views[j]);
}

static inline int span_inside(int64_t start, int64_t len, int64_t size)
{
    return start >= 0 && len >= 0 && start <= size && len <= size - start;
}

static PyObject *dispatch_columns(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf_obj, *cols_obj, *known_obj, *tables_obj, *over_obj, *cq_obj, *key_obj, *group_obj;
    int index_on;
    if (!PyArg_ParseTuple(args, "OO!OO!O!pO!O!O!", &buf_obj, &PyTuple_Type, &cols_obj, &known_obj,
                          &PyTuple_Type, &tables_obj, &PyTuple_Type, &over_obj, &index_on,
                          &PyTuple_Type, &cq_obj, &PyTuple_Type, &key_obj, &PyTuple_Type, &group_obj))
        return NULL;
    long long tx_mask;
    int joiner, sep;
    PyObject *cq_table_obj, *ix_table_obj;
    if (!PyArg_ParseTuple(tables_obj, "LOOii", &tx_mask, &cq_table_obj, &ix_table_obj, &joiner, &sep)) return NULL;
    Py_buffer bv, cv[DC_COLS], kv[2], tv[2], ov[2], qv[DC_OUT_CQ], yv[DC_OUT_KEYS], gv;
    int have_b = 0, have_c = 0, have_k = 0, have_t = 0, have_o = 0, have_q = 0, have_y = 0, have_g = 0;
    PyObject *result = NULL, *table_tuple = NULL;
    if (PyObject_GetBuffer(buf_obj, &bv, PyBUF_C_CONTIGUOUS) < 0) goto done;
    have_b = 1;
    if (views_get(cols_obj, DC_COLS, cv, 0, "cols") < 0) goto done;
    have_c = 1;
    if (known_obj != Py_None) {
        if (views_get(known_obj, 2, kv, 0, "known") < 0) goto done;
        have_k = 1;
    }
    table_tuple = PyTuple_Pack(2, cq_table_obj, ix_table_obj);
    if (!table_tuple || views_get(table_tuple, 2, tv, 0, "tables") < 0) goto done;
    have_t = 1;
    if (views_get(over_obj, 2, ov, 0, "overrides") < 0) goto done;
    have_o = 1;
    if (views_get(cq_obj, DC_OUT_CQ, qv, 1, "cq_out") < 0) goto done;
    have_q = 1;
    if (views_get(key_obj, DC_OUT_KEYS, yv, 1, "key_out") < 0) goto done;
    have_y = 1;
    if (views_get(group_obj, 1, &gv, 1, "group_out") < 0) goto done;
    have_g = 1;
    Py_ssize_t n = cv[0].len / 8;
    const char *problem = NULL;
    if (cv[0].len % 8) problem = "cols must be int64";
    for (int j = 0; j < DC_COLS && !problem; j++)
        if (cv[j].len != n * 8) problem = "cols must be int64 arrays of one length";
    if (have_k && !problem && (kv[0].len != n * 8 || kv[1].len != n * 8)) problem = "known hashes must be int64, one per record";
    if (!problem && (tx_mask < 0 || tx_mask > 255 || tv[0].len != tx_mask + 1 || tv[1].len != tx_mask + 1))
        problem = "tables must be uint8, one per transaction type (tx_mask + 1)";
    if (!problem && (ov[0].len % 8 || ov[1].len != ov[0].len)) problem = "overrides must be int64 arrays of one length";
    for (int j = 0; j < DC_OUT_CQ && !problem; j++)
        if (qv[j].len != n * 8) problem = "cq_out must be int64 arrays of one per record";
    if (!problem && gv.len != n * 8) problem = "group_out must be int64, one per record";
    Py_ssize_t room = yv[0].len / 8;
    if (!problem && (yv[0].len % 8 || yv[1].len != room * 4 || yv[2].len != room * 8 || yv[3].len != room * 8))
        problem = "key_out must be (int64, int32, int64, int64) of one length";
    if (problem) { PyErr_SetString(PyExc_ValueError, problem); goto done; }
    const Py_ssize_t n_over = ov[0].len / 8;
    const int64_t *over_row = ov[0].buf, *over_val = ov[1].buf;
    for (Py_ssize_t j = 0; j < n_over; j++)
        if (over_row[j] < 0 || over_row[j] >= n || (j && over_row[j] <= over_row[j - 1])) {
            PyErr_SetString(PyExc_ValueError, "override rows must be ascending rows of the records");
            goto done;
        }
    const unsigned char *b = bv.buf;
    const int64_t size = bv.len;
    const int64_t *c[DC_COLS];
    for (int j = 0; j < DC_COLS; j++) c[j] = cv[j].buf;
    const int64_t *known_topic = have_k ? kv[0].buf : NULL, *known_tags = have_k ? kv[1].buf : NULL;
    const unsigned char *to_cq = tv[0].buf, *to_ix = tv[1].buf;
    int64_t *q[DC_OUT_CQ];
    for (int j = 0; j < DC_OUT_CQ; j++) q[j] = qv[j].buf;
    int64_t *key_rec = yv[0].buf, *key_phy = yv[2].buf, *key_ts = yv[3].buf;
    int32_t *key_hash = yv[1].buf;
    int64_t *first = gv.buf;
    /* the spans this loop reads, checked before any byte is read */
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n && bad < 0; i++) {
        int64_t tx = c[DC_SYS][i] & tx_mask;
        int64_t tl = c[DC_T_LEN][i] > 0 ? c[DC_T_LEN][i] : 0;
        if (!span_inside(c[DC_TS_START][i], tl, size)) bad = i;
        if (to_cq[tx] && c[DC_TAG_LEN][i] > 0 && !span_inside(c[DC_TAG_START][i], c[DC_TAG_LEN][i], size)) bad = i;
        if (index_on && to_ix[tx]) {
            if (c[DC_U_LEN][i] >= 0 && !span_inside(c[DC_U_START][i], c[DC_U_LEN][i], size)) bad = i;
            if (c[DC_K_LEN][i] > 0 && !span_inside(c[DC_K_START][i], c[DC_K_LEN][i], size)) bad = i;
        }
    }
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "record %zd has a span outside the %zd-byte buffer", bad, bv.len);
        goto done;
    }
    size_t cap = 64;                                 /* grown below when many topics are distinct */
    while (cap < 2 * (size_t)n + 2 && cap < 4096) cap <<= 1;
    int64_t *slot = calloc(cap, sizeof *slot);       /* group number + 1, 0 when free */
    int64_t *gkey = malloc(((size_t)n + 1) * sizeof *gkey);   /* each group's (hash, length) key */
    if (!slot || !gkey) { free(slot); free(gkey); PyErr_NoMemory(); goto done; }
    Py_ssize_t units = 0, keys = 0, groups = 0, at_over = 0;
    int status = 0;                 /* -1: the reference decides, -2: short room, -3: out of memory */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !status; i++) {
        if (i + PREFETCH_AHEAD < n) {
            Py_ssize_t a = i + PREFETCH_AHEAD;
            __builtin_prefetch(b + c[DC_TS_START][a]);
            if (c[DC_K_LEN][a] > 0) __builtin_prefetch(b + c[DC_K_START][a]);
        }
        int64_t tx = c[DC_SYS][i] & tx_mask;
        const unsigned char *t = b + c[DC_TS_START][i];
        int64_t tl = c[DC_T_LEN][i] > 0 ? c[DC_T_LEN][i] : 0;
        uint32_t th;
        if (known_topic) {
            if (known_topic[i] < 0) { status = -1; break; }
            th = (uint32_t)known_topic[i];
        } else {
            unsigned char any = 0;
            th = java_hash_continue(0, t, tl, &any);
            if (any >> 7) { status = -1; break; }
        }
        if ((size_t)groups * 2 >= cap) {             /* keep the table at most half full */
            size_t bigger = cap * 2;
            int64_t *grown = calloc(bigger, sizeof *grown);
            if (!grown) { status = -3; break; }
            for (Py_ssize_t g = 0; g < groups; g++) {
                size_t at = (size_t)(((uint64_t)gkey[g] * 0x9E3779B97F4A7C15ULL) >> 20) & (bigger - 1);
                while (grown[at]) at = (at + 1) & (bigger - 1);
                grown[at] = g + 1;
            }
            free(slot);
            slot = grown;
            cap = bigger;
        }
        /* the topic's group: hash and length, then the bytes against the group's first record */
        int64_t key = (int64_t)((uint64_t)th | ((uint64_t)tl << 32));
        size_t at = (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ULL) >> 20) & (cap - 1);
        int64_t g;
        for (;;) {
            g = slot[at] - 1;
            if (g < 0) {
                slot[at] = groups + 1;
                first[groups] = i;
                gkey[groups] = key;
                g = groups++;
                break;
            }
            if (gkey[g] == key) {
                if (memcmp(b + c[DC_TS_START][first[g]], t, (size_t)tl) != 0) status = -1;
                break;
            }
            at = (at + 1) & (cap - 1);
        }
        if (status) break;
        while (at_over < n_over && over_row[at_over] < i) at_over++;
        if (to_cq[tx]) {
            int64_t code = 0;
            if (at_over < n_over && over_row[at_over] == i) code = over_val[at_over];
            else if (c[DC_TAG_LEN][i] > 0) {
                if (known_tags) {
                    if (known_tags[i] < 0) { status = -1; break; }
                    code = (int32_t)(uint32_t)known_tags[i];
                } else {
                    unsigned char any = 0;
                    code = (int32_t)java_hash_continue(0, b + c[DC_TAG_START][i], c[DC_TAG_LEN][i], &any);
                    if (any >> 7) { status = -1; break; }
                }
            }
            q[0][units] = g;
            q[1][units] = c[DC_QID][i];
            q[2][units] = c[DC_QOFF][i];
            q[3][units] = c[DC_PHY][i];
            q[4][units] = c[DC_SIZE][i];
            q[5][units] = code;
            units++;
        }
        if (!index_on || !to_ix[tx]) continue;
        uint32_t prefix = th * 31u + (uint32_t)joiner;
        int64_t phy = c[DC_PHY][i], ts = c[DC_TS][i];
        if (c[DC_U_LEN][i] >= 0) {
            unsigned char any = 0;
            uint32_t h = java_hash_continue(prefix, b + c[DC_U_START][i], c[DC_U_LEN][i], &any);
            if (any >> 7) { status = -1; break; }
            if (keys == room) { status = -2; break; }
            key_rec[keys] = i; key_phy[keys] = phy; key_ts[keys] = ts;
            key_hash[keys++] = index_hash(h);
        }
        int64_t len = c[DC_K_LEN][i] > 0 ? c[DC_K_LEN][i] : 0, j = 0;
        const unsigned char *p = len ? b + c[DC_K_START][i] : b;
        int64_t from;
        while (next_key_token(p, len, (unsigned char)sep, &j, &from)) {
            unsigned char any = 0;
            uint32_t h = java_hash_continue(prefix, p + from, j - from, &any);
            if (any >> 7) { status = -1; break; }
            if (keys == room) { status = -2; break; }
            key_rec[keys] = i; key_phy[keys] = phy; key_ts[keys] = ts;
            key_hash[keys++] = index_hash(h);
        }
    }
    Py_END_ALLOW_THREADS
    free(slot);
    free(gkey);
    if (status == -3) PyErr_NoMemory();
    else result = status ? PyLong_FromLong(status) : Py_BuildValue("nnn", units, keys, groups);
done:
    if (have_g) PyBuffer_Release(&gv);
    if (have_y) views_release(yv, DC_OUT_KEYS);
    if (have_q) views_release(qv, DC_OUT_CQ);
    if (have_o) views_release(ov, 2);
    if (have_t) views_release(tv, 2);
    if (have_k) views_release(kv, 2);
    if (have_c) views_release(cv, DC_COLS);
    if (have_b) PyBuffer_Release(&bv);
    Py_XDECREF(table_tuple);
    return result;
}

/* chain_replay(bucket, prev, first, newest) -> bool: whether entries first, first+1, ... (bucket:
 * their slot, int64; prev: their prevIndex, int64) each link to the newest earlier entry of their
 * slot, ``newest`` (int32 per slot) holding each slot's newest entry before them: putKey's chains
 * replayed entry by entry. True: ``newest`` now holds each slot's last entry. False (an entry links
 * elsewhere, or has no slot): ``newest`` is left as it was. */
static PyObject *chain_replay(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *bucket_obj, *prev_obj, *newest_obj;
    long long first;
    if (!PyArg_ParseTuple(args, "OOLO", &bucket_obj, &prev_obj, &first, &newest_obj)) return NULL;
    Py_buffer bv, pv, nv;
    if (PyObject_GetBuffer(bucket_obj, &bv, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(prev_obj, &pv, PyBUF_C_CONTIGUOUS) < 0) { PyBuffer_Release(&bv); return NULL; }
    if (out_get(newest_obj, &nv, 0, 0) < 0) { PyBuffer_Release(&pv); PyBuffer_Release(&bv); return NULL; }
    if (bv.len % 8 || pv.len != bv.len || nv.len % 4) {
        PyBuffer_Release(&nv); PyBuffer_Release(&pv); PyBuffer_Release(&bv);
        PyErr_SetString(PyExc_ValueError, "bucket and prev must be int64 of one length, newest int32");
        return NULL;
    }
    Py_ssize_t n = bv.len / 8, slots = nv.len / 4;
    const int64_t *bucket = bv.buf, *prev = pv.buf;
    int32_t *newest = nv.buf;
    int32_t *undo = malloc((size_t)(n ? n : 1) * sizeof *undo);   /* each entry's slot value before it */
    if (!undo) { PyBuffer_Release(&nv); PyBuffer_Release(&pv); PyBuffer_Release(&bv); return PyErr_NoMemory(); }
    Py_ssize_t done = 0;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (; done < n; done++) {
        int64_t b = bucket[done];
        if (b < 0 || b >= slots || prev[done] != newest[b]) { ok = 0; break; }
        undo[done] = newest[b];
        newest[b] = (int32_t)(first + done);
    }
    if (!ok)
        while (done-- > 0) newest[bucket[done]] = undo[done];
    Py_END_ALLOW_THREADS
    free(undo);
    PyBuffer_Release(&nv);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&bv);
    return PyBool_FromLong(ok);
}

/* ---- search_sorted -----------------------------------------------------------------------------
 * numpy.searchsorted(a, v, side) of an ascending int64 array: the first index whose element is not
 * below (side 'left') or not at or below (side 'right') each value. Each search gallops out from the
 * previous value's answer and then bisects, so values near each other (offsets in CommitLog order,
 * record keys in record order) cost a few steps each instead of a walk down from the middle of a. */
static inline int below(int64_t item, int64_t x, int right) { return right ? item <= x : item < x; }

static Py_ssize_t gallop_search(const int64_t *a, Py_ssize_t n, int64_t x, int right, Py_ssize_t hint)
{
    Py_ssize_t lo, hi, step = 1;
    if (hint < n && below(a[hint], x, right)) {          /* the answer lies in (hint, n] */
        lo = hint + 1;
        hi = n;
        for (;;) {
            Py_ssize_t probe = hint + step;
            if (probe >= n) break;
            if (!below(a[probe], x, right)) { hi = probe; break; }
            lo = probe + 1;
            step <<= 1;
        }
    } else {                                              /* the answer lies in [0, hint] */
        lo = 0;
        hi = hint;
        for (;;) {
            Py_ssize_t probe = hint - step;
            if (probe < 0) break;
            if (below(a[probe], x, right)) { lo = probe + 1; break; }
            hi = probe;
            step <<= 1;
        }
    }
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (below(a[mid], x, right)) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* search_sorted(a, v, right, out): out[i] = numpy.searchsorted(a, v[i], 'right' if right else 'left'). */
static PyObject *search_sorted(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *a_obj, *v_obj, *out_obj;
    int right;
    if (!PyArg_ParseTuple(args, "OOpO", &a_obj, &v_obj, &right, &out_obj)) return NULL;
    Py_buffer av, vv, ov;
    if (PyObject_GetBuffer(a_obj, &av, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(v_obj, &vv, PyBUF_C_CONTIGUOUS) < 0) { PyBuffer_Release(&av); return NULL; }
    if (av.len % 8 || vv.len % 8) {
        PyBuffer_Release(&vv); PyBuffer_Release(&av);
        PyErr_SetString(PyExc_ValueError, "a and v must be int64 arrays");
        return NULL;
    }
    Py_ssize_t n = av.len / 8, m = vv.len / 8;
    if (out_get(out_obj, &ov, m, 8) < 0) { PyBuffer_Release(&vv); PyBuffer_Release(&av); return NULL; }
    const int64_t *a = av.buf, *v = vv.buf;
    int64_t *out = ov.buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t at = n / 2;
    for (Py_ssize_t i = 0; i < m; i++) {
        at = gallop_search(a, n, v[i], right, at);
        out[i] = at;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ov);
    PyBuffer_Release(&vv);
    PyBuffer_Release(&av);
    Py_RETURN_NONE;
}

static PyObject *crc32_kernel(PyObject *self, PyObject *args);

static PyMethodDef methods[] = {
    {"search_sorted", search_sorted, METH_VARARGS,
     "search_sorted(a, v, right, out): numpy.searchsorted of ascending int64 a, galloping from answer to answer"},
    {"dispatch_columns", dispatch_columns, METH_VARARGS,
     "dispatch_columns(buf, cols, known, tables, overrides, index, cq_out, key_out, group_out): a batch's topic "
     "groups, ConsumeQueue units and index keys in one loop"},
    {"index_keys", index_keys, METH_VARARGS,
     "index_keys(buf, indexed, topic_hash, u_start, u_len, k_start, k_len, joiner, sep, out_rec, out_hash): "
     "the index keys' records and hashes in the broker's order; -1 when a key is not ASCII"},
    {"chain_replay", chain_replay, METH_VARARGS,
     "chain_replay(bucket, prev, first, newest): whether every entry links to its slot's newest earlier entry"},
    {"span_groups", span_groups, METH_VARARGS,
     "span_groups(buf, starts, lengths, keys, out_group, out_first): equal spans numbered by first appearance"},
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(window, p, limit, check_crc, layout, names, cols, props, row): the chain walk, columns, "
     "property spans and body CRC of every record in one pass; returns (taken, stop, why)"},
    {"index_entries", index_entries, METH_VARARGS,
     "index_entries(key_hash, phy, ts, slots, count, begin, layout, out): putKey for each key, entries written; "
     "returns slots newly used"},
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
    {"crc32_kernel", crc32_kernel, METH_VARARGS, "crc32_kernel([use]): 'clmul' or 'zlib'; use=False turns clmul off"},
    {"java_hash_spans", java_hash_spans, METH_VARARGS,
     "java_hash_spans(buf, starts, lengths, out, high): Java hashCode of each ASCII span; high marks the rest"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "rmqtool's native core", -1, methods, NULL, NULL, NULL, NULL,
};

static PyObject *names_tuple(const char *const *names, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static int add_names(PyObject *m, const char *attr, const char *const *names, Py_ssize_t n)
{
    PyObject *t = names_tuple(names, n);
    if (!t) return -1;
    int rc = PyModule_AddObjectRef(m, attr, t);
    Py_DECREF(t);
    return rc;
}

/* crc32_kernel([use]) -> name: which loop CRCs spans ("clmul" or "zlib"); ``use`` False turns the
 * carry-less-multiply loop off (tests compare the two), True back on where the CPU has it. */
static PyObject *crc32_kernel(PyObject *self, PyObject *args)
{
    (void)self;
    int use = -1;
    if (!PyArg_ParseTuple(args, "|p", &use)) return NULL;
#ifdef CRC_FOLD_CONSTANTS
    if (use >= 0) crc_use_clmul = use && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    return PyUnicode_FromString(crc_use_clmul ? "clmul" : "zlib");
#else
    return PyUnicode_FromString("zlib");
#endif
}

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    init_prefix_masks();
#ifdef CRC_FOLD_CONSTANTS
    __builtin_cpu_init();
    crc_use_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    crc_table = get_crc_table();
    PyObject *fold = PyTuple_New(CRC_FOLD_CONSTANTS);
    if (!fold) { Py_DECREF(m); return NULL; }
    for (int i = 0; i < CRC_FOLD_CONSTANTS; i++) PyTuple_SET_ITEM(fold, i, PyLong_FromUnsignedLongLong(crc_fold[i]));
    if (PyModule_AddObjectRef(m, "CRC_FOLD_CONSTANTS", fold) < 0) { Py_DECREF(fold); Py_DECREF(m); return NULL; }
    Py_DECREF(fold);
#endif
    if (add_names(m, "SCAN_LAYOUT", scan_layout_names, L_COUNT) < 0
        || add_names(m, "SCAN_COLUMNS", scan_column_names, C_COUNT) < 0
        || PyModule_AddIntConstant(m, "SCAN_CHAIN", SCAN_CHAIN) < 0
        || PyModule_AddIntConstant(m, "SCAN_LENGTH", SCAN_LENGTH) < 0
        || PyModule_AddIntConstant(m, "SCAN_CRC", SCAN_CRC) < 0
        || PyModule_AddIntConstant(m, "SCAN_FULL", SCAN_FULL) < 0
        || PyModule_AddIntConstant(m, "CRC_NONE", CRC_NONE) < 0
        || PyModule_AddIntConstant(m, "CRC_STOP", CRC_STOP) < 0
        || PyModule_AddIntConstant(m, "CRC_NOTE", CRC_NOTE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
