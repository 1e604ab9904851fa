/*
 * tracebound._canonical: C accelerator for RFC 8785 (JSON Canonicalization Scheme) bytes.
 *
 * Why this exists: every hashed ledger record is canonicalised, and the pure-Python reference
 * (tracebound/_canonical_py.py) or the rfc8785 package are 10-40x too slow for the append path.
 * orjson is fast but cannot refuse floats and sorts keys by code point, not UTF-16 code unit.
 *
 * Scope: this module only *detects* unacceptable input. On any rejection it raises the private
 * exception `Rejected` with a short reason; tracebound.canonical then re-runs the Python
 * reference on the same value to produce the message with the JSON path. So the two
 * implementations must agree on *whether* a value is rejected; the tests fuzz that.
 *
 * Rules implemented (mirrors _canonical_py.py, which is the specification in code):
 *   - exact types only: dict (str keys), list, tuple, str, int, bool, None; subclasses are
 *     rejected because they can override the methods an encoder would call.
 *   - ints within +-(2**53 - 1); floats rejected unless a formatter callable is passed (full
 *     RFC 8785 mode), whose str result is written verbatim.
 *   - strings: only '"', '\\' and U+0000..U+001F escaped (\b \t \n \f \r, else \u00xx, lowercase);
 *     everything else raw UTF-8; any surrogate code point is rejected.
 *   - object members sorted by UTF-16 code units.
 *   - nesting deeper than MAX_DEPTH arrays/objects is rejected (this also catches cycles).
 *
 * Memory safety notes: keys and values taken from a dict, and items taken from a list, are held
 * by a new reference while they are encoded, because the float formatter runs Python code, which
 * could (via a finaliser) mutate a container being walked. Lists are re-measured every step.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 256
#define MAX_SAFE_INTEGER 9007199254740991LL
#define INLINE_BUFFER 4096
#define INLINE_MEMBERS 64
#define INSERTION_SORT_MAX 24

static PyObject *Rejected; /* tracebound._canonical.Rejected, a ValueError subclass */

typedef struct {
    PyObject *key;
    PyObject *value;
    /* For 1-byte-kind keys (Latin-1, so code point order == UTF-16 order): the first eight
     * characters, big-endian, zero-padded. Unequal prefixes decide a comparison at once. */
    uint64_t prefix;
    int latin1;
} Member;

typedef struct {
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    int buf_on_heap;
    /* A stack of dict members shared by all nesting levels: each object pushes its members,
     * sorts that slice, encodes it, and pops it. Accessed by index, since it may be moved. */
    Member *members;
    Py_ssize_t n_members;
    Py_ssize_t members_cap;
    int members_on_heap;
    PyObject *float_formatter; /* NULL: hash-safe mode, floats are rejected */
} Writer;

static int
reject(const char *reason)
{
    PyErr_SetString(Rejected, reason);
    return -1;
}

static int
grow(Writer *w, Py_ssize_t need)
{
    Py_ssize_t cap = w->cap * 2;
    char *buf;
    if (cap < w->len + need) {
        cap = w->len + need;
    }
    if (w->buf_on_heap) {
        buf = PyMem_Realloc(w->buf, (size_t)cap);
    }
    else {
        buf = PyMem_Malloc((size_t)cap);
        if (buf != NULL) {
            memcpy(buf, w->buf, (size_t)w->len);
        }
    }
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->buf = buf;
    w->cap = cap;
    w->buf_on_heap = 1;
    return 0;
}

static inline int
reserve(Writer *w, Py_ssize_t need)
{
    if (w->cap - w->len >= need) {
        return 0;
    }
    return grow(w, need);
}

/* memcpy for the short runs that dominate JSON (keys, small values): fixed-size copies that
 * overlap instead of a library call. Never reads or writes outside [src, src+n) / [dst, dst+n). */
