/* tracebound._verifykernel: the per-record loop of `verify`, in C.
 *
 * What it does (see docs/adr/0007-c-verify-kernel-and-blake3.md):
 *
 * * `Page`: a page of stored records in `RawRecord` column order, either read straight from
 *   SQLite by a `Reader` (the SQLite store's bulk reader) or wrapped around a list of Python
 *   row tuples by `page_from_rows`. A page is only built from *plain* rows: every column of
 *   the type a healthy store writes, texts that are valid UTF-8 and ids that need no JSON
 *   escape, 32-byte hashes. Anything else gives None, and the caller reads or checks that
 *   page the ordinary Python way. A page is also a sequence: `page[i]` is the row as the
 *   Python reader would have produced it, so the slow path can take over mid-page.
 * * `accept(page, offset, expected, limit, streams, span_type)`: the acceptance predicate of
 *   `ChunkVerifier.feed_page`, exactly: consecutive positions, BLAKE3(prev_hash || body) ==
 *   hash, the body ends with the suffix rebuilt from the index columns, its event_type is
 *   the event_type column, and each stream's
 *   record links to that stream's previous one. It accepts rows from `offset` until the first
 *   row that fails any of these (or `limit` rows), and returns how many it accepted plus
 *   their Merkle leaf hashes. It never judges a row it does not accept: the Python path does,
 *   so every damage report still comes from one place.
 * * BLAKE3 of a whole page at once in SIMD lanes (_blake3.c) and SHA-256 for the Merkle
 *   leaves and nodes (SHA-NI when the CPU has it, checked at run time).
 * * The append path's two per-event loops (store/_chaining.py): `chain_request` formats each
 *   record's suffix after its canonical prefix, links it with BLAKE3(prev || body) (one
 *   message at a time, `tb_b3_hash_one`: a chain is sequential) and builds the row tuple;
 *   `recorded` builds the returned RecordedEvent objects. Both do exactly what the Python
 *   loops do (differential tests), and `chain_request` answers None, leaving the request to
 *   Python, for any input it was not written for.
 *
 * The SQLite library is not linked: `bind_sqlite` looks its functions up in the library that
 * Python's own `_sqlite3` module already loaded, so the process never holds two copies of
 * SQLite (two copies would not see each other's POSIX locks).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_blake3.h"

#if !defined(_WIN32)
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>
#define TB_HAVE_DLOPEN 1
#define TB_HAVE_PTHREAD 1
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TB_X86_SHA 1
#include <cpuid.h>
#include <immintrin.h>

static int cpu_has_sha(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (int)((b >> 29) & 1); /* CPUID.(EAX=7,ECX=0):EBX.SHA[bit 29] */
}
#endif

#define KERNEL_ABI 2

/* ========================================================================================
 * SHA-256
 * ====================================================================================== */

static const uint32_t SHA_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};
static const uint32_t SHA_IV[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

typedef void (*sha_compress_fn)(uint32_t state[8], const uint8_t *blocks, size_t nblocks);

static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void put_be32(uint8_t *p, uint32_t w) {
    p[0] = (uint8_t)(w >> 24);
    p[1] = (uint8_t)(w >> 16);
    p[2] = (uint8_t)(w >> 8);
    p[3] = (uint8_t)w;
}

static inline uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void sha_compress_portable(uint32_t state[8], const uint8_t *blocks, size_t nblocks) {
    for (size_t b = 0; b < nblocks; b++, blocks += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++) w[i] = be32(blocks + 4 * i);
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = state[0], b_ = state[1], c = state[2], d = state[3];
        uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) +
                          SHA_K[i] + w[i];
            uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b_) ^ (a & c) ^ (b_ & c));
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b_;
            b_ = a;
            a = t1 + t2;
        }
        state[0] += a;
        state[1] += b_;
        state[2] += c;
        state[3] += d;
        state[4] += e;
        state[5] += f;
        state[6] += g;
        state[7] += h;
    }
}

#ifdef TB_X86_SHA
/* The SHA extensions keep the state as two registers, ABEF and CDGH; sha256rnds2 does two
 * rounds, sha256msg1/msg2 the message schedule. */
__attribute__((target("sha,sse4.1"))) static void sha_compress_ni(uint32_t state[8],
                                                                  const uint8_t *blocks,
                                                                  size_t nblocks) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)&state[0]);    /* A B C D */
    __m128i st1 = _mm_loadu_si128((const __m128i *)&state[4]);    /* E F G H */
    tmp = _mm_shuffle_epi32(tmp, 0xB1);                           /* B A D C */
    st1 = _mm_shuffle_epi32(st1, 0x1B);                           /* H G F E */
    __m128i st0 = _mm_alignr_epi8(tmp, st1, 8);                   /* ABEF */
    st1 = _mm_blend_epi16(st1, tmp, 0xF0);                        /* CDGH */
    for (size_t b = 0; b < nblocks; b++, blocks += 64) {
        __m128i save0 = st0, save1 = st1, m[4];
        for (int i = 0; i < 16; i++) {
            __m128i *cur = &m[i & 3];
            if (i < 4) {
                *cur = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 16 * i)), bswap);
            } else {
                __m128i t = _mm_sha256msg1_epu32(m[(i - 4) & 3], m[(i - 3) & 3]);
                t = _mm_add_epi32(t, _mm_alignr_epi8(m[(i - 1) & 3], m[(i - 2) & 3], 4));
                *cur = _mm_sha256msg2_epu32(t, m[(i - 1) & 3]);
            }
            __m128i k = _mm_add_epi32(*cur, _mm_loadu_si128((const __m128i *)&SHA_K[4 * i]));
            st1 = _mm_sha256rnds2_epu32(st1, st0, k);
            k = _mm_shuffle_epi32(k, 0x0E);
            st0 = _mm_sha256rnds2_epu32(st0, st1, k);
        }
        st0 = _mm_add_epi32(st0, save0);
        st1 = _mm_add_epi32(st1, save1);
    }
    tmp = _mm_shuffle_epi32(st0, 0x1B);        /* FEBA */
    st1 = _mm_shuffle_epi32(st1, 0xB1);        /* DCHG */
    st0 = _mm_blend_epi16(tmp, st1, 0xF0);     /* DCBA */
    st1 = _mm_alignr_epi8(st1, tmp, 8);        /* ABEF -> HGFE */
    _mm_storeu_si128((__m128i *)&state[0], st0);
    _mm_storeu_si128((__m128i *)&state[4], st1);
}
#endif

static int sha_ni_available = 0;
static sha_compress_fn sha_compress = sha_compress_portable;

static void sha_digest(const uint32_t state[8], uint8_t out[32]) {
    for (int i = 0; i < 8; i++) put_be32(out + 4 * i, state[i]);
}

/* SHA-256 of any input (the general path; the Merkle helpers below use fixed layouts). */
static void sha256(const uint8_t *data, size_t len, uint8_t out[32]) {
    uint32_t st[8];
    uint8_t tail[128];
    memcpy(st, SHA_IV, sizeof st);
    size_t full = len / 64;
    if (full) sha_compress(st, data, full);
    size_t rest = len - full * 64;
    memset(tail, 0, sizeof tail);
    if (rest) memcpy(tail, data + full * 64, rest);
    tail[rest] = 0x80;
    size_t tlen = rest + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[tlen - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha_compress(st, tail, tlen / 64);
    sha_digest(st, out);
}

/* RFC 6962 leaf hash: SHA-256(0x00 || data), data 32 bytes (one padded block). */
static void leaf_hash(const uint8_t data[32], uint8_t out[32]) {
    uint8_t block[64];
    uint32_t st[8];
    memset(block, 0, sizeof block);
    block[0] = 0x00;
    memcpy(block + 1, data, 32);
    block[33] = 0x80;
    block[62] = (33 * 8) >> 8;
    block[63] = (uint8_t)(33 * 8);
    memcpy(st, SHA_IV, sizeof st);
    sha_compress(st, block, 1);
    sha_digest(st, out);
}

/* RFC 6962 node hash: SHA-256(0x01 || left || right) (65 bytes: two blocks). */
static void node_hash(const uint8_t left[32], const uint8_t right[32], uint8_t out[32]) {
    uint8_t block[128];
    uint32_t st[8];
    memset(block, 0, sizeof block);
    block[0] = 0x01;
    memcpy(block + 1, left, 32);
    memcpy(block + 33, right, 32);
    block[65] = 0x80;
    block[126] = (65 * 8) >> 8;
    block[127] = (uint8_t)(65 * 8);
    memcpy(st, SHA_IV, sizeof st);
    sha_compress(st, block, 2);
    sha_digest(st, out);
}

/* ========================================================================================
 * SQLite, looked up at run time in the library Python's _sqlite3 already loaded
 * ====================================================================================== */

typedef struct tb_sqlite3 tb_sqlite3;
typedef struct tb_sqlite3_stmt tb_sqlite3_stmt;

#define SQ_OK 0
#define SQ_ROW 100
#define SQ_DONE 101
#define SQ_OPEN_READWRITE 0x00000002
#define SQ_OPEN_NOMUTEX 0x00008000
#define SQ_INTEGER 1
#define SQ_FLOAT 2
#define SQ_TEXT 3
#define SQ_BLOB 4
#define SQ_NULL 5

static struct {
    int bound;
    int (*open_v2)(const char *, tb_sqlite3 **, int, const char *);
    int (*close)(tb_sqlite3 *);
    int (*prepare_v2)(tb_sqlite3 *, const char *, int, tb_sqlite3_stmt **, const char **);
    int (*bind_int64)(tb_sqlite3_stmt *, int, long long);
    int (*step)(tb_sqlite3_stmt *);
    int (*reset)(tb_sqlite3_stmt *);
    int (*finalize)(tb_sqlite3_stmt *);
    int (*column_type)(tb_sqlite3_stmt *, int);
    long long (*column_int64)(tb_sqlite3_stmt *, int);
    const void *(*column_blob)(tb_sqlite3_stmt *, int);
    const unsigned char *(*column_text)(tb_sqlite3_stmt *, int);
    int (*column_bytes)(tb_sqlite3_stmt *, int);
    const char *(*errmsg)(tb_sqlite3 *);
    int (*busy_timeout)(tb_sqlite3 *, int);
    int (*exec)(tb_sqlite3 *, const char *, void *, void *, char **);
    /* the Writer's */
    int (*bind_text)(tb_sqlite3_stmt *, int, const char *, int, void (*)(void *));
    int (*bind_blob)(tb_sqlite3_stmt *, int, const void *, int, void (*)(void *));
    int (*bind_null)(tb_sqlite3_stmt *, int);
    int (*get_autocommit)(tb_sqlite3 *);
    int (*errcode)(tb_sqlite3 *);
    void *(*wal_hook)(tb_sqlite3 *, int (*)(void *, tb_sqlite3 *, const char *, int), void *);
    int (*wal_checkpoint_v2)(tb_sqlite3 *, const char *, int, int *, int *);
} sq;

static PyObject *SQLiteError; /* raised by Reader and Writer; the store turns it into StorageError */
static PyObject *ConstraintError; /* a Writer statement broke a constraint (SQLITE_CONSTRAINT) */

/* ========================================================================================
 * Pages
 * ====================================================================================== */

typedef struct {
    int64_t position, version, schema;
    const uint8_t *sid, *etype, *wf, *ts, *prev, *hash, *body; /* wf NULL: JSON null */
    Py_ssize_t sid_len, etype_len, wf_len, ts_len, body_len;
} row_t;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    row_t *rows;
    uint8_t *arena;      /* Reader pages: the rows' bytes */
    PyObject **source;   /* page_from_rows pages: the row tuples (strong references) */
    uint8_t *digests;    /* BLAKE3(prev || body) per row, once computed */
    int busy;            /* being hashed (without the GIL) */
} PageObject;

static PyTypeObject PageType;

/* Strict UTF-8 (what CPython's decoder accepts: no overlongs, no surrogates, <= U+10FFFF).
 * With json_safe, also refuse what a JSON string would have to escape: control characters,
 * '"' and '\\'. Such a text's canonical JSON form is then simply the text in quotes. */
static int utf8_ok(const uint8_t *s, Py_ssize_t n, int json_safe) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (json_safe && (c < 0x20 || c == '"' || c == '\\')) return 0;
            i++;
            continue;
        }
        int need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (i + need >= n) return 0; /* truncated sequence */
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

