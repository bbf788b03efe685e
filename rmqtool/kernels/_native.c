/*
 * rmqtool's native core: per-record loops numpy cannot express, over spans of one buffer.
 *
 * Each entry point takes a read-only buffer (the bytes of a read window), two C-contiguous
 * int64 arrays of span starts and lengths, and writable output arrays of one item per span.
 * Every span is checked against the buffer before a byte of it is read; a span outside it
 * makes the call fail with ValueError naming the span, having read nothing past the buffer.
 * The loops run without the GIL, so threads can use every core.
 *
 * The numpy path in rmqtool/kernels/spans.py is the reference; tests/test_fastpath_equivalence.py
 * proves these equal to it.
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

static int out_get(PyObject *out, Py_buffer *view, Py_ssize_t n, Py_ssize_t itemsize)
{
    if (PyObject_GetBuffer(out, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return -1;
    if (view->len != n * itemsize) {
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

static PyMethodDef methods[] = {
    {"crc32_spans", crc32_spans, METH_VARARGS, "crc32_spans(buf, starts, lengths, out): zlib crc32 of each span"},
    {"java_hash_spans", java_hash_spans, METH_VARARGS,
     "java_hash_spans(buf, starts, lengths, out, high): Java hashCode of each ASCII span; high marks the rest"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "rmqtool's native core", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