static inline void
copy_bytes(char *dst, const char *src, Py_ssize_t n)
{
    if (n >= 8 && n <= 16) {
        uint64_t head, tail;
        memcpy(&head, src, 8);
        memcpy(&tail, src + n - 8, 8);
        memcpy(dst, &head, 8);
        memcpy(dst + n - 8, &tail, 8);
    }
    else if (n >= 4 && n < 8) {
        uint32_t head, tail;
        memcpy(&head, src, 4);
        memcpy(&tail, src + n - 4, 4);
        memcpy(dst, &head, 4);
        memcpy(dst + n - 4, &tail, 4);
    }
    else if (n > 16) {
        memcpy(dst, src, (size_t)n);
    }
    else {
        Py_ssize_t i;
        for (i = 0; i < n; i++) {
            dst[i] = src[i];
        }
    }
}

static inline int
write_bytes(Writer *w, const char *data, Py_ssize_t n)
{
    if (reserve(w, n) < 0) {
        return -1;
    }
    copy_bytes(w->buf + w->len, data, n);
    w->len += n;
    return 0;
}

static inline int
write_char(Writer *w, char c)
{
    if (reserve(w, 1) < 0) {
        return -1;
    }
    w->buf[w->len++] = c;
    return 0;
}

/* Escape for c in U+0000..U+001F, '"' or '\\'; `out` needs 6 bytes. Returns bytes written. */
static inline Py_ssize_t
escape_into(char *out, unsigned int c)
{
    static const char hex[] = "0123456789abcdef";
    out[0] = '\\';
    switch (c) {
        case '"': out[1] = '"'; return 2;
        case '\\': out[1] = '\\'; return 2;
        case 0x08: out[1] = 'b'; return 2;
        case 0x09: out[1] = 't'; return 2;
        case 0x0A: out[1] = 'n'; return 2;
        case 0x0C: out[1] = 'f'; return 2;
        case 0x0D: out[1] = 'r'; return 2;
        default:
            out[1] = 'u';
            out[2] = '0';
            out[3] = '0';
            out[4] = hex[(c >> 4) & 0xF];
            out[5] = hex[c & 0xF];
            return 6;
    }
}

static inline int
needs_escape(unsigned int c)
{
    return c < 0x20 || c == '"' || c == '\\';
}

/* Nonzero if any of the eight ASCII bytes in x must be escaped. Uses the "word has a byte
 * below k" bit trick, which is exact (no false positives) when every byte is < 0x80. */
static inline uint64_t
word_needs_escape(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101ULL;
    const uint64_t highs = 0x8080808080808080ULL;
    uint64_t control = (x - ones * 0x20) & ~x & highs;
    uint64_t quote = x ^ (ones * (uint64_t)'"');
    uint64_t backslash = x ^ (ones * (uint64_t)'\\');
    quote = (quote - ones) & ~quote & highs;
    backslash = (backslash - ones) & ~backslash & highs;
    return control | quote | backslash;
}

/* Write an ASCII string's body. The common case (nothing to escape) checks and copies eight
 * bytes at a time: the last, partial word is handled by re-reading the final eight bytes
 * (overlapping), and a string shorter than eight is padded with spaces (never escaped) into one
 * word. Up to eight bytes past the body may be scribbled in reserved space; only the body is
 * counted. The first byte that needs escaping switches to a bytewise loop. */