static void page_dealloc(PageObject *self) {
    if (self->source != NULL) {
        for (Py_ssize_t i = 0; i < self->n; i++) Py_XDECREF(self->source[i]);
        PyMem_Free(self->source);
    }
    PyMem_Free(self->rows);
    free(self->arena);
    PyMem_RawFree(self->digests);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PageObject *page_new(Py_ssize_t n) {
    PageObject *page = PyObject_New(PageObject, &PageType);
    if (page == NULL) return NULL;
    page->n = n;
    page->arena = NULL;
    page->source = NULL;
    page->digests = NULL;
    page->busy = 0;
    page->rows = (row_t *)PyMem_Calloc(n ? (size_t)n : 1, sizeof(row_t));
    if (page->rows == NULL) {
        Py_DECREF(page);
        PyErr_NoMemory();
        return NULL;
    }
    return page;
}

static PyObject *text(const uint8_t *s, Py_ssize_t n) {
    return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
}

/* Row i as the Python reader yields it: a tuple in RawRecord order. */
static PyObject *page_row(PageObject *self, Py_ssize_t i) {
    if (self->source != NULL) {
        Py_INCREF(self->source[i]);
        return self->source[i];
    }
    const row_t *r = &self->rows[i];
    PyObject *wf;
    if (r->wf == NULL) {
        wf = Py_None;
        Py_INCREF(wf);
    } else {
        wf = text(r->wf, r->wf_len);
    }
    return Py_BuildValue("(LNLNNNLy#y#y#)", (long long)r->position, text(r->sid, r->sid_len),
                         (long long)r->version, text(r->etype, r->etype_len), wf,
                         text(r->ts, r->ts_len), (long long)r->schema, (const char *)r->prev,
                         (Py_ssize_t)32, (const char *)r->hash, (Py_ssize_t)32,
                         (const char *)r->body, r->body_len);
}

static Py_ssize_t page_length(PageObject *self) { return self->n; }

static PyObject *page_item(PageObject *self, Py_ssize_t i) {
    if (i < 0 || i >= self->n) {
        PyErr_SetString(PyExc_IndexError, "page index out of range");
        return NULL;
    }
    return page_row(self, i);
}

static PyObject *page_subscript(PageObject *self, PyObject *key) {
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        if (i < 0) i += self->n;
        return page_item(self, i);
    }
    if (PySlice_Check(key)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(key, &start, &stop, &step) < 0) return NULL;
        Py_ssize_t count = PySlice_AdjustIndices(self->n, &start, &stop, step);
        PyObject *out = PyList_New(count);
        if (out == NULL) return NULL;
        for (Py_ssize_t k = 0, i = start; k < count; k++, i += step) {
            PyObject *row = page_row(self, i);
            if (row == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, k, row);
        }
        return out;
    }
    PyErr_SetString(PyExc_TypeError, "page indices must be integers or slices");
    return NULL;
}

static PySequenceMethods page_as_sequence = {
    .sq_length = (lenfunc)page_length,
    .sq_item = (ssizeargfunc)page_item,
};

static PyMappingMethods page_as_mapping = {
    .mp_length = (lenfunc)page_length,
    .mp_subscript = (binaryfunc)page_subscript,
};

static PyTypeObject PageType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracebound._verifykernel.Page",
    .tp_basicsize = sizeof(PageObject),
    .tp_dealloc = (destructor)page_dealloc,
    .tp_as_sequence = &page_as_sequence,
    .tp_as_mapping = &page_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A page of plain stored records, in RawRecord column order.",
};

/* Exact int that fits int64 (bool and other subclasses are not plain). */
static int plain_int(PyObject *o, int64_t *out) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

static int plain_str(PyObject *o, const uint8_t **s, Py_ssize_t *n, int json_safe) {
    if (!PyUnicode_CheckExact(o)) return 0;
    const char *u = PyUnicode_AsUTF8AndSize(o, n);
    if (u == NULL) { /* a lone surrogate: not encodable */
        PyErr_Clear();
        return 0;
    }
    *s = (const uint8_t *)u;
    return utf8_ok(*s, *n, json_safe);
}

static int plain_bytes(PyObject *o, const uint8_t **s, Py_ssize_t *n) {
    if (!PyBytes_CheckExact(o)) return 0;
    *s = (const uint8_t *)PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    return 1;
}

static PyObject *page_from_rows(PyObject *module, PyObject *rows) {
    PyObject *seq = PySequence_Fast(rows, "rows must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PageObject *page = page_new(n);
    if (page == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    page->source = (PyObject **)PyMem_Calloc(n ? (size_t)n : 1, sizeof(PyObject *));
    if (page->source == NULL) {
        Py_DECREF(page);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = items[i];
        row_t *r = &page->rows[i];
        Py_ssize_t len32;
        /* A tuple (or a named tuple, whose items are the tuple's) of the ten columns. */
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 10) goto not_plain;
        PyObject **c = &PyTuple_GET_ITEM(row, 0);
        if (!plain_int(c[0], &r->position) || !plain_int(c[2], &r->version) ||
            !plain_int(c[6], &r->schema))
            goto not_plain;
        if (!plain_str(c[1], &r->sid, &r->sid_len, 1)) goto not_plain;
        if (!plain_str(c[3], &r->etype, &r->etype_len, 1)) goto not_plain;
        if (c[4] == Py_None) {
            r->wf = NULL;
        } else if (!plain_str(c[4], &r->wf, &r->wf_len, 1)) {
            goto not_plain;
        }
        if (!plain_str(c[5], &r->ts, &r->ts_len, 0)) goto not_plain;
        if (!plain_bytes(c[7], &r->prev, &len32) || len32 != 32) goto not_plain;
        if (!plain_bytes(c[8], &r->hash, &len32) || len32 != 32) goto not_plain;
        if (!plain_bytes(c[9], &r->body, &r->body_len)) goto not_plain;
        Py_INCREF(row);
        page->source[i] = row;
    }
    Py_DECREF(seq);
    return (PyObject *)page;
not_plain:
    Py_DECREF(page); /* releases the rows taken so far (the rest are NULL) */
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* ========================================================================================
 * Reader: pages straight from SQLite
 * ====================================================================================== */

typedef struct {
    PyObject_HEAD
    tb_sqlite3 *db;
    tb_sqlite3_stmt *stmt;
    int busy;
} ReaderObject;

static const char READER_SQL[] =
    "SELECT position, stream_id, stream_version, event_type, workflow_id, timestamp, "
    "schema_version, CAST(prev_hash AS BLOB), CAST(hash AS BLOB), CAST(body AS BLOB) "
    "FROM events WHERE position >= ? AND position <= ? ORDER BY position LIMIT ?";

static void reader_release(ReaderObject *self) {
    if (self->stmt != NULL) sq.finalize(self->stmt);
    if (self->db != NULL) sq.close(self->db);
    self->stmt = NULL;
    self->db = NULL;
}

static void reader_dealloc(ReaderObject *self) {
    reader_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int reader_init(ReaderObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"path", "busy_timeout_ms", NULL};
    PyObject *path_bytes = NULL;
    int busy_ms = 60000;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|i", kwlist, PyUnicode_FSConverter,
                                     &path_bytes, &busy_ms))
        return -1;
    if (!sq.bound) {
        Py_DECREF(path_bytes);
        PyErr_SetString(SQLiteError, "SQLite is not bound (call bind_sqlite first)");
        return -1;
    }
    reader_release(self);
    int rc = sq.open_v2(PyBytes_AS_STRING(path_bytes), &self->db,
                        SQ_OPEN_READWRITE | SQ_OPEN_NOMUTEX, NULL);
    Py_DECREF(path_bytes);
    if (rc == SQ_OK) rc = sq.busy_timeout(self->db, busy_ms);
    if (rc == SQ_OK) rc = sq.exec(self->db, "PRAGMA query_only=1", NULL, NULL, NULL);
    if (rc == SQ_OK) rc = sq.prepare_v2(self->db, READER_SQL, -1, &self->stmt, NULL);
    if (rc != SQ_OK) {
        PyErr_Format(SQLiteError, "cannot open for reading: %s",
                     self->db ? sq.errmsg(self->db) : "out of memory");
        reader_release(self);
        return -1;
    }
    return 0;
}

typedef struct {
    int64_t position, version, schema;
    size_t sid, etype, wf, ts, prev, hash, body; /* offsets into the arena */
    Py_ssize_t sid_len, etype_len, wf_len, ts_len, body_len;
    int wf_null;
} staged_t;

typedef struct {
    uint8_t *buf;
    size_t len, cap;
} arena_t;

static int arena_put(arena_t *a, const void *data, size_t n, size_t *at) {
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap : (size_t)1 << 20;
        while (cap < a->len + n) cap *= 2;
        uint8_t *buf = (uint8_t *)realloc(a->buf, cap);
        if (buf == NULL) return -1;
        a->buf = buf;
        a->cap = cap;
    }
    if (n) memcpy(a->buf + a->len, data, n);
    *at = a->len;
    a->len += n;
    return 0;
}

enum { READ_OK = 0, READ_NOT_PLAIN = 1, READ_NOMEM = 2, READ_SQL = 3 };

/* Step the statement, copying plain rows; runs without the GIL. */
static int reader_fill(ReaderObject *self, staged_t *staged, Py_ssize_t limit, Py_ssize_t *count,
                       arena_t *arena) {
    tb_sqlite3_stmt *st = self->stmt;
    Py_ssize_t n = 0;
    int rc;
    while ((rc = sq.step(st)) == SQ_ROW) {
        if (n >= limit) break;
        staged_t *s = &staged[n];
        static const int want[10] = {SQ_INTEGER, SQ_TEXT, SQ_INTEGER, SQ_TEXT, SQ_TEXT,
                                     SQ_TEXT,    SQ_INTEGER, SQ_BLOB, SQ_BLOB, SQ_BLOB};
        for (int c = 0; c < 10; c++) {
            int t = sq.column_type(st, c);
            if (t != want[c] && !(c == 4 && t == SQ_NULL)) return READ_NOT_PLAIN;
        }
        s->position = sq.column_int64(st, 0);
        s->version = sq.column_int64(st, 2);
        s->schema = sq.column_int64(st, 6);
        const int text_cols[4] = {1, 3, 4, 5};
        size_t *offs[4] = {&s->sid, &s->etype, &s->wf, &s->ts};
        Py_ssize_t *lens[4] = {&s->sid_len, &s->etype_len, &s->wf_len, &s->ts_len};
        s->wf_null = sq.column_type(st, 4) == SQ_NULL;
        for (int k = 0; k < 4; k++) {
            int c = text_cols[k];
            if (c == 4 && s->wf_null) {
                *offs[k] = 0;
                *lens[k] = 0;
                continue;
            }
            const uint8_t *p = sq.column_text(st, c);
            int len = sq.column_bytes(st, c);
            if (p == NULL && len) return READ_NOMEM;
            /* ids go into the record as JSON strings: only those that need no escape */
            if (!utf8_ok(p, len, c != 5)) return READ_NOT_PLAIN;
            if (arena_put(arena, p, (size_t)len, offs[k]) < 0) return READ_NOMEM;
            *lens[k] = len;
        }
        const int blob_cols[3] = {7, 8, 9};
        size_t *boffs[3] = {&s->prev, &s->hash, &s->body};
        for (int k = 0; k < 3; k++) {
            int c = blob_cols[k];
            const void *p = sq.column_blob(st, c);
            int len = sq.column_bytes(st, c);
            if (p == NULL && len) return READ_NOMEM;
            if (k < 2 && len != 32) return READ_NOT_PLAIN;
            if (arena_put(arena, p, (size_t)len, boffs[k]) < 0) return READ_NOMEM;
            if (k == 2) s->body_len = len;
        }
        n++;
    }
    *count = n;
    if (rc != SQ_ROW && rc != SQ_DONE) return READ_SQL;
    return READ_OK;
}