static int
write_ascii_body(Writer *w, const char *p, Py_ssize_t n)
{
    Py_ssize_t i, start;
    char *o;
    uint64_t x;
    if (reserve(w, n + 8 + 2) < 0) { /* + scribble room + closing quote and a separator */
        return -1;
    }
    o = w->buf + w->len;
    if (n >= 8) {
        for (i = 0; i + 8 <= n; i += 8) {
            memcpy(&x, p + i, 8);
            if (word_needs_escape(x)) {
                goto escapes;
            }
            memcpy(o + i, &x, 8);
        }
        if (i < n) {
            memcpy(&x, p + n - 8, 8);
            if (word_needs_escape(x)) {
                goto escapes;
            }
            memcpy(o + n - 8, &x, 8);
        }
    }
    else {
        x = 0x2020202020202020ULL;
        copy_bytes((char *)&x, p, n);
        if (word_needs_escape(x)) {
            goto escapes;
        }
        memcpy(o, &x, 8);
    }
    w->len += n;
    return 0;

escapes:
    /* Runs between escapes are copied in bulk. Nothing has been counted yet. */
    start = 0;
    for (i = 0; i < n; i++) {
        unsigned int c = (unsigned char)p[i];
        if (needs_escape(c)) {
            if (write_bytes(w, p + start, i - start) < 0 || reserve(w, 6 + 1) < 0) {
                return -1;
            }
            w->len += escape_into(w->buf + w->len, c);
            start = i + 1;
        }
    }
    return write_bytes(w, p + start, n - start);
}

/* Encode one code point (not a surrogate) at o; returns the new end. o needs 6 bytes. */
static inline char *
put_code_point(char *o, Py_UCS4 c)
{
    if (c < 0x80) {
        if (needs_escape(c)) {
            return o + escape_into(o, c);
        }
        *o = (char)c;
        return o + 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return o + 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return o + 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return o + 4;
}

#define CHUNK 512 /* characters encoded per buffer reservation (at most 6 bytes each) */

/* Write the body of a non-ASCII string as UTF-8, rejecting surrogate code points. Works in
 * chunks so the inner loops keep the output position in a register instead of the Writer. */
static int
write_unicode_body(Writer *w, PyObject *s, Py_ssize_t n)
{
    const uint64_t highs = 0x8080808080808080ULL;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_ssize_t i = 0;

    while (i < n) {
        Py_ssize_t end = n - i > CHUNK ? i + CHUNK : n;
        char *start, *o;
        if (reserve(w, (end - i) * 6) < 0) {
            return -1;
        }
        start = o = w->buf + w->len;
        if (kind == PyUnicode_1BYTE_KIND) {
            /* Latin-1: runs of plain ASCII are copied eight bytes at a time. */
            const unsigned char *p = (const unsigned char *)data;
            while (i < end) {
                Py_ssize_t stop;
                if (end - i >= 8) {
                    uint64_t x;
                    memcpy(&x, p + i, 8);
                    if (((x & highs) | word_needs_escape(x)) == 0) {
                        memcpy(o, &x, 8);
                        o += 8;
                        i += 8;
                        continue;
                    }
                }
                stop = end - i >= 8 ? i + 8 : end;
                for (; i < stop; i++) {
                    o = put_code_point(o, p[i]);
                }
            }
        }
        else {
            for (; i < end; i++) {
                Py_UCS4 c = PyUnicode_READ(kind, data, i);
                if (c >= 0xD800 && c <= 0xDFFF) {
                    w->len += o - start;
                    return reject("string contains a lone surrogate");
                }
                o = put_code_point(o, c);
            }
        }
        w->len += o - start;
    }
    return 0;
}

static int
write_string(Writer *w, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int rc;
    if (write_char(w, '"') < 0) {
        return -1;
    }
    if (PyUnicode_IS_ASCII(s)) {
        rc = write_ascii_body(w, (const char *)PyUnicode_DATA(s), n);
    }
    else {
        rc = write_unicode_body(w, s, n);
    }
    if (rc < 0) {
        return -1;
    }
    return write_char(w, '"');
}

static int
write_int(Writer *w, PyObject *obj)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    unsigned long long u, t;
    Py_ssize_t digits = 1;
    char *o;

    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow != 0 || v > MAX_SAFE_INTEGER || v < -MAX_SAFE_INTEGER) {
        return reject("integer outside +-(2**53-1)");
    }
    u = v < 0 ? (unsigned long long)(-v) : (unsigned long long)v;
    for (t = u; t >= 10; t /= 10) {
        digits++;
    }
    if (reserve(w, digits + 1) < 0) {
        return -1;
    }
    /* Digits go straight into the output, last first (no scratch buffer to copy from). */
    o = w->buf + w->len;
    if (v < 0) {
        *o++ = '-';
    }
    w->len = (o - w->buf) + digits;
    o += digits;
    do {
        *--o = (char)('0' + (u % 10));
        u /= 10;
    } while (u != 0);
    return 0;
}

static int
write_float(Writer *w, PyObject *obj)
{
    PyObject *text;
    const char *utf8;
    Py_ssize_t n;
    int rc;

    if (w->float_formatter == NULL) {
        return reject("float not allowed in hashed data");
    }
    text = PyObject_CallOneArg(w->float_formatter, obj);
    if (text == NULL) {
        return -1;
    }
    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text)) {
        Py_DECREF(text);
        PyErr_SetString(PyExc_TypeError, "float formatter must return an ASCII str");
        return -1;
    }
    utf8 = (const char *)PyUnicode_DATA(text);
    n = PyUnicode_GET_LENGTH(text);
    rc = write_bytes(w, utf8, n);
    Py_DECREF(text);
    return rc;
}

/* Code point -> rank such that comparing ranks equals comparing UTF-16 code units, for code
 * points that are not surrogates (those are rejected anyway). A non-BMP character starts with a
 * high surrogate (0xD800..0xDBFF), so it sorts after U+0000..U+D7FF but before U+E000..U+FFFF. */
static inline Py_UCS4
utf16_rank(Py_UCS4 c)
{
    return (c >= 0xE000 && c <= 0xFFFF) ? c + 0x110000 : c;
}

static int
compare_keys(PyObject *a, PyObject *b)
{
    Py_ssize_t na = PyUnicode_GET_LENGTH(a);
    Py_ssize_t nb = PyUnicode_GET_LENGTH(b);
    Py_ssize_t n = na < nb ? na : nb;
    int ka = PyUnicode_KIND(a);
    int kb = PyUnicode_KIND(b);
    const void *da = PyUnicode_DATA(a);
    const void *db = PyUnicode_DATA(b);
    Py_ssize_t i;

    if (ka == PyUnicode_1BYTE_KIND && kb == PyUnicode_1BYTE_KIND) {
        int r = memcmp(da, db, (size_t)n);
        if (r != 0) {
            return r;
        }
    }
    else {
        for (i = 0; i < n; i++) {
            Py_UCS4 ca = utf16_rank(PyUnicode_READ(ka, da, i));
            Py_UCS4 cb = utf16_rank(PyUnicode_READ(kb, db, i));
            if (ca != cb) {
                return ca < cb ? -1 : 1;
            }
        }
    }
    return (na > nb) - (na < nb);
}

static inline int
compare_members(const Member *a, const Member *b)
{
    if (a->latin1 && b->latin1) {
        Py_ssize_t na, nb, n;
        int r;
        if (a->prefix != b->prefix) {
            return a->prefix < b->prefix ? -1 : 1;
        }
        na = PyUnicode_GET_LENGTH(a->key);
        nb = PyUnicode_GET_LENGTH(b->key);
        n = na < nb ? na : nb;
        if (n > 8) { /* the first eight characters are equal */
            r = memcmp((const char *)PyUnicode_DATA(a->key) + 8,
                       (const char *)PyUnicode_DATA(b->key) + 8, (size_t)(n - 8));
            if (r != 0) {
                return r;
            }
        }
        return (na > nb) - (na < nb);
    }
    return compare_keys(a->key, b->key);
}

static int
compare_members_qsort(const void *a, const void *b)
{
    return compare_members((const Member *)a, (const Member *)b);
}