static PyObject *reader_page(ReaderObject *self, PyObject *args) {
    long long start, stop;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "LLn", &start, &stop, &limit)) return NULL;
    if (self->stmt == NULL) {
        PyErr_SetString(SQLiteError, "reader is closed");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "reader is in use by another thread");
        return NULL;
    }
    if (limit < 0) limit = 0;
    staged_t *staged = (staged_t *)PyMem_RawMalloc((limit ? (size_t)limit : 1) * sizeof(staged_t));
    if (staged == NULL) return PyErr_NoMemory();
    arena_t arena = {NULL, 0, 0};
    Py_ssize_t n = 0;
    int status;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    tb_sqlite3_stmt *st = self->stmt;
    sq.bind_int64(st, 1, start);
    sq.bind_int64(st, 2, stop);
    sq.bind_int64(st, 3, (long long)limit);
    status = reader_fill(self, staged, limit, &n, &arena);
    sq.reset(st); /* ends the read transaction */
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (status != READ_OK) {
        PyMem_RawFree(staged);
        free(arena.buf);
        if (status == READ_NOT_PLAIN) Py_RETURN_NONE;
        if (status == READ_NOMEM) return PyErr_NoMemory();
        PyErr_Format(SQLiteError, "read failed: %s", sq.errmsg(self->db));
        return NULL;
    }
    PageObject *page = page_new(n);
    if (page == NULL) {
        PyMem_RawFree(staged);
        free(arena.buf);
        return NULL;
    }
    page->arena = arena.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const staged_t *s = &staged[i];
        row_t *r = &page->rows[i];
        const uint8_t *base = arena.buf;
        r->position = s->position;
        r->version = s->version;
        r->schema = s->schema;
        r->sid = base + s->sid;
        r->sid_len = s->sid_len;
        r->etype = base + s->etype;
        r->etype_len = s->etype_len;
        r->wf = s->wf_null ? NULL : base + s->wf;
        r->wf_len = s->wf_len;
        r->ts = base + s->ts;
        r->ts_len = s->ts_len;
        r->prev = base + s->prev;
        r->hash = base + s->hash;
        r->body = base + s->body;
        r->body_len = s->body_len;
    }
    PyMem_RawFree(staged);
    return (PyObject *)page;
}

static PyObject *reader_close(ReaderObject *self, PyObject *unused) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "reader is in use by another thread");
        return NULL;
    }
    reader_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef reader_methods[] = {
    {"page", (PyCFunction)reader_page, METH_VARARGS,
     "page(start, stop, limit) -> Page | None: up to `limit` records with start <= position "
     "<= stop, in one read transaction; None if a record is not plain (read it yourself)."},
    {"close", (PyCFunction)reader_close, METH_NOARGS, "Close the connection."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracebound._verifykernel.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(path, busy_timeout_ms=60000): a read-only SQLite connection for pages.",
    .tp_methods = reader_methods,
    .tp_init = (initproc)reader_init,
    .tp_new = PyType_GenericNew,
};

/* ========================================================================================
 * Appends: a record's bytes and chain link (store/_chaining.py's chain_rows)
 * ====================================================================================== */

static PyObject *S_prefix, *S_fields, *S_values, *S_schema_version, *S_timestamp,
    *S_timestamp_text, *S_workflow_id, *S_event_type;

static char *put_lit(char *p, const char *lit, size_t n) {
    memcpy(p, lit, n);
    return p + n;
}

/* Decimal digits of v >= 0 (what b"%d" % v writes for it). */
static char *put_u64(char *p, unsigned long long v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

/* b"%d" % v for any long long. */
static char *put_i64(char *p, long long v) {
    if (v < 0) {
        *p++ = '-';
        return put_u64(p, 0ULL - (unsigned long long)v);
    }
    return put_u64(p, (unsigned long long)v);
}

/* len(b"%d" % v) */
static size_t len_i64(long long v) {
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    size_t n = v < 0 ? 2 : 1;
    while (u >= 10) {
        u /= 10;
        n++;
    }
    return n;
}

/* One Prepared item, as the body is written from it: pointers into its bytes objects, and
 * the values its row takes. The view owns a reference to each object it names (release
 * with release_view): building rows allocates, an allocation may run the cyclic GC, and a
 * finalizer it runs may change or drop the item's attributes. */
typedef struct {
    const char *prefix, *ts, *wf;
    Py_ssize_t plen, tlen, wlen;
    long long schema;
    PyObject *schema_obj, *ts_text, *event_type, *workflow_id;
    PyObject *bytes[3]; /* the objects prefix, ts and wf point into */
} item_view_t;

static void release_view(item_view_t *v) {
    Py_DECREF(v->schema_obj);
    Py_DECREF(v->ts_text);
    Py_DECREF(v->event_type);
    Py_DECREF(v->workflow_id);
    for (int k = 0; k < 3; k++) Py_DECREF(v->bytes[k]);
}

/* 1 with *v filled (release it); 0 (no error set, nothing held) when `item` is not of the
 * plain kind the C loops were written for (a missing value, a bytes subclass, an int beyond
 * 64 bits): Python does it. */
static int view_item(PyObject *item, item_view_t *v) {
    PyObject *prefix = PyObject_GetAttr(item, S_prefix);
    PyObject *fields = prefix ? PyObject_GetAttr(item, S_fields) : NULL;
    PyObject *values = fields ? PyObject_GetAttr(item, S_values) : NULL;
    PyObject *schema = values ? PyObject_GetAttr(fields, S_schema_version) : NULL;
    PyObject *ts = schema ? PyObject_GetAttr(fields, S_timestamp) : NULL;
    PyObject *ts_text = ts ? PyObject_GetAttr(fields, S_timestamp_text) : NULL;
    PyObject *wf_json = ts_text ? PyObject_GetAttr(fields, S_workflow_id) : NULL;
    PyObject *event_type = NULL, *workflow_id = NULL;
    int ok = 0;
    if (wf_json == NULL || !PyBytes_CheckExact(prefix) || !PyLong_CheckExact(schema) ||
        !PyBytes_CheckExact(ts) || !PyBytes_CheckExact(wf_json) || !PyDict_CheckExact(values))
        goto out;
    event_type = PyDict_GetItemWithError(values, S_event_type);
    workflow_id = event_type ? PyDict_GetItemWithError(values, S_workflow_id) : NULL;
    if (workflow_id == NULL) goto out;
    Py_INCREF(event_type);
    Py_INCREF(workflow_id);
    int overflow = 0;
    v->schema = PyLong_AsLongLongAndOverflow(schema, &overflow);
    if (overflow || (v->schema == -1 && PyErr_Occurred())) {
        Py_DECREF(event_type);
        Py_DECREF(workflow_id);
        goto out;
    }
    /* The view takes these references over. */
    v->schema_obj = schema;
    v->ts_text = ts_text;
    v->event_type = event_type;
    v->workflow_id = workflow_id;
    v->bytes[0] = prefix;
    v->bytes[1] = ts;
    v->bytes[2] = wf_json;
    v->prefix = PyBytes_AS_STRING(prefix);
    v->plen = PyBytes_GET_SIZE(prefix);
    v->ts = PyBytes_AS_STRING(ts);
    v->tlen = PyBytes_GET_SIZE(ts);
    v->wf = PyBytes_AS_STRING(wf_json);
    v->wlen = PyBytes_GET_SIZE(wf_json);
    prefix = schema = ts = ts_text = wf_json = NULL;
    ok = 1;
out:
    Py_XDECREF(prefix);
    Py_XDECREF(fields);
    Py_XDECREF(values);
    Py_XDECREF(schema);
    Py_XDECREF(ts);
    Py_XDECREF(ts_text);
    Py_XDECREF(wf_json);
    if (!ok) PyErr_Clear();
    return ok;
}

/* The record's suffix after the canonical prefix: SUFFIX_FORMAT of events/record.py. */
static const char L_POS[] = ",\"position\":";
static const char L_PREV[] = ",\"prev_hash\":\"";
static const char L_SCHEMA[] = "\",\"schema_version\":";
static const char L_SID[] = ",\"stream_id\":";
static const char L_VER[] = ",\"stream_version\":";
static const char L_TS[] = ",\"timestamp\":";
static const char L_WF[] = ",\"workflow_id\":";

/* The exact length of the body write_body writes. */
static size_t body_len(const item_view_t *v, Py_ssize_t sid_len, long long position,
                       long long version) {
    return (size_t)v->plen + sizeof L_POS - 1 + len_i64(position) + sizeof L_PREV - 1 + 64 +
           sizeof L_SCHEMA - 1 + len_i64(v->schema) + sizeof L_SID - 1 + (size_t)sid_len +
           sizeof L_VER - 1 + len_i64(version) + sizeof L_TS - 1 + (size_t)v->tlen +
           sizeof L_WF - 1 + (size_t)v->wlen + 1;
}

/* prefix + SUFFIX_FORMAT % (position, hex(prev), schema, sid_json, version, ts, wf_json);
 * the end of what was written. Needs no GIL: it reads bytes objects' buffers only. */
static char *write_body(char *p, const item_view_t *v, const char *sid_json, Py_ssize_t sid_len,
                        long long position, long long version, const uint8_t *prev) {
    static const char HEX[] = "0123456789abcdef";
    p = put_lit(p, v->prefix, (size_t)v->plen);
    p = put_lit(p, L_POS, sizeof L_POS - 1);
    p = put_i64(p, position);
    p = put_lit(p, L_PREV, sizeof L_PREV - 1);
    for (int k = 0; k < 32; k++) {
        *p++ = HEX[prev[k] >> 4];
        *p++ = HEX[prev[k] & 15];
    }
    p = put_lit(p, L_SCHEMA, sizeof L_SCHEMA - 1);
    p = put_i64(p, v->schema);
    p = put_lit(p, L_SID, sizeof L_SID - 1);
    p = put_lit(p, sid_json, (size_t)sid_len);
    p = put_lit(p, L_VER, sizeof L_VER - 1);
    p = put_i64(p, version);
    p = put_lit(p, L_TS, sizeof L_TS - 1);
    p = put_lit(p, v->ts, (size_t)v->tlen);
    p = put_lit(p, L_WF, sizeof L_WF - 1);
    p = put_lit(p, v->wf, (size_t)v->wlen);
    *p++ = '}';
    return p;
}

/* The row tuple in the stores' column order, with new body and digest objects of the right
 * sizes, left for the caller to fill (before anyone reads them); NULL on error. Takes no
 * reference from the caller: prev is increfed here. */
static PyObject *new_row(PyObject *sid, const item_view_t *v, long long position,
                         long long version, PyObject *prev, Py_ssize_t blen) {
    PyObject *body = PyBytes_FromStringAndSize(NULL, blen);
    PyObject *digest = body ? PyBytes_FromStringAndSize(NULL, 32) : NULL;
    PyObject *pos_obj = digest ? PyLong_FromLongLong(position) : NULL;
    PyObject *ver_obj = pos_obj ? PyLong_FromLongLong(version) : NULL;
    PyObject *row = ver_obj ? PyTuple_New(10) : NULL;
    if (row == NULL) {
        Py_XDECREF(body);
        Py_XDECREF(digest);
        Py_XDECREF(pos_obj);
        Py_XDECREF(ver_obj);
        return NULL;
    }
    Py_INCREF(sid);
    Py_INCREF(v->event_type);
    Py_INCREF(v->workflow_id);
    Py_INCREF(v->ts_text);
    Py_INCREF(v->schema_obj);
    Py_INCREF(prev);
    PyTuple_SET_ITEM(row, 0, pos_obj);
    PyTuple_SET_ITEM(row, 1, sid);
    PyTuple_SET_ITEM(row, 2, ver_obj);
    PyTuple_SET_ITEM(row, 3, v->event_type);
    PyTuple_SET_ITEM(row, 4, v->workflow_id);
    PyTuple_SET_ITEM(row, 5, v->ts_text);
    PyTuple_SET_ITEM(row, 6, v->schema_obj);
    PyTuple_SET_ITEM(row, 7, prev);
    PyTuple_SET_ITEM(row, 8, digest);
    PyTuple_SET_ITEM(row, 9, body);
    return row;
}

/* Write a record's body (`blen` bytes, as body_len says) and its digest BLAKE3(prev || body)
 * into buffers of a new_row: on the caller's thread (chain_request) or, without the GIL, on
 * the writer's (chain_async). */
static void link_record(const item_view_t *v, const char *sid_json, Py_ssize_t sid_len,
                        long long position, long long version, const uint8_t *prev, char *body,
                        size_t blen, uint8_t *digest) {
    write_body(body, v, sid_json, sid_len, position, version, prev);
    tb_b3_msg msg = {prev, 32, (const uint8_t *)body, blen, digest};
    tb_b3_hash_one(&msg);
}

/* chain_request(items, stream_id, stream_id_json, position, version, prev)
 *   -> (rows, position, version, prev) | None
 *
 * Exactly chain_rows' inner loop for one request: per Prepared item, the next position and
 * version, body = prefix + SUFFIX_FORMAT % (...), digest = BLAKE3(prev || body), and the row
 * tuple in the stores' column order. None (nothing done, no error) whenever an input is not
 * of the plain kind this loop was written for (an int beyond 64 bits, a bytes subclass, a
 * prev that is not 32 bytes, a missing value): the Python loop then does the request. */
static PyObject *chain_request(PyObject *module, PyObject *args) {
    PyObject *items, *sid, *sid_json, *prev;
    long long position, version;
    if (!PyArg_ParseTuple(args, "O!UO!LLO", &PyList_Type, &items, &sid, &PyBytes_Type, &sid_json,
                          &position, &version, &prev))
        return NULL;
    if (!PyBytes_CheckExact(prev) || PyBytes_GET_SIZE(prev) != 32 || !PyBytes_CheckExact(sid_json))
        Py_RETURN_NONE;
    /* A snapshot: building rows allocates, and a finalizer run by the GC may change the list. */
    PyObject *snap = PyList_AsTuple(items);
    if (snap == NULL) return NULL;
    const Py_ssize_t n = PyTuple_GET_SIZE(snap);
    PyObject *rows = PyList_New(n), *out = NULL;
    if (rows == NULL) goto done;
    const char *sj = PyBytes_AS_STRING(sid_json);
    const Py_ssize_t sid_len = PyBytes_GET_SIZE(sid_json);
    for (Py_ssize_t i = 0; i < n; i++) {
        item_view_t v;
        if (position >= LLONG_MAX || version >= LLONG_MAX ||
            !view_item(PyTuple_GET_ITEM(snap, i), &v)) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        position++;
        version++;
        PyObject *row =
            new_row(sid, &v, position, version, prev, (Py_ssize_t)body_len(&v, sid_len, position, version));
        if (row != NULL)
            link_record(&v, sj, sid_len, position, version,
                        (const uint8_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(row, 7)),
                        PyBytes_AS_STRING(PyTuple_GET_ITEM(row, 9)),
                        (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(row, 9)),
                        (uint8_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(row, 8)));
        release_view(&v);
        if (row == NULL) goto done;
        PyList_SET_ITEM(rows, i, row);
        prev = PyTuple_GET_ITEM(row, 8);
    }
    out = Py_BuildValue("(OLLO)", rows, position, version, prev);
done:
    Py_XDECREF(rows);
    Py_DECREF(snap);
    return out;
}

/* ========================================================================================
 * Writer: the SQLite store's append connection
 *
 * The statements of an append transaction (store/sqlite.py, `_append_locked` and
 * `_append_solo`) on a connection of its own, so that binding a group's rows costs no
 * Python per column (pysqlite's `executemany` spends ~1.8 us per row on that) and the
 * inserts and the COMMIT's fsync run without the GIL: other threads prepare their next
 * appends meanwhile. The rows are the store's own (`chain_rows`): anything but the types
 * it builds (int, str, bytes, None; subclasses too, as pysqlite takes them) is a
 * TypeError, checked for every row before the first is inserted.
 * ====================================================================================== */

#define SQ_CONSTRAINT 19
#define SQ_STATIC ((void (*)(void *))0)

typedef struct {
    PyObject_HEAD
    tb_sqlite3 *db;
    tb_sqlite3_stmt *insert, *head, *last, *data_version;
    int busy;
    /* One background insert at a time (insert_async, then wait): the rows' list is held
     * until wait(), and the connection is the worker's alone meanwhile (busy is set). */
    PyObject *job_list; /* a tuple of the rows */
    char *job_sql;  /* exec_async's statements (a copy), or NULL: insert job_rows */
    void *job_rows; /* bound_row_t[job_n] */
    Py_ssize_t job_n;
    /* chain_async's job: the rows' bodies and digests are written by the worker, from these
     * views of the items (each holding the bytes it points into) and the stream id's JSON
     * (held in job_keep), before each insert. */
    item_view_t *job_chain;
    PyObject *job_keep;
    const char *job_sid_json;
    Py_ssize_t job_sid_len;
    int job_rc;
    int job_state; /* JOB_NONE, JOB_QUEUED, JOB_DONE */
    /* Deferred WAL checkpoints (defer_checkpoints): SQLite's own auto-checkpoint runs inside
     * the COMMIT that crosses the threshold, so that append waits for it; instead the WAL
     * hook only notes it is due, and the worker runs it after the append has returned. */
    int ckpt_pages; /* 0: SQLite's auto-checkpoint (not deferred) */
    int ckpt_due;
    int ckpt_running;
#ifdef TB_HAVE_PTHREAD
    /* The worker is a plain OS thread: it never takes the GIL, so the thread that queued
     * the rows keeps running Python at full speed (a Python thread would contend for the
     * GIL on every wake-up and slow both down). */
    pthread_t thread;
    pid_t thread_pid; /* 0: no worker (none started, or this is a forked child) */
    int stop;
    int sync_ready;
    pid_t sync_pid; /* the process that initialised mu and cv */
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
} WriterObject;

enum { JOB_NONE = 0, JOB_QUEUED = 1, JOB_DONE = 2 };

static void writer_join_job(WriterObject *self);
static void writer_stop_worker(WriterObject *self);
static void writer_await_checkpoint(WriterObject *self);
static void writer_after_commit(WriterObject *self);

static const char WRITER_INSERT[] =
    "INSERT INTO events (position, stream_id, stream_version, event_type, workflow_id, "
    "timestamp, schema_version, prev_hash, hash, body) VALUES (?,?,?,?,?,?,?,?,?,?)";
static const char WRITER_HEAD[] =
    "SELECT stream_version, hash FROM events WHERE stream_id = ? "
    "ORDER BY stream_version DESC LIMIT 1";
static const char WRITER_LAST[] = "SELECT COALESCE(MAX(position), 0) FROM events";
static const char WRITER_DATA_VERSION[] = "PRAGMA data_version";

static void writer_release(WriterObject *self) {
    writer_join_job(self); /* the worker is done with the connection... */
    writer_await_checkpoint(self);
    writer_stop_worker(self); /* ...and gone */
    tb_sqlite3_stmt **stmts[4] = {&self->insert, &self->head, &self->last, &self->data_version};
    for (int i = 0; i < 4; i++) {
        if (*stmts[i] != NULL) sq.finalize(*stmts[i]);
        *stmts[i] = NULL;
    }
    if (self->db != NULL) sq.close(self->db);
    self->db = NULL;
}

static void writer_dealloc(WriterObject *self) {
    writer_release(self);
#ifdef TB_HAVE_PTHREAD
    if (self->sync_ready) {
        pthread_cond_destroy(&self->cv);
        pthread_mutex_destroy(&self->mu);
    }
#endif
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Raise SQLiteError (ConstraintError for a broken constraint) with the connection's message. */
static PyObject *writer_error(WriterObject *self, int rc, const char *what) {
    PyObject *type = (rc & 0xff) == SQ_CONSTRAINT ? ConstraintError : SQLiteError;
    PyErr_Format(type, "%s: %s", what, self->db ? sq.errmsg(self->db) : "closed");
    return NULL;
}

static int writer_init(WriterObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"path", "busy_timeout_ms", "setup", NULL};
    PyObject *path_bytes = NULL;
    int busy_ms = 60000;
    const char *setup = "";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|is", kwlist, PyUnicode_FSConverter,
                                     &path_bytes, &busy_ms, &setup))
        return -1;
    if (!sq.bound) {
        Py_DECREF(path_bytes);
        PyErr_SetString(SQLiteError, "SQLite is not bound (call bind_sqlite first)");
        return -1;
    }
    writer_release(self);
    self->ckpt_pages = self->ckpt_due = 0; /* SQLite's own auto-checkpoint until told */
    int rc = sq.open_v2(PyBytes_AS_STRING(path_bytes), &self->db,
                        SQ_OPEN_READWRITE | SQ_OPEN_NOMUTEX, NULL);
    Py_DECREF(path_bytes);
    if (rc == SQ_OK) rc = sq.busy_timeout(self->db, busy_ms);
    if (rc == SQ_OK && setup[0]) rc = sq.exec(self->db, setup, NULL, NULL, NULL);
    if (rc == SQ_OK) rc = sq.prepare_v2(self->db, WRITER_INSERT, -1, &self->insert, NULL);
    if (rc == SQ_OK) rc = sq.prepare_v2(self->db, WRITER_HEAD, -1, &self->head, NULL);
    if (rc == SQ_OK) rc = sq.prepare_v2(self->db, WRITER_LAST, -1, &self->last, NULL);
    if (rc == SQ_OK)
        rc = sq.prepare_v2(self->db, WRITER_DATA_VERSION, -1, &self->data_version, NULL);
    if (rc != SQ_OK) {
        PyErr_Format(SQLiteError, "cannot open for writing: %s",
                     self->db ? sq.errmsg(self->db) : "out of memory");
        writer_release(self);
        return -1;
    }
    return 0;
}