static inline void
set_sort_prefix(Member *m)
{
    PyObject *key = m->key;
    m->latin1 = PyUnicode_KIND(key) == PyUnicode_1BYTE_KIND;
    m->prefix = 0;
    if (m->latin1) {
        const unsigned char *p = (const unsigned char *)PyUnicode_DATA(key);
        Py_ssize_t n = PyUnicode_GET_LENGTH(key);
        Py_ssize_t i;
        uint64_t prefix = 0;
        Py_ssize_t stop = n < 8 ? n : 8;
        for (i = 0; i < stop; i++) {
            prefix = (prefix << 8) | p[i];
        }
        if (stop > 0 && stop < 8) { /* (shifting by 64 would be undefined) */
            prefix <<= 8 * (8 - stop);
        }
        m->prefix = prefix;
    }
}

static void
sort_members(Member *m, Py_ssize_t n)
{
    Py_ssize_t i, j;
    if (n > INSERTION_SORT_MAX) {
        qsort(m, (size_t)n, sizeof(Member), compare_members_qsort);
        return;
    }
    for (i = 1; i < n; i++) {
        Member cur = m[i];
        for (j = i; j > 0 && compare_members(&m[j - 1], &cur) > 0; j--) {
            m[j] = m[j - 1];
        }
        m[j] = cur;
    }
}

static int
reserve_members(Writer *w, Py_ssize_t need)
{
    Py_ssize_t cap;
    Member *members;
    if (w->members_cap - w->n_members >= need) {
        return 0;
    }
    cap = w->members_cap * 2;
    if (cap < w->n_members + need) {
        cap = w->n_members + need;
    }
    if (w->members_on_heap) {
        members = PyMem_Realloc(w->members, (size_t)cap * sizeof(Member));
    }
    else {
        members = PyMem_Malloc((size_t)cap * sizeof(Member));
        if (members != NULL) {
            memcpy(members, w->members, (size_t)w->n_members * sizeof(Member));
        }
    }
    if (members == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->members = members;
    w->members_cap = cap;
    w->members_on_heap = 1;
    return 0;
}

static void
pop_members(Writer *w, Py_ssize_t base)
{
    while (w->n_members > base) {
        Member *m = &w->members[--w->n_members];
        Py_DECREF(m->key);
        Py_DECREF(m->value);
    }
}

static int encode(Writer *w, PyObject *obj, int depth);

static int
write_dict(Writer *w, PyObject *dict, int depth)
{
    Py_ssize_t n = PyDict_GET_SIZE(dict);
    Py_ssize_t base = w->n_members;
    Py_ssize_t pos = 0, i;
    PyObject *key, *value;

    if (depth > MAX_DEPTH) {
        return reject("nesting too deep");
    }
    if (n == 0) {
        return write_bytes(w, "{}", 2);
    }
    if (reserve_members(w, n) < 0) {
        return -1;
    }
    /* No Python code runs in this loop, so the dict cannot change under PyDict_Next. */
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) {
            pop_members(w, base);
            return reject("object key is not a str");
        }
        Py_INCREF(key);
        Py_INCREF(value);
        w->members[w->n_members].key = key;
        w->members[w->n_members].value = value;
        set_sort_prefix(&w->members[w->n_members]);
        w->n_members++;
    }
    n = w->n_members - base;
    sort_members(w->members + base, n);

    if (write_char(w, '{') < 0) {
        goto fail;
    }
    for (i = 0; i < n; i++) {
        if (i > 0 && write_char(w, ',') < 0) {
            goto fail;
        }
        /* Index, not pointer: nested objects may move the member stack. */
        if (write_string(w, w->members[base + i].key) < 0 || write_char(w, ':') < 0 ||
            encode(w, w->members[base + i].value, depth) < 0) {
            goto fail;
        }
    }
    pop_members(w, base);
    return write_char(w, '}');

fail:
    pop_members(w, base);
    return -1;
}

static int
write_list(Writer *w, PyObject *list, int depth)
{
    Py_ssize_t i;
    if (depth > MAX_DEPTH) {
        return reject("nesting too deep");
    }
    if (write_char(w, '[') < 0) {
        return -1;
    }
    for (i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        int rc;
        if (i > 0 && write_char(w, ',') < 0) {
            return -1;
        }
        Py_INCREF(item);
        rc = encode(w, item, depth);
        Py_DECREF(item);
        if (rc < 0) {
            return -1;
        }
    }
    return write_char(w, ']');
}

static int
write_tuple(Writer *w, PyObject *tuple, int depth)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(tuple);
    if (depth > MAX_DEPTH) {
        return reject("nesting too deep");
    }
    if (write_char(w, '[') < 0) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (i > 0 && write_char(w, ',') < 0) {
            return -1;
        }
        /* A tuple cannot change, and the tuple itself is kept alive by its holder. */
        if (encode(w, PyTuple_GET_ITEM(tuple, i), depth) < 0) {
            return -1;
        }
    }
    return write_char(w, ']');
}

static int
encode(Writer *w, PyObject *obj, int depth)
{
    PyTypeObject *type = Py_TYPE(obj);
    /* Exact type checks, most frequent first. bool is its own type, so it never hits int. */
    if (type == &PyUnicode_Type) {
        return write_string(w, obj);
    }
    if (type == &PyLong_Type) {
        return write_int(w, obj);
    }
    if (type == &PyDict_Type) {
        return write_dict(w, obj, depth + 1);
    }
    if (type == &PyList_Type) {
        return write_list(w, obj, depth + 1);
    }
    if (obj == Py_None) {
        return write_bytes(w, "null", 4);
    }
    if (obj == Py_True) {
        return write_bytes(w, "true", 4);
    }
    if (obj == Py_False) {
        return write_bytes(w, "false", 5);
    }
    if (type == &PyTuple_Type) {
        return write_tuple(w, obj, depth + 1);
    }
    if (type == &PyFloat_Type) {
        return write_float(w, obj);
    }
    return reject("unsupported type");
}

PyDoc_STRVAR(encode_doc,
"encode(value, float_formatter=None, /) -> bytes\n\n"
"RFC 8785 bytes of value. With float_formatter None, floats are rejected (hash-safe mode);\n"
"otherwise float_formatter(x) must return the ECMAScript form of x as an ASCII str.\n"
"Raises Rejected (without a JSON path) for any value the encoder refuses.");

static PyObject *
py_encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    char inline_buffer[INLINE_BUFFER];
    Member inline_members[INLINE_MEMBERS];
    Writer w;
    PyObject *result = NULL;
    (void)module;

    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "encode() takes 1 or 2 positional arguments");
        return NULL;
    }
    w.buf = inline_buffer;
    w.len = 0;
    w.cap = INLINE_BUFFER;
    w.buf_on_heap = 0;
    w.members = inline_members;
    w.n_members = 0;
    w.members_cap = INLINE_MEMBERS;
    w.members_on_heap = 0;
    w.float_formatter = (nargs == 2 && args[1] != Py_None) ? args[1] : NULL;

    if (encode(&w, args[0], 0) == 0) {
        result = PyBytes_FromStringAndSize(w.buf, w.len);
    }
    if (w.buf_on_heap) {
        PyMem_Free(w.buf);
    }
    if (w.members_on_heap) {
        PyMem_Free(w.members);
    }
    return result;
}

PyDoc_STRVAR(record_prefix_doc,
"record_prefix(correlation_id, event_id_int, event_type, payload, /) -> bytes\n\n"
"The canonical record up to and including the payload (no closing brace):\n"
"{\"correlation_id\":C,\"event_id\":\"U\",\"event_type\":T,\"payload\":P where C, T and P are\n"
"the hash-safe RFC 8785 bytes of correlation_id, event_type and payload, and U is the UUID\n"
"text (8-4-4-4-12 lowercase hex) of the 128-bit int event_id_int.\n"
"Raises Rejected for anything encode() refuses, or an id that is not an int in [0, 2**128).");

static const char HEX_DIGITS[] = "0123456789abcdef";