static int writer_ready(WriterObject *self) {
    if (!self->busy) writer_await_checkpoint(self); /* the connection is the worker's till then */
    if (self->db == NULL) {
        PyErr_SetString(SQLiteError, "writer is closed");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "writer is in use by another thread");
        return 0;
    }
    return 1;
}

/* exec(sql): BEGIN IMMEDIATE (may wait for another writer), COMMIT (fsyncs), ROLLBACK. */
static PyObject *writer_exec(WriterObject *self, PyObject *arg) {
    if (!writer_ready(self)) return NULL;
    Py_ssize_t len;
    const char *sql = PyUnicode_AsUTF8AndSize(arg, &len);
    if (sql == NULL) return NULL;
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = sq.exec(self->db, sql, NULL, NULL, NULL);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc != SQ_OK) return writer_error(self, rc, sql);
    writer_after_commit(self);
    Py_RETURN_NONE;
}

/* One integer from a statement that returns one row (data_version, the last position). */
static PyObject *writer_scalar(WriterObject *self, tb_sqlite3_stmt *st, const char *what) {
    if (!writer_ready(self)) return NULL;
    int rc = sq.step(st);
    long long value = rc == SQ_ROW ? sq.column_int64(st, 0) : 0;
    sq.reset(st);
    if (rc != SQ_ROW) return writer_error(self, rc, what);
    return PyLong_FromLongLong(value);
}

static PyObject *writer_data_version(WriterObject *self, PyObject *unused) {
    return writer_scalar(self, self->data_version, "data_version");
}

static PyObject *writer_last_position(WriterObject *self, PyObject *unused) {
    return writer_scalar(self, self->last, "last position");
}

/* head(stream_id) -> (version, hash) | None, as `SQLiteStore._head` reads it. */
static PyObject *writer_head(WriterObject *self, PyObject *arg) {
    if (!writer_ready(self)) return NULL;
    Py_ssize_t len;
    const char *sid = PyUnicode_AsUTF8AndSize(arg, &len);
    if (sid == NULL) return NULL;
    if (len > INT32_MAX) return PyErr_Format(PyExc_OverflowError, "stream id too long");
    tb_sqlite3_stmt *st = self->head;
    int rc = sq.bind_text(st, 1, sid, (int)len, SQ_STATIC);
    PyObject *out = NULL;
    if (rc == SQ_OK) {
        rc = sq.step(st);
        if (rc == SQ_DONE) {
            out = Py_NewRef(Py_None);
        } else if (rc == SQ_ROW) {
            const void *hash = sq.column_blob(st, 1);
            int hash_len = sq.column_bytes(st, 1);
            out = Py_BuildValue("(Ly#)", sq.column_int64(st, 0), hash ? hash : "",
                                (Py_ssize_t)hash_len);
        }
    }
    sq.reset(st);
    if (out == NULL && !PyErr_Occurred()) return writer_error(self, rc, "head");
    return out;
}

typedef struct {
    long long position, version, schema;
    const char *text[4]; /* stream_id, event_type, workflow_id (NULL: SQL NULL), timestamp */
    Py_ssize_t text_len[4];
    const char *blob[3]; /* prev_hash, hash, body */
    Py_ssize_t blob_len[3];
} bound_row_t;

static int take_int(PyObject *v, long long *out) {
    if (!PyLong_Check(v)) return -1;
    *out = PyLong_AsLongLong(v);
    return (*out == -1 && PyErr_Occurred()) ? -2 : 0;
}

/* Row tuple -> pointers into its own objects (valid while the caller holds the rows). */
static int take_row(PyObject *row, bound_row_t *b) {
    if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 10) return -1;
    const int int_cols[3] = {0, 2, 6};
    long long *ints[3] = {&b->position, &b->version, &b->schema};
    for (int k = 0; k < 3; k++) {
        int r = take_int(PyTuple_GET_ITEM(row, int_cols[k]), ints[k]);
        if (r) return r;
    }
    const int text_cols[4] = {1, 3, 4, 5};
    for (int k = 0; k < 4; k++) {
        PyObject *v = PyTuple_GET_ITEM(row, text_cols[k]);
        if (k == 2 && v == Py_None) {
            b->text[k] = NULL;
            b->text_len[k] = 0;
            continue;
        }
        if (!PyUnicode_Check(v)) return -1; /* NewType ids and str subclasses bind as text */
        b->text[k] = PyUnicode_AsUTF8AndSize(v, &b->text_len[k]); /* cached in the str */
        if (b->text[k] == NULL) return -2;
        if (b->text_len[k] > INT32_MAX) return -1;
    }
    for (int k = 0; k < 3; k++) {
        PyObject *v = PyTuple_GET_ITEM(row, 7 + k);
        if (!PyBytes_Check(v) || PyBytes_GET_SIZE(v) > INT32_MAX) return -1;
        b->blob[k] = PyBytes_AS_STRING(v);
        b->blob_len[k] = PyBytes_GET_SIZE(v);
    }
    return 0;
}

/* Bind and step every row; runs without the GIL. Returns SQ_OK or the failing code. With
 * `chain` (chain_async), each row's body and digest are written first: rows[i]'s prev is
 * rows[i - 1]'s digest, written just before. */
static int insert_rows(WriterObject *self, const bound_row_t *rows, Py_ssize_t n,
                       const item_view_t *chain, const char *sid_json, Py_ssize_t sid_len) {
    tb_sqlite3_stmt *st = self->insert;
    for (Py_ssize_t i = 0; i < n; i++) {
        const bound_row_t *b = &rows[i];
        if (chain != NULL)
            link_record(&chain[i], sid_json, sid_len, b->position, b->version,
                        (const uint8_t *)b->blob[0], (char *)b->blob[2], (size_t)b->blob_len[2],
                        (uint8_t *)b->blob[1]);
        int rc = sq.bind_int64(st, 1, b->position);
        if (rc == SQ_OK) rc = sq.bind_text(st, 2, b->text[0], (int)b->text_len[0], SQ_STATIC);
        if (rc == SQ_OK) rc = sq.bind_int64(st, 3, b->version);
        if (rc == SQ_OK) rc = sq.bind_text(st, 4, b->text[1], (int)b->text_len[1], SQ_STATIC);
        if (rc == SQ_OK)
            rc = b->text[2] == NULL
                     ? sq.bind_null(st, 5)
                     : sq.bind_text(st, 5, b->text[2], (int)b->text_len[2], SQ_STATIC);
        if (rc == SQ_OK) rc = sq.bind_text(st, 6, b->text[3], (int)b->text_len[3], SQ_STATIC);
        if (rc == SQ_OK) rc = sq.bind_int64(st, 7, b->schema);
        for (int k = 0; k < 3 && rc == SQ_OK; k++)
            rc = sq.bind_blob(st, 8 + k, b->blob[k], (int)b->blob_len[k], SQ_STATIC);
        if (rc == SQ_OK) {
            rc = sq.step(st);
            if (rc == SQ_DONE) rc = SQ_OK;
        }
        if (rc != SQ_OK) {
            rc = sq.errcode(self->db); /* the step's code (reset would report it again) */
            sq.reset(st);
            return rc ? rc : 1;
        }
        sq.reset(st);
    }
    return SQ_OK;
}

/* The row list `arg` as bound rows (pointers into its objects: keep `arg` alive while they
 * are used). NULL with an exception set if a row is not a store row. */