static int
write_uuid(Writer *w, PyObject *id)
{
    unsigned char raw[16];
    char *o;
    int i;
    if (Py_TYPE(id) != &PyLong_Type || _PyLong_Sign(id) < 0) {
        return reject("event id is not a non-negative int");
    }
#if PY_VERSION_HEX >= 0x030D0000
    if (_PyLong_AsByteArray((PyLongObject *)id, raw, 16, 0, 0, 1) < 0) {
#else
    if (_PyLong_AsByteArray((PyLongObject *)id, raw, 16, 0, 0) < 0) {
#endif
        PyErr_Clear();
        return reject("event id does not fit in 128 bits");
    }
    if (reserve(w, 38) < 0) {
        return -1;
    }
    o = w->buf + w->len;
    *o++ = '"';
    for (i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            *o++ = '-';
        }
        *o++ = HEX_DIGITS[raw[i] >> 4];
        *o++ = HEX_DIGITS[raw[i] & 15];
    }
    *o++ = '"';
    w->len += 38;
    return 0;
}

static PyObject *
py_record_prefix(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    char inline_buffer[INLINE_BUFFER];
    Member inline_members[INLINE_MEMBERS];
    Writer w;
    PyObject *result = NULL;
    (void)module;

    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "record_prefix() takes 4 positional arguments");
        return NULL;
    }
    w.buf = inline_buffer;
    w.len = 0;
    w.cap = INLINE_BUFFER;
    w.buf_on_heap = 0;
    w.members = inline_members;
    w.n_members = 0;
    w.members_cap = INLINE_MEMBERS;
    w.members_on_heap = 0;
    w.float_formatter = NULL;

    /* Each part is encoded as a top-level value (depth 0), as canonical_bytes would. */
    if (write_bytes(&w, "{\"correlation_id\":", 18) == 0 && encode(&w, args[0], 0) == 0 &&
        write_bytes(&w, ",\"event_id\":", 12) == 0 && write_uuid(&w, args[1]) == 0 &&
        write_bytes(&w, ",\"event_type\":", 14) == 0 && encode(&w, args[2], 0) == 0 &&
        write_bytes(&w, ",\"payload\":", 11) == 0 && encode(&w, args[3], 0) == 0) {
        result = PyBytes_FromStringAndSize(w.buf, w.len);
    }
    if (w.buf_on_heap) {
        PyMem_Free(w.buf);
    }
    if (w.members_on_heap) {
        PyMem_Free(w.members);
    }
    return result;
}

PyDoc_STRVAR(utc_timestamp_doc,
"utc_timestamp(value, /) -> str | None\n\n"
"YYYY-MM-DDTHH:MM:SS.ffffffZ (year zero-padded to four digits) for an exact datetime whose\n"
"tzinfo is datetime.UTC itself; None for anything else (the caller formats those).");

static void
put_digits(char *o, int value, int width)
{
    while (width-- > 0) {
        o[width] = (char)('0' + value % 10);
        value /= 10;
    }
}

static PyObject *
py_utc_timestamp(PyObject *module, PyObject *value)
{
    char text[27];
    (void)module;
    /* The tzinfo macro gives Py_None, never NULL, for a naive datetime: one comparison. */
    if (!PyDateTime_CheckExact(value) ||
        PyDateTime_DATE_GET_TZINFO(value) != PyDateTime_TimeZone_UTC) {
        Py_RETURN_NONE;
    }
    put_digits(text, PyDateTime_GET_YEAR(value), 4);
    text[4] = '-';
    put_digits(text + 5, PyDateTime_GET_MONTH(value), 2);
    text[7] = '-';
    put_digits(text + 8, PyDateTime_GET_DAY(value), 2);
    text[10] = 'T';
    put_digits(text + 11, PyDateTime_DATE_GET_HOUR(value), 2);
    text[13] = ':';
    put_digits(text + 14, PyDateTime_DATE_GET_MINUTE(value), 2);
    text[16] = ':';
    put_digits(text + 17, PyDateTime_DATE_GET_SECOND(value), 2);
    text[19] = '.';
    put_digits(text + 20, PyDateTime_DATE_GET_MICROSECOND(value), 6);
    text[26] = 'Z';
    return PyUnicode_FromStringAndSize(text, 27);
}