static bound_row_t *take_rows(PyObject *arg, Py_ssize_t *count) {
    if (!PyList_CheckExact(arg)) {
        PyErr_Format(PyExc_TypeError, "rows must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(arg);
    bound_row_t *rows = (bound_row_t *)PyMem_RawMalloc((n ? (size_t)n : 1) * sizeof(bound_row_t));
    if (rows == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = take_row(PyList_GET_ITEM(arg, i), &rows[i]);
        if (r) {
            if (r == -1) PyErr_Format(PyExc_TypeError, "row %zd is not a store row tuple", i);
            PyMem_RawFree(rows);
            return NULL;
        }
    }
    *count = n;
    return rows;
}

/* insert(rows): INSERT each row, in the connection's transaction (or each in its own, in
 * autocommit mode: the store only does that with one row). */
static PyObject *writer_insert(WriterObject *self, PyObject *arg) {
    if (!writer_ready(self)) return NULL;
    Py_ssize_t n = 0;
    bound_row_t *rows = take_rows(arg, &n);
    if (rows == NULL) return NULL;
    /* The rows, and so every pointer taken from them, live until we return: held by a tuple
     * of our own, since another thread may change the list while we run without the GIL. */
    PyObject *held = PyList_AsTuple(arg);
    if (held == NULL) {
        PyMem_RawFree(rows);
        return NULL;
    }
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = insert_rows(self, rows, n, NULL, NULL, 0);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyMem_RawFree(rows);
    Py_DECREF(held);
    if (rc != SQ_OK) return writer_error(self, rc, "insert");
    writer_after_commit(self); /* an autocommit insert commits */
    Py_RETURN_NONE;
}

/* The queued job (exec_async's statements, or insert_async's or chain_async's rows); no GIL. */
static int run_job(WriterObject *self) {
    if (self->job_sql != NULL) return sq.exec(self->db, self->job_sql, NULL, NULL, NULL);
    return insert_rows(self, (const bound_row_t *)self->job_rows, self->job_n, self->job_chain,
                       self->job_sid_json, self->job_sid_len);
}

#ifdef TB_HAVE_PTHREAD
static void *writer_worker(void *arg) {
    WriterObject *self = (WriterObject *)arg;
    pthread_mutex_lock(&self->mu);
    for (;;) {
        while (!self->stop && self->job_state != JOB_QUEUED && !self->ckpt_running)
            pthread_cond_wait(&self->cv, &self->mu);
        if (self->stop) break;
        if (self->job_state == JOB_QUEUED) {
            pthread_mutex_unlock(&self->mu);
            int rc = run_job(self);
            pthread_mutex_lock(&self->mu);
            self->job_rc = rc;
            self->job_state = JOB_DONE;
            if (self->ckpt_due) { /* the job committed past the threshold: next, checkpoint */
                self->ckpt_due = 0;
                self->ckpt_running = 1;
            }
            pthread_cond_broadcast(&self->cv);
            continue;
        }
        pthread_mutex_unlock(&self->mu); /* ckpt_running: the connection is idle and ours */
        sq.wal_checkpoint_v2(self->db, "main", 0 /* PASSIVE */, NULL, NULL);
        pthread_mutex_lock(&self->mu);
        self->ckpt_running = 0;
        pthread_cond_broadcast(&self->cv);
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

/* Start the worker if this process has none (a forked child inherits the flag, not the
 * thread). 0 on success; -1 if no thread could be had (the insert then runs inline). */
static int writer_start_worker(WriterObject *self) {
    pid_t pid = getpid();
    if (self->thread_pid == pid) return 0;
    if (self->sync_ready && self->sync_pid != pid) { /* a forked child: the copies may be */
        self->sync_ready = 0;                       /* held by a thread that is not here */
        self->ckpt_running = 0;
    }
    if (!self->sync_ready) {
        if (pthread_mutex_init(&self->mu, NULL) != 0) return -1;
        if (pthread_cond_init(&self->cv, NULL) != 0) {
            pthread_mutex_destroy(&self->mu);
            return -1;
        }
        self->sync_ready = 1;
        self->sync_pid = pid;
    }
    self->stop = 0;
    if (pthread_create(&self->thread, NULL, writer_worker, self) != 0) return -1;
    self->thread_pid = pid;
    return 0;
}
#endif

/* Drop the references chain_async's views took, and the views. */
static void release_views(item_view_t *views, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) release_view(&views[i]);
    PyMem_RawFree(views);
}

/* Wait (without the GIL) for the queued insert, if any, and drop its rows. */
static void writer_join_job(WriterObject *self) {
    if (self->job_state == JOB_NONE) return;
#ifdef TB_HAVE_PTHREAD
    if (self->thread_pid == getpid()) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->mu);
        while (self->job_state != JOB_DONE) pthread_cond_wait(&self->cv, &self->mu);
        pthread_mutex_unlock(&self->mu);
        Py_END_ALLOW_THREADS
    }
#endif
    PyMem_RawFree(self->job_rows);
    self->job_rows = NULL;
    PyMem_RawFree(self->job_sql);
    self->job_sql = NULL;
    release_views(self->job_chain, self->job_chain ? self->job_n : 0);
    self->job_chain = NULL;
    Py_CLEAR(self->job_list);
    Py_CLEAR(self->job_keep);
#ifdef TB_HAVE_PTHREAD
    if (self->thread_pid == getpid()) { /* the worker reads job_state under the lock */
        pthread_mutex_lock(&self->mu);
        self->job_state = JOB_NONE;
        pthread_mutex_unlock(&self->mu);
    } else {
        self->job_state = JOB_NONE;
    }
#else
    self->job_state = JOB_NONE;
#endif
    self->busy = 0;
}

static void writer_stop_worker(WriterObject *self) {
#ifdef TB_HAVE_PTHREAD
    if (self->thread_pid == getpid()) {
        pthread_mutex_lock(&self->mu);
        self->stop = 1;
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(self->thread, NULL);
        Py_END_ALLOW_THREADS
        self->thread_pid = 0;
    }
#endif
}

/* Hand the job set up in self (job_sql, or job_rows/job_n) to the worker; without one, run
 * it here. The writer is busy until wait(). */
static PyObject *writer_queue_job(WriterObject *self) {
    self->busy = 1;
#ifdef TB_HAVE_PTHREAD
    if (writer_start_worker(self) == 0) {
        pthread_mutex_lock(&self->mu);
        self->job_state = JOB_QUEUED;
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
        Py_RETURN_NONE;
    }
#endif
    int rc; /* no worker to be had: run it now */
    Py_BEGIN_ALLOW_THREADS
    rc = run_job(self);
    Py_END_ALLOW_THREADS
    self->job_rc = rc;
    self->job_state = JOB_DONE;
    Py_RETURN_NONE;
}

static int wal_hook(void *arg, tb_sqlite3 *db, const char *name, int frames) {
    WriterObject *self = (WriterObject *)arg;
    if (frames >= self->ckpt_pages) self->ckpt_due = 1; /* set on the committing thread */
    return SQ_OK;
}

/* Wait (without the GIL) for a deferred checkpoint the worker is running. */
static void writer_await_checkpoint(WriterObject *self) {
#ifdef TB_HAVE_PTHREAD
    if (self->thread_pid != getpid()) return;
    pthread_mutex_lock(&self->mu);
    int running = self->ckpt_running;
    pthread_mutex_unlock(&self->mu);
    if (!running) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    while (self->ckpt_running) pthread_cond_wait(&self->cv, &self->mu);
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
#endif
}

/* After a statement run on the caller's thread committed: hand a due checkpoint to the
 * worker (the caller goes on), or run it here if there can be no worker. */
static void writer_after_commit(WriterObject *self) {
    if (!self->ckpt_due) return;
    self->ckpt_due = 0;
#ifdef TB_HAVE_PTHREAD
    if (writer_start_worker(self) == 0) {
        pthread_mutex_lock(&self->mu);
        self->ckpt_running = 1;
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
        return;
    }
#endif
    Py_BEGIN_ALLOW_THREADS
    sq.wal_checkpoint_v2(self->db, "main", 0 /* PASSIVE */, NULL, NULL);
    Py_END_ALLOW_THREADS
}

/* defer_checkpoints(pages): checkpoint the WAL once it holds `pages` frames, on the
 * writer's own thread after the committing call has returned, instead of inside that
 * COMMIT (SQLite's auto-checkpoint, which this replaces on this connection). */
static PyObject *writer_defer_checkpoints(WriterObject *self, PyObject *arg) {
    if (!writer_ready(self)) return NULL;
    long pages = PyLong_AsLong(arg);
    if (pages == -1 && PyErr_Occurred()) return NULL;
    if (pages < 1 || pages > INT32_MAX)
        return PyErr_Format(PyExc_ValueError, "pages must be positive, not %ld", pages);
    self->ckpt_pages = (int)pages;
    sq.wal_hook(self->db, wal_hook, self);
    Py_RETURN_NONE;
}

/* insert_async(rows): start inserting `rows` (as `insert` does) on the writer's own thread
 * and return at once; `wait()` gives the outcome. Until then the writer refuses every other
 * call (busy): the connection is the worker's. */
static PyObject *writer_insert_async(WriterObject *self, PyObject *arg) {
    if (!writer_ready(self)) return NULL;
    Py_ssize_t n = 0;
    bound_row_t *rows = take_rows(arg, &n);
    if (rows == NULL) return NULL;
    self->job_list = PyList_AsTuple(arg); /* the rows, held until wait() (see insert) */
    if (self->job_list == NULL) {
        PyMem_RawFree(rows);
        return NULL;
    }
    self->job_rows = rows;
    self->job_n = n;
    return writer_queue_job(self);
}

/* chain_async(items, stream_id, stream_id_json, position, version, prev)
 *   -> (rows, position, version, prev) | None
 *
 * chain_request's rows, inserted as insert_async inserts them, with the chaining itself
 * (each record's bytes and BLAKE3 link, which depend on the one before) done on the
 * writer's own thread too, so the caller's thread goes on preparing the next events. The
 * rows come back at once, but their bodies and digests (and the prev returned, which is the
 * last digest) are written by the worker: nothing may read them before wait() has returned,
 * and a failed job leaves them undefined. `prev` may be such a digest of the job before (the
 * worker wrote it before starting this one). None, with nothing queued, whenever
 * chain_request would answer None. */
static PyObject *writer_chain_async(WriterObject *self, PyObject *args) {
    PyObject *items, *sid, *sid_json, *prev;
    long long position, version;
    if (!PyArg_ParseTuple(args, "O!UO!LLO", &PyList_Type, &items, &sid, &PyBytes_Type, &sid_json,
                          &position, &version, &prev))
        return NULL;
    if (!writer_ready(self)) return NULL;
    if (!PyBytes_CheckExact(prev) || PyBytes_GET_SIZE(prev) != 32 || !PyBytes_CheckExact(sid_json))
        Py_RETURN_NONE;
    PyObject *snap = PyList_AsTuple(items); /* the caller's list may change meanwhile */
    if (snap == NULL) return NULL;
    const Py_ssize_t n = PyTuple_GET_SIZE(snap), sid_len = PyBytes_GET_SIZE(sid_json);
    item_view_t *views = (item_view_t *)PyMem_RawMalloc((n ? (size_t)n : 1) * sizeof *views);
    bound_row_t *bound = (bound_row_t *)PyMem_RawMalloc((n ? (size_t)n : 1) * sizeof *bound);
    PyObject *rows = PyList_New(n);
    Py_ssize_t held = 0; /* views whose bytes are held */
    int declined = 0;
    if (views == NULL || bound == NULL || rows == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    /* The views' objects are held until wait(): the worker reads them without the GIL. */
    for (; held < n; held++) {
        if (!view_item(PyTuple_GET_ITEM(snap, held), &views[held])) {
            declined = 1;
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (position >= LLONG_MAX || version >= LLONG_MAX) {
            declined = 1;
            goto done;
        }
        position++;
        version++;
        PyObject *row = new_row(sid, &views[i], position, version, prev,
                                (Py_ssize_t)body_len(&views[i], sid_len, position, version));
        if (row == NULL) goto done;
        PyList_SET_ITEM(rows, i, row);
        int r = take_row(row, &bound[i]);
        if (r) {
            declined = r == -1; /* a value the insert would refuse: Python's path says so */
            goto done;
        }
        prev = PyTuple_GET_ITEM(row, 8);
    }
    self->job_list = PyList_AsTuple(rows);
    if (self->job_list == NULL) goto done;
    Py_INCREF(sid_json);
    self->job_keep = sid_json;
    self->job_rows = bound;
    self->job_n = n;
    self->job_chain = views;
    self->job_sid_json = PyBytes_AS_STRING(sid_json);
    self->job_sid_len = sid_len;
    Py_DECREF(snap);
    PyObject *queued = writer_queue_job(self); /* the job owns views and bound now */
    if (queued == NULL) {
        Py_DECREF(rows);
        return NULL;
    }
    Py_DECREF(queued);
    return Py_BuildValue("(NLLO)", rows, position, version, prev);
done: /* nothing queued: declined (None) or an error */
    if (views != NULL) release_views(views, held);
    PyMem_RawFree(bound);
    Py_XDECREF(rows);
    Py_DECREF(snap);
    if (declined) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return NULL;
}

/* exec_async(sql): `exec(sql)` (a COMMIT, say) on the writer's own thread; wait() ends it. */
static PyObject *writer_exec_async(WriterObject *self, PyObject *arg) {
    if (!writer_ready(self)) return NULL;
    Py_ssize_t len;
    const char *sql = PyUnicode_AsUTF8AndSize(arg, &len);
    if (sql == NULL) return NULL;
    char *copy = (char *)PyMem_RawMalloc((size_t)len + 1);
    if (copy == NULL) return PyErr_NoMemory();
    memcpy(copy, sql, (size_t)len + 1);
    self->job_sql = copy;
    return writer_queue_job(self);
}

/* checkpointing(): whether the worker is running a deferred checkpoint now (the next call
 * that needs the connection will wait for it); the caller may do other work meanwhile. */
static PyObject *writer_checkpointing(WriterObject *self, PyObject *unused) {
    int running = 0;
#ifdef TB_HAVE_PTHREAD
    if (self->thread_pid == getpid()) {
        pthread_mutex_lock(&self->mu);
        running = self->ckpt_running;
        pthread_mutex_unlock(&self->mu);
    }
#endif
    return PyBool_FromLong(running);
}

/* wait(): the outcome of the job under way (None, or its error); None if there is none. */
static PyObject *writer_wait(WriterObject *self, PyObject *unused) {
    if (self->job_state == JOB_NONE) Py_RETURN_NONE;
    int was_sql = self->job_sql != NULL;
    writer_join_job(self);
    if (self->job_rc != SQ_OK) return writer_error(self, self->job_rc, was_sql ? "exec" : "insert");
    Py_RETURN_NONE;
}

/* int_query(sql) -> the first column of the first row, as an int (settings, for tests). */
static PyObject *writer_int_query(WriterObject *self, PyObject *arg) {
    if (!writer_ready(self)) return NULL;
    Py_ssize_t len;
    const char *sql = PyUnicode_AsUTF8AndSize(arg, &len);
    if (sql == NULL) return NULL;
    tb_sqlite3_stmt *st = NULL;
    int rc = sq.prepare_v2(self->db, sql, (int)len, &st, NULL);
    if (rc != SQ_OK || st == NULL) {
        if (st != NULL) sq.finalize(st);
        return writer_error(self, rc == SQ_OK ? 1 : rc, sql);
    }
    rc = sq.step(st);
    long long value = rc == SQ_ROW ? sq.column_int64(st, 0) : 0;
    sq.finalize(st);
    if (rc != SQ_ROW) return writer_error(self, rc, sql);
    return PyLong_FromLongLong(value);
}

static PyObject *writer_in_transaction(WriterObject *self, PyObject *unused) {
    if (!self->busy) writer_await_checkpoint(self);
    if (self->db == NULL) Py_RETURN_FALSE;
    return PyBool_FromLong(!sq.get_autocommit(self->db));
}

static PyObject *writer_close(WriterObject *self, PyObject *unused) {
    writer_join_job(self); /* a queued insert finishes first (its outcome is dropped) */
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "writer is in use by another thread");
        return NULL;
    }
    writer_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef writer_methods[] = {
    {"exec", (PyCFunction)writer_exec, METH_O,
     "exec(sql): run statements without the GIL (BEGIN IMMEDIATE, COMMIT, ROLLBACK)."},
    {"data_version", (PyCFunction)writer_data_version, METH_NOARGS, "PRAGMA data_version"},
    {"last_position", (PyCFunction)writer_last_position, METH_NOARGS,
     "the largest position in events, 0 if none"},
    {"head", (PyCFunction)writer_head, METH_O,
     "head(stream_id) -> (version, hash) | None: the stream's last record"},
    {"insert", (PyCFunction)writer_insert, METH_O,
     "insert(rows): INSERT store row tuples, binding and stepping without the GIL."},
    {"insert_async", (PyCFunction)writer_insert_async, METH_O,
     "insert_async(rows): start `insert(rows)` on the writer's own thread; wait() ends it."},
    {"chain_async", (PyCFunction)writer_chain_async, METH_VARARGS,
     "chain_async(items, stream_id, stream_id_json, position, version, prev) -> (rows, "
     "position, version, prev) | None: chain_request's rows, chained and inserted on the "
     "writer's own thread; read nothing of them before wait()"},
    {"defer_checkpoints", (PyCFunction)writer_defer_checkpoints, METH_O,
     "defer_checkpoints(pages): checkpoint a WAL of `pages` frames after the commit returns"},
    {"exec_async", (PyCFunction)writer_exec_async, METH_O,
     "exec_async(sql): start `exec(sql)` on the writer's own thread; wait() ends it."},
    {"checkpointing", (PyCFunction)writer_checkpointing, METH_NOARGS,
     "checkpointing() -> bool: a deferred checkpoint is running on the writer's thread"},
    {"wait", (PyCFunction)writer_wait, METH_NOARGS,
     "wait(): wait for the insert_async under way and raise its error, if any."},
    {"int_query", (PyCFunction)writer_int_query, METH_O,
     "int_query(sql) -> int: the first column of the first row (settings, for tests)"},
    {"in_transaction", (PyCFunction)writer_in_transaction, METH_NOARGS,
     "whether a transaction is open"},
    {"close", (PyCFunction)writer_close, METH_NOARGS, "Close the connection."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracebound._verifykernel.Writer",
    .tp_basicsize = sizeof(WriterObject),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writer(path, busy_timeout_ms=60000, setup=''): the store's append connection.",
    .tp_methods = writer_methods,
    .tp_init = (initproc)writer_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *bind_sqlite(PyObject *module, PyObject *arg) {
#ifdef TB_HAVE_DLOPEN
    PyObject *path_bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &path_bytes)) return NULL;
    void *lib = dlopen(PyBytes_AS_STRING(path_bytes), RTLD_NOW | RTLD_NOLOAD);
    Py_DECREF(path_bytes);
    if (lib == NULL) Py_RETURN_FALSE; /* not the module this interpreter loaded */
#define SYM(field, name)                                   \
    do {                                                   \
        *(void **)(&sq.field) = dlsym(lib, name);          \
        if (sq.field == NULL) goto missing;                \
    } while (0)
    SYM(open_v2, "sqlite3_open_v2");
    SYM(close, "sqlite3_close");
    SYM(prepare_v2, "sqlite3_prepare_v2");
    SYM(bind_int64, "sqlite3_bind_int64");
    SYM(step, "sqlite3_step");
    SYM(reset, "sqlite3_reset");
    SYM(finalize, "sqlite3_finalize");
    SYM(column_type, "sqlite3_column_type");
    SYM(column_int64, "sqlite3_column_int64");
    SYM(column_blob, "sqlite3_column_blob");
    SYM(column_text, "sqlite3_column_text");
    SYM(column_bytes, "sqlite3_column_bytes");
    SYM(errmsg, "sqlite3_errmsg");
    SYM(busy_timeout, "sqlite3_busy_timeout");
    SYM(exec, "sqlite3_exec");
    SYM(bind_text, "sqlite3_bind_text");
    SYM(bind_blob, "sqlite3_bind_blob");
    SYM(bind_null, "sqlite3_bind_null");
    SYM(get_autocommit, "sqlite3_get_autocommit");
    SYM(errcode, "sqlite3_errcode");
    SYM(wal_hook, "sqlite3_wal_hook");
    SYM(wal_checkpoint_v2, "sqlite3_wal_checkpoint_v2");
#undef SYM
    sq.bound = 1;
    Py_RETURN_TRUE;
missing:
    memset(&sq, 0, sizeof sq);
    Py_RETURN_FALSE;
#else
    Py_RETURN_FALSE;
#endif
}

/* ========================================================================================
 * accept
 * ====================================================================================== */

/* BLAKE3(prev || body) of every row, once per page. Runs without the GIL: the page owns
 * (or holds strong references to) everything it points at, and `busy` keeps a second
 * thread from hashing the same page at the same time. */
static int hash_page(PageObject *page) {
    if (page->digests != NULL) return 0;
    if (page->busy) {
        PyErr_SetString(PyExc_RuntimeError, "page is in use by another thread");
        return -1;
    }
    Py_ssize_t n = page->n;
    uint8_t *digests = (uint8_t *)PyMem_RawMalloc(n ? (size_t)n * 32 : 1);
    tb_b3_msg *msgs = (tb_b3_msg *)PyMem_RawMalloc((n ? (size_t)n : 1) * sizeof(tb_b3_msg));
    if (digests == NULL || msgs == NULL) {
        PyMem_RawFree(digests);
        PyMem_RawFree(msgs);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const row_t *r = &page->rows[i];
        msgs[i].a = r->prev;
        msgs[i].alen = 32;
        msgs[i].b = r->body;
        msgs[i].blen = (size_t)r->body_len;
        msgs[i].out = digests + 32 * i;
    }
    int rc;
    page->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = tb_b3_hash_many(msgs, (size_t)n);
    Py_END_ALLOW_THREADS
    page->busy = 0;
    PyMem_RawFree(msgs);
    if (rc < 0) {
        PyMem_RawFree(digests);
        PyErr_NoMemory();
        return -1;
    }
    page->digests = digests;
    return 0;
}

/* `%d` of a Python int, as bytes. */
static int fmt_int(int64_t v, char *out) {
    char tmp[24];
    int n = 0, len = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    if (v < 0) out[len++] = '-';
    while (n) out[len++] = tmp[--n];
    return len;
}

/* Does the body end with the suffix `verify.py`'s _SUFFIX formats from the columns? */
static int suffix_ok(const row_t *r) {
    static const char P1[] = ",\"position\":";
    static const char P2[] = ",\"prev_hash\":\"";
    static const char P3[] = "\",\"schema_version\":";
    static const char P4[] = ",\"stream_id\":\"";
    static const char P5[] = "\",\"stream_version\":";
    static const char P6[] = ",\"timestamp\":\"";
    static const char P7[] = "\",\"workflow_id\":";
    static const char HEX[] = "0123456789abcdef";
    char pos[24], schema[24], version[24], hex[64];
    int pos_len = fmt_int(r->position, pos);
    int schema_len = fmt_int(r->schema, schema);
    int version_len = fmt_int(r->version, version);
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = HEX[r->prev[i] >> 4];
        hex[2 * i + 1] = HEX[r->prev[i] & 15];
    }
    Py_ssize_t wf_len = r->wf == NULL ? 4 : r->wf_len + 2;
    Py_ssize_t total = (Py_ssize_t)(sizeof P1 - 1) + pos_len + (Py_ssize_t)(sizeof P2 - 1) + 64 +
                       (Py_ssize_t)(sizeof P3 - 1) + schema_len + (Py_ssize_t)(sizeof P4 - 1) +
                       r->sid_len + (Py_ssize_t)(sizeof P5 - 1) + version_len +
                       (Py_ssize_t)(sizeof P6 - 1) + r->ts_len + (Py_ssize_t)(sizeof P7 - 1) +
                       wf_len + 1;
    if (total > r->body_len) return 0;
    const uint8_t *p = r->body + (r->body_len - total);
#define PIECE(data, len)                            \
    do {                                            \
        if (memcmp(p, (data), (size_t)(len))) return 0; \
        p += (len);                                 \
    } while (0)
    PIECE(P1, sizeof P1 - 1);
    PIECE(pos, pos_len);
    PIECE(P2, sizeof P2 - 1);
    PIECE(hex, 64);
    PIECE(P3, sizeof P3 - 1);
    PIECE(schema, schema_len);
    PIECE(P4, sizeof P4 - 1);
    PIECE(r->sid, r->sid_len);
    PIECE(P5, sizeof P5 - 1);
    PIECE(version, version_len);
    PIECE(P6, sizeof P6 - 1);
    PIECE(r->ts, r->ts_len);
    PIECE(P7, sizeof P7 - 1);
    if (r->wf == NULL) {
        PIECE("null", 4);
    } else {
        PIECE("\"", 1);
        PIECE(r->wf, r->wf_len);
        PIECE("\"", 1);
    }
    PIECE("}", 1);
#undef PIECE
    return 1;
}

/* Does the body's event_type (the first `,"event_type":`, which is the top-level key: only
 * correlation_id and event_id come before it, and a JSON string cannot hold that text)
 * equal the event_type column? `verify.py`'s _TYPE_KEY check, exactly. */
static int type_ok(const row_t *r) {
    static const char KEY[] = ",\"event_type\":";
    static const char TAIL[] = "\",\"payload\":";
    const Py_ssize_t key_len = (Py_ssize_t)(sizeof KEY - 1), tail_len = (Py_ssize_t)(sizeof TAIL - 1);
    const uint8_t *b = r->body;
    Py_ssize_t n = r->body_len;
    for (Py_ssize_t i = 0; i + key_len <= n; i++) {
        if (b[i] != ',' || memcmp(b + i, KEY, (size_t)key_len) != 0) continue;
        const uint8_t *p = b + i + key_len;
        Py_ssize_t left = n - (i + key_len);
        if (left < 1 + r->etype_len + tail_len || p[0] != '"') return 0;
        if (memcmp(p + 1, r->etype, (size_t)r->etype_len) != 0) return 0;
        return memcmp(p + 1 + r->etype_len, TAIL, (size_t)tail_len) == 0;
    }
    return 0;
}

/* One stream seen in this call: the span object in `streams` and its head, mirrored. */
typedef struct {
    const uint8_t *key;
    Py_ssize_t len;
    uint64_t hash;
    PyObject *span; /* strong reference */
    int64_t last_version;
    uint8_t last_hash[32];
    int dirty;
} entry_t;

static uint64_t key_hash(const uint8_t *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

/* Mirror an existing span's head into the entry; 0 if its fields are not plain. */
static int load_span(entry_t *e) {
    PyObject *version = PyObject_GetAttrString(e->span, "last_version");
    if (version == NULL) return -1;
    int ok = plain_int(version, &e->last_version);
    Py_DECREF(version);
    if (!ok) return 0;
    PyObject *last = PyObject_GetAttrString(e->span, "last_hash");
    if (last == NULL) return -1;
    ok = PyBytes_Check(last) && PyBytes_GET_SIZE(last) == 32;
    if (ok) memcpy(e->last_hash, PyBytes_AS_STRING(last), 32);
    Py_DECREF(last);
    return ok;
}

static int store_span(entry_t *e) {
    PyObject *version = PyLong_FromLongLong(e->last_version);
    if (version == NULL) return -1;
    int rc = PyObject_SetAttrString(e->span, "last_version", version);
    Py_DECREF(version);
    if (rc < 0) return -1;
    PyObject *last = PyBytes_FromStringAndSize((const char *)e->last_hash, 32);
    if (last == NULL) return -1;
    rc = PyObject_SetAttrString(e->span, "last_hash", last);
    Py_DECREF(last);
    return rc;
}

/* The checks that need no Python object, for rows offset.. while they pass: positions
 * consecutive from `expected`, the stored hash, the suffix; and their leaf hashes. Runs
 * without the GIL. Returns how many rows passed. */
static Py_ssize_t check_rows(const PageObject *page, Py_ssize_t offset, Py_ssize_t limit,
                             int64_t expected, uint8_t *leaf_out) {
    Py_ssize_t k = 0;
    for (; k < limit; k++, expected++) {
        const row_t *r = &page->rows[offset + k];
        const uint8_t *digest = page->digests + 32 * (offset + k);
        if (r->position != expected || expected == INT64_MAX) break;
        if (memcmp(digest, r->hash, 32) != 0) break;
        if (!suffix_ok(r)) break;
        if (!type_ok(r)) break;
        leaf_hash(digest, leaf_out + 32 * k);
    }
    return k;
}

static PyObject *accept(PyObject *module, PyObject *args) {
    PageObject *page;
    Py_ssize_t offset, limit;
    long long expected;
    PyObject *streams, *span_type;
    if (!PyArg_ParseTuple(args, "O!nLnO!O", &PageType, &page, &offset, &expected, &limit,
                          &PyDict_Type, &streams, &span_type))
        return NULL;
    if (offset < 0 || offset > page->n) {
        PyErr_SetString(PyExc_IndexError, "offset out of range");
        return NULL;
    }
    if (limit > page->n - offset) limit = page->n - offset;
    if (limit < 0) limit = 0;
    if (hash_page(page) < 0) return NULL;

    PyObject *leaves = PyBytes_FromStringAndSize(NULL, limit * 32);
    if (leaves == NULL) return NULL;
    uint8_t *leaf_out = (uint8_t *)PyBytes_AS_STRING(leaves);
    Py_ssize_t checked;
    if (page->busy) {
        Py_DECREF(leaves);
        PyErr_SetString(PyExc_RuntimeError, "page is in use by another thread");
        return NULL;
    }
    page->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    checked = check_rows(page, offset, limit, (int64_t)expected, leaf_out);
    Py_END_ALLOW_THREADS
    page->busy = 0;

    /* Stream links, in order, against `streams` (mirrored in a table for this call). */
    size_t cap = 64;
    while (cap < 2 * (size_t)checked) cap *= 2;
    entry_t *table = (entry_t *)PyMem_Calloc(cap, sizeof(entry_t));
    if (table == NULL) {
        Py_DECREF(leaves);
        return PyErr_NoMemory();
    }
    Py_ssize_t k = 0;
    int failed = 0;
    for (; k < checked; k++) {
        const row_t *r = &page->rows[offset + k];
        const uint8_t *digest = page->digests + 32 * (offset + k);
        uint64_t h = key_hash(r->sid, r->sid_len);
        size_t slot = (size_t)h & (cap - 1);
        entry_t *e;
        for (;;) {
            e = &table[slot];
            if (e->key == NULL || (e->hash == h && e->len == r->sid_len &&
                                   memcmp(e->key, r->sid, (size_t)e->len) == 0))
                break;
            slot = (slot + 1) & (cap - 1);
        }
        if (e->key == NULL) {
            /* First sight of this stream in this call: consult `streams`. */
            PyObject *key = text(r->sid, r->sid_len);
            if (key == NULL) {
                failed = 1;
                break;
            }
            PyObject *span = PyDict_GetItemWithError(streams, key);
            if (span == NULL && PyErr_Occurred()) {
                Py_DECREF(key);
                failed = 1;
                break;
            }
            if (span == NULL) {
                /* A stream new to this chunk: it starts here (no link to check).
                 * _StreamSpan(first_position, first_version, first_prev, last_version,
                 *             last_hash) */
                span = PyObject_CallFunction(span_type, "LLy#Ly#", (long long)r->position,
                                             (long long)r->version, (const char *)r->prev,
                                             (Py_ssize_t)32, (long long)r->version,
                                             (const char *)digest, (Py_ssize_t)32);
                if (span == NULL || PyDict_SetItem(streams, key, span) < 0) {
                    Py_XDECREF(span);
                    Py_DECREF(key);
                    failed = 1;
                    break;
                }
                Py_DECREF(key);
                e->key = r->sid;
                e->len = r->sid_len;
                e->hash = h;
                e->span = span; /* the reference from the call */
                e->last_version = r->version;
                memcpy(e->last_hash, digest, 32);
                e->dirty = 0;
                continue;
            }
            Py_DECREF(key);
            Py_INCREF(span);
            e->key = r->sid;
            e->len = r->sid_len;
            e->hash = h;
            e->span = span;
            e->dirty = 0;
            int ok = load_span(e);
            if (ok < 0) {
                failed = 1;
                break;
            }
            if (!ok) { /* an unusual span: leave this record to the Python path */
                e->key = NULL;
                Py_CLEAR(e->span);
                break;
            }
        }
        if (e->last_version == INT64_MAX || r->version != e->last_version + 1 ||
            memcmp(r->prev, e->last_hash, 32) != 0)
            break;
        e->last_version = r->version;
        memcpy(e->last_hash, digest, 32);
        e->dirty = 1;
    }
    for (size_t i = 0; i < cap; i++) {
        entry_t *e = &table[i];
        if (e->span == NULL) continue;
        if (e->dirty && !failed && store_span(e) < 0) failed = 1;
        Py_DECREF(e->span);
    }
    PyMem_Free(table);
    if (failed) {
        Py_DECREF(leaves);
        return NULL;
    }
    if (k < limit && _PyBytes_Resize(&leaves, k * 32) < 0) return NULL;
    return Py_BuildValue("(nN)", k, leaves);
}

/* ========================================================================================
 * Merkle and test hooks
 * ====================================================================================== */

static PyObject *perfect_root(PyObject *module, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, count;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &start, &count)) return NULL;
    if (count < 1 || (count & (count - 1)) || start < 0 || (start + count) * 32 > buf.len) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "need a power-of-two run of 32-byte leaf hashes");
        return NULL;
    }
    uint8_t *level = (uint8_t *)PyMem_Malloc((size_t)count * 32);
    if (level == NULL) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    memcpy(level, (const uint8_t *)buf.buf + start * 32, (size_t)count * 32);
    PyBuffer_Release(&buf);
    Py_BEGIN_ALLOW_THREADS /* `level` is private to this call */
    for (Py_ssize_t n = count; n > 1; n /= 2)
        for (Py_ssize_t i = 0; i < n / 2; i++)
            node_hash(level + 64 * i, level + 64 * i + 32, level + 32 * i);
    Py_END_ALLOW_THREADS
    PyObject *out = PyBytes_FromStringAndSize((const char *)level, 32);
    PyMem_Free(level);
    return out;
}