PyDoc_STRVAR(plain_values_doc,
"plain_values(values, plan, /) -> dict | None\n\n"
"A payload's JSON-mode dict from its __dict__ ``values`` and its class's plan, a tuple of\n"
"(name, passed_types, serializer_or_None): a value whose exact type is in passed_types is\n"
"kept as it is; any other non-None value goes through the serializer, whose result must be\n"
"an exact str. None (no error) whenever the plan does not apply: a missing field, a value\n"
"of another type without a serializer, a serializer that raises or returns anything else.\n"
"events/payload_json.py holds the same loop in Python, and the rules.");

static PyObject *
py_plain_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *values, *plan, *out;
    Py_ssize_t i, n;
    (void)module;
    if (nargs != 2 || !PyDict_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "plain_values(dict, tuple)");
        return NULL;
    }
    values = args[0];
    plan = args[1];
    n = PyTuple_GET_SIZE(plan);
    out = PyDict_New();
    if (out == NULL) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        PyObject *entry = PyTuple_GET_ITEM(plan, i), *name, *passed, *serializer, *value;
        Py_ssize_t k, m;
        int kept = 0, bad;
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 3 ||
            !PyTuple_CheckExact(PyTuple_GET_ITEM(entry, 1))) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "a plan entry is (name, types, serializer)");
            return NULL;
        }
        name = PyTuple_GET_ITEM(entry, 0);
        passed = PyTuple_GET_ITEM(entry, 1);
        serializer = PyTuple_GET_ITEM(entry, 2);
        value = PyDict_GetItemWithError(values, name);
        if (value == NULL) {
            Py_DECREF(out);
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        m = PyTuple_GET_SIZE(passed);
        for (k = 0; k < m; k++) {
            if ((PyObject *)Py_TYPE(value) == PyTuple_GET_ITEM(passed, k)) {
                kept = 1;
                break;
            }
        }
        if (kept) {
            bad = PyDict_SetItem(out, name, value);
        }
        else if (serializer == Py_None || value == Py_None) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        else {
            /* The serializer is Python code: hold the value and the name while it runs. */
            PyObject *text;
            Py_INCREF(value);
            Py_INCREF(name);
            text = PyObject_CallOneArg(serializer, value);
            Py_DECREF(value);
            if (text == NULL || !PyUnicode_CheckExact(text)) {
                PyErr_Clear();
                Py_XDECREF(text);
                Py_DECREF(name);
                Py_DECREF(out);
                Py_RETURN_NONE;
            }
            bad = PyDict_SetItem(out, name, text);
            Py_DECREF(text);
            Py_DECREF(name);
        }
        if (bad < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyMethodDef methods[] = {
    {"encode", (PyCFunction)(void (*)(void))py_encode, METH_FASTCALL, encode_doc},
    {"record_prefix", (PyCFunction)(void (*)(void))py_record_prefix, METH_FASTCALL,
     record_prefix_doc},
    {"utc_timestamp", py_utc_timestamp, METH_O, utc_timestamp_doc},
    {"plain_values", (PyCFunction)(void (*)(void))py_plain_values, METH_FASTCALL,
     plain_values_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "tracebound._canonical",
    "C accelerator for tracebound.canonical (RFC 8785). Private: use tracebound.canonical.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__canonical(void)
{
    PyObject *m;
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        return NULL;
    }
    m = PyModule_Create(&module_def);
    if (m == NULL) {
        return NULL;
    }
    Rejected = PyErr_NewExceptionWithDoc(
        "tracebound._canonical.Rejected",
        "The value cannot be canonicalised; tracebound.canonical explains where and why.",
        PyExc_ValueError, NULL);
    if (Rejected == NULL || PyModule_AddObjectRef(m, "Rejected", Rejected) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0) {
        Py_XDECREF(Rejected);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