static PyObject *py_sha256(PyObject *module, PyObject *arg) {
    Py_buffer buf;
    uint8_t out[32];
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    sha256((const uint8_t *)buf.buf, (size_t)buf.len, out);
    PyBuffer_Release(&buf);
    return PyBytes_FromStringAndSize((const char *)out, 32);
}

static PyObject *py_leaf_hash(PyObject *module, PyObject *arg) {
    Py_buffer buf;
    uint8_t out[32];
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    if (buf.len != 32) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "leaf data must be 32 bytes");
        return NULL;
    }
    leaf_hash((const uint8_t *)buf.buf, out);
    PyBuffer_Release(&buf);
    return PyBytes_FromStringAndSize((const char *)out, 32);
}

/* blake3_many([(a, b) or data, ...]) -> [digest, ...]: hashes a || b in SIMD lanes. */
static PyObject *blake3_many(PyObject *module, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "expected a sequence of messages");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    tb_b3_msg *msgs = (tb_b3_msg *)PyMem_Calloc(n ? (size_t)n : 1, sizeof(tb_b3_msg));
    uint8_t *out = (uint8_t *)PyMem_Malloc(n ? (size_t)n * 32 : 1);
    PyObject *result = NULL;
    if (msgs == NULL || out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = items[i], *b = NULL;
        if (PyTuple_Check(a)) {
            if (PyTuple_GET_SIZE(a) != 2) {
                PyErr_SetString(PyExc_ValueError, "a message is bytes or a pair of bytes");
                goto done;
            }
            b = PyTuple_GET_ITEM(a, 1);
            a = PyTuple_GET_ITEM(a, 0);
        }
        if (!PyBytes_Check(a) || (b != NULL && !PyBytes_Check(b))) {
            PyErr_SetString(PyExc_TypeError, "messages must be bytes");
            goto done;
        }
        msgs[i].a = (const uint8_t *)PyBytes_AS_STRING(a);
        msgs[i].alen = (size_t)PyBytes_GET_SIZE(a);
        msgs[i].b = b ? (const uint8_t *)PyBytes_AS_STRING(b) : NULL;
        msgs[i].blen = b ? (size_t)PyBytes_GET_SIZE(b) : 0;
        msgs[i].out = out + 32 * i;
    }
    if (tb_b3_hash_many(msgs, (size_t)n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyList_New(n);
    if (result == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyBytes_FromStringAndSize((const char *)out + 32 * i, 32);
        if (d == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, d);
    }
done:
    PyMem_Free(msgs);
    PyMem_Free(out);
    Py_DECREF(seq);
    return result;
}

/* blake3_one(a, b) -> BLAKE3(a || b), block after block (test hook for the append path). */
static PyObject *blake3_one(PyObject *module, PyObject *args) {
    Py_buffer a, b;
    if (!PyArg_ParseTuple(args, "y*y*", &a, &b)) return NULL;
    uint8_t out[32];
    tb_b3_msg msg = {(const uint8_t *)a.buf, (size_t)a.len, (const uint8_t *)b.buf, (size_t)b.len,
                     out};
    tb_b3_hash_one(&msg);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return PyBytes_FromStringAndSize((const char *)out, 32);
}

static PyObject *set_blake3_level(PyObject *module, PyObject *arg) {
    long want = PyLong_AsLong(arg);
    if (want == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(tb_b3_set_level((int)want));
}

static PyObject *blake3_levels(PyObject *module, PyObject *unused) {
    return Py_BuildValue("(ii)", tb_b3_level(), tb_b3_best_level());
}

static PyObject *set_sha_ni(PyObject *module, PyObject *arg) {
    int want = PyObject_IsTrue(arg);
    if (want < 0) return NULL;
#ifdef TB_X86_SHA
    sha_compress = want && sha_ni_available ? sha_compress_ni : sha_compress_portable;
    return PyBool_FromLong(sha_compress == sha_compress_ni);
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject *sha_levels(PyObject *module, PyObject *unused) {
#ifdef TB_X86_SHA
    return Py_BuildValue("(OO)", sha_compress == sha_compress_ni ? Py_True : Py_False,
                         sha_ni_available ? Py_True : Py_False);
#else
    return Py_BuildValue("(OO)", Py_False, Py_False);
#endif
}

static PyObject *S_stream_id, *S_stream_version, *S_position, *S_prev_hash, *S_hash, *S_dict,
    *S_fields_set, *S_extra, *S_private;

/* A new instance of the pydantic model class ``cls`` whose __dict__ is ``dict`` (taken as
 * is, not copied), made exactly as ``object.__new__(cls)`` and ``object.__setattr__`` make
 * it in Python: ``__pydantic_fields_set__`` a new set of ``fields``, ``__pydantic_extra__``
 * and ``__pydantic_private__`` None. A new reference, or NULL with an error set. */
static PyObject *new_instance(PyTypeObject *cls, PyObject *dict, PyObject *fields) {
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (obj == NULL) return NULL;
    if (PyObject_GenericSetAttr(obj, S_dict, dict) < 0) goto error;
    PyObject *set = PySet_New(fields);
    if (set == NULL) goto error;
    int bad = PyObject_GenericSetAttr(obj, S_fields_set, set);
    Py_DECREF(set);
    if (bad < 0 || PyObject_GenericSetAttr(obj, S_extra, Py_None) < 0 ||
        PyObject_GenericSetAttr(obj, S_private, Py_None) < 0)
        goto error;
    return obj;
error:
    Py_DECREF(obj);
    return NULL;
}

/* instance(cls, values, fields) -> cls instance
 *
 * ledger.py's _event_fast, after its checks: ``values`` (a dict, used as is) becomes the
 * instance's __dict__; see new_instance. */
static PyObject *instance(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "instance(cls, dict, fields)");
        return NULL;
    }
    return new_instance((PyTypeObject *)args[0], args[1], args[2]);
}

/* recorded(cls, items, rows, fields) -> [cls instances]
 *
 * store/_chaining.py's recorded_events for plain models, item by item: a copy of the
 * Prepared item's ``values`` with stream_id, stream_version, position, prev_hash and hash
 * set from its row, made an instance as new_instance does. */
static PyObject *recorded(PyObject *module, PyObject *args) {
    PyTypeObject *cls;
    PyObject *items, *rows, *fields;
    if (!PyArg_ParseTuple(args, "O!O!O!O", &PyType_Type, &cls, &PyList_Type, &items,
                          &PyList_Type, &rows, &fields))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (PyList_GET_SIZE(rows) != n) {
        PyErr_Format(PyExc_ValueError, "%zd rows for %zd events", PyList_GET_SIZE(rows), n);
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    PyObject *const keys[5] = {S_stream_id, S_stream_version, S_position, S_prev_hash, S_hash};
    static const int cols[5] = {1, 2, 0, 7, 8};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < 9) {
            PyErr_SetString(PyExc_TypeError, "a row is a tuple in the stores' column order");
            goto error;
        }
        PyObject *values = PyObject_GetAttr(PyList_GET_ITEM(items, i), S_values);
        if (values == NULL) goto error;
        if (!PyDict_Check(values)) {
            Py_DECREF(values);
            PyErr_SetString(PyExc_TypeError, "values must be a dict");
            goto error;
        }
        PyObject *copy = PyDict_Copy(values);
        Py_DECREF(values);
        if (copy == NULL) goto error;
        for (int k = 0; k < 5; k++) {
            if (PyDict_SetItem(copy, keys[k], PyTuple_GET_ITEM(row, cols[k])) < 0) {
                Py_DECREF(copy);
                goto error;
            }
        }
        PyObject *obj = new_instance(cls, copy, fields);
        Py_DECREF(copy);
        if (obj == NULL) goto error;
        PyList_SET_ITEM(out, i, obj);
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

static int intern_names(void) {
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&S_prefix, "prefix"},
        {&S_fields, "fields"},
        {&S_values, "values"},
        {&S_schema_version, "schema_version"},
        {&S_timestamp, "timestamp"},
        {&S_timestamp_text, "timestamp_text"},
        {&S_workflow_id, "workflow_id"},
        {&S_event_type, "event_type"},
        {&S_stream_id, "stream_id"},
        {&S_stream_version, "stream_version"},
        {&S_position, "position"},
        {&S_prev_hash, "prev_hash"},
        {&S_hash, "hash"},
        {&S_dict, "__dict__"},
        {&S_fields_set, "__pydantic_fields_set__"},
        {&S_extra, "__pydantic_extra__"},
        {&S_private, "__pydantic_private__"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].name);
        if (*names[i].slot == NULL) return -1;
    }
    return 0;
}

static PyMethodDef module_methods[] = {
    {"accept", accept, METH_VARARGS,
     "accept(page, offset, expected, limit, streams, span_type) -> (count, leaf_hashes)"},
    {"page_from_rows", page_from_rows, METH_O,
     "page_from_rows(rows) -> Page | None (None unless every row is plain)"},
    {"bind_sqlite", bind_sqlite, METH_O,
     "bind_sqlite(path of the loaded _sqlite3 module) -> bool: enable Reader and Writer"},
    {"perfect_root", perfect_root, METH_VARARGS,
     "perfect_root(leaf_hashes, start, count) -> the RFC 6962 root of a power-of-two run"},
    {"sha256", py_sha256, METH_O, "sha256(data) -> digest (test hook)"},
    {"leaf_hash", py_leaf_hash, METH_O, "leaf_hash(data32) -> SHA-256(0x00 || data)"},
    {"blake3_many", blake3_many, METH_O, "blake3_many(messages) -> digests (test hook)"},
    {"blake3_one", blake3_one, METH_VARARGS, "blake3_one(a, b) -> BLAKE3(a || b) (test hook)"},
    {"set_blake3_level", set_blake3_level, METH_O,
     "set_blake3_level(0 portable | 1 SSE4.1 | 2 AVX2 | 3 AVX-512VL) -> level in use (test hook)"},
    {"blake3_levels", blake3_levels, METH_NOARGS, "(level in use, best supported)"},
    {"set_sha_ni", set_sha_ni, METH_O, "set_sha_ni(bool) -> SHA-NI in use (test hook)"},
    {"sha_levels", sha_levels, METH_NOARGS, "(SHA-NI in use, SHA-NI supported)"},
    {"chain_request", chain_request, METH_VARARGS,
     "chain_request(items, stream_id, stream_id_json, position, version, prev) -> "
     "(rows, position, version, prev) | None: chain_rows' loop for one request"},
    {"instance", (PyCFunction)(void (*)(void))instance, METH_FASTCALL,
     "instance(cls, values, fields) -> a model instance with __dict__ values (ledger.py)"},
    {"recorded", recorded, METH_VARARGS,
     "recorded(cls, items, rows, fields) -> instances: recorded_events for plain models"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "tracebound._verifykernel",
    "The per-record verify loop in C: BLAKE3 in SIMD lanes, SHA-256, SQLite pages.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__verifykernel(void) {
    tb_b3_init();
#ifdef TB_X86_SHA
    __builtin_cpu_init();
    sha_ni_available = cpu_has_sha() && __builtin_cpu_supports("sse4.1");
    if (sha_ni_available) sha_compress = sha_compress_ni;
#endif
    if (PyType_Ready(&PageType) < 0 || PyType_Ready(&ReaderType) < 0 ||
        PyType_Ready(&WriterType) < 0)
        return NULL;
    if (intern_names() < 0) return NULL;
    PyObject *m = PyModule_Create(&kernel_module);
    if (m == NULL) return NULL;
    SQLiteError = PyErr_NewException("tracebound._verifykernel.SQLiteError", NULL, NULL);
    if (SQLiteError == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    ConstraintError =
        PyErr_NewException("tracebound._verifykernel.ConstraintError", SQLiteError, NULL);
    if (ConstraintError == NULL || PyModule_AddObjectRef(m, "SQLiteError", SQLiteError) < 0 ||
        PyModule_AddObjectRef(m, "ConstraintError", ConstraintError) < 0 ||
        PyModule_AddObjectRef(m, "Page", (PyObject *)&PageType) < 0 ||
        PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddObjectRef(m, "Writer", (PyObject *)&WriterType) < 0 ||
        PyModule_AddIntConstant(m, "ABI", KERNEL_ABI) < 0 ||
        PyModule_AddIntConstant(m, "PAGE_ROW_COLUMNS", 10) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
