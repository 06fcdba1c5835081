/* MySQL's binary JSON printed as the server prints it, in C.
 *
 * The reference is json_binary.py (its docstring has MySQL's rules: ", " and ": ", keys in
 * stored order, doubles as my_gcvt prints them, DECIMAL with its scale, dates and times
 * quoted, opaque values in base64); this file gives the same text for the same bytes
 * (tests/mysql/binlog/test_fastjson.py holds them equal on generated documents):
 *
 * - fj_text: a stored value straight to text, written as UTF-8 bytes and decoded once at
 *   the end with "surrogateescape" (what json_binary does string by string: escaping
 *   touches ASCII bytes only, so the two agree);
 * - json_tree: the tree json_binary.parse builds (dict, list, a scalar's text as str), for
 *   partial updates (json_diff applies the diffs to it in Python);
 * - json_render: json_binary.render of such a tree.
 *
 * An object whose keys are not in MySQL's order (shorter first, then bytewise; every value
 * MySQL writes is) is printed through the tree, so a malformed value with a key twice comes
 * out as json_binary's dict makes it. Every read is bounds-checked: ValueError names a
 * malformed value.
 */
#include "_fastdecode.h"

#include <math.h>
#include <string.h>

enum {
    SMALL_OBJECT = 0, LARGE_OBJECT = 1, SMALL_ARRAY = 2, LARGE_ARRAY = 3, LITERAL = 4,
    INT16 = 5, UINT16 = 6, INT32 = 7, UINT32 = 8, INT64 = 9, UINT64 = 10, DOUBLE = 11,
    STRING = 12, OPAQUE = 15,
};
/* field types an opaque value names (enum_field_types) */
enum { F_DECIMAL = 0, F_TIMESTAMP = 7, F_DATE = 10, F_TIME = 11, F_DATETIME = 12,
       F_NEWDECIMAL = 246, F_VAR_STRING = 253 };

#define MAX_DEPTH 1000 /* MySQL allows 100 */
#define UNSORTED (-2)  /* an object's keys out of MySQL's order: print through the tree */

static PyObject *s_null, *s_open_obj, *s_close_obj, *s_open_arr, *s_close_arr, *s_comma,
    *s_colon, *s_empty;

/* -- an output buffer --------------------------------------------------------------------- */

typedef struct {
    char *b;
    Py_ssize_t n, cap;
    char small[512];
} Buf;

static void buf_init(Buf *o) {
    o->b = o->small;
    o->n = 0;
    o->cap = sizeof(o->small);
}

static void buf_free(Buf *o) {
    if (o->b != o->small) PyMem_Free(o->b);
}

static int grow(Buf *o, Py_ssize_t more) {
    if (o->cap - o->n >= more) return 0;
    Py_ssize_t cap = o->cap;
    while (cap - o->n < more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *b;
    if (o->b == o->small) {
        b = PyMem_Malloc(cap);
        if (b != NULL) memcpy(b, o->small, o->n);
    } else
        b = PyMem_Realloc(o->b, cap);
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->b = b;
    o->cap = cap;
    return 0;
}

static inline int put(Buf *o, const char *s, Py_ssize_t n) {
    if (grow(o, n) < 0) return -1;
    memcpy(o->b + o->n, s, n);
    o->n += n;
    return 0;
}

static inline int put1(Buf *o, char c) {
    if (o->n == o->cap && grow(o, 1) < 0) return -1;
    o->b[o->n++] = c;
    return 0;
}

static int put_u64(Buf *o, uint64_t v) {
    char t[24];
    int i = 24;
    do {
        t[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return put(o, t + i, 24 - i);
}

static int put_i64(Buf *o, int64_t v) {
    if (v < 0) {
        if (put1(o, '-') < 0) return -1;
        return put_u64(o, (uint64_t)0 - (uint64_t)v);
    }
    return put_u64(o, (uint64_t)v);
}

static PyObject *buf_str(Buf *o) {
    return PyUnicode_DecodeUTF8(o->b, o->n, "surrogateescape");
}

static int bad(const char *why) {
    PyErr_Format(PyExc_ValueError, "malformed binary JSON value (%s)", why);
    return -1;
}

/* -- strings ------------------------------------------------------------------------------ */

static const char HEX[] = "0123456789abcdef";

/* A JSON string as MySQL's double_quote (and Python's json.dumps) writes it: '"' and '\'
 * escaped, the control characters as \b \t \n \f \r or \u00xx, every other byte as it is. */
static int quote(Buf *o, const unsigned char *s, Py_ssize_t n) {
    if (grow(o, n + 2) < 0) return -1;
    o->b[o->n++] = '"';
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (put(o, (const char *)s + run, i - run) < 0) return -1;
        run = i + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        int k = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = HEX[c >> 4];
            esc[5] = HEX[c & 15];
            k = 6;
        }
        if (put(o, esc, k) < 0) return -1;
    }
    if (put(o, (const char *)s + run, n - run) < 0) return -1;
    return put1(o, '"');
}

/* -- scalars ------------------------------------------------------------------------------ */

/* A double as MySQL prints it in JSON (json_binary.double_text): my_gcvt at its widest field
 * over the shortest digits that read back (Python's repr), 'f' notation for decimal points
 * -14..15, else 1.5e-16 / 1e15, then ".0" when neither '.' nor 'e' is in it. */
static int put_double(Buf *o, double x) {
    if (!isfinite(x)) {
        PyErr_SetString(PyExc_ValueError, "malformed binary JSON value (a double that is "
                                          "not a number)");
        return -1;
    }
    char digits[40];
    int n, decpt;
    if (x == 0) {
        digits[0] = '0';
        n = 1;
        decpt = 1;
    } else {
        char *r = PyOS_double_to_string(fabs(x), 'r', 0, 0, NULL);
        if (r == NULL) return -1;
        char m[40];
        int ml = 0, intlen = -1;
        long e10 = 0;
        const char *q = r;
        for (; *q && *q != 'e' && ml < 39; q++) {
            if (*q == '.')
                intlen = ml;
            else
                m[ml++] = *q;
        }
        if (intlen < 0) intlen = ml;
        if (*q == 'e') e10 = strtol(q + 1, NULL, 10);
        PyMem_Free(r);
        int lz = 0, tz = 0;
        while (lz < ml && m[lz] == '0') lz++;
        while (tz < ml - lz && m[ml - 1 - tz] == '0') tz++;
        n = ml - lz - tz;
        memcpy(digits, m + lz, n);
        decpt = n + (int)e10 + intlen - ml + tz;  /* value = 0.<digits> * 10**decpt */
    }
    int neg = signbit(x) != 0;
    int width = 34 - neg;
    int need = decpt <= 0 ? n - decpt + 2 : decpt < n ? n + 1 : decpt;
    char t[96];
    int tl = 0, dot = 0;
    if (neg) t[tl++] = '-';
    if (need <= width && -14 <= decpt && (decpt <= 15 || n > decpt)) {
        if (decpt <= 0) {
            t[tl++] = '0';
            t[tl++] = '.';
            for (int i = 0; i < -decpt; i++) t[tl++] = '0';
            memcpy(t + tl, digits, n);
            tl += n;
            dot = 1;
        } else if (decpt < n) {
            memcpy(t + tl, digits, decpt);
            tl += decpt;
            t[tl++] = '.';
            memcpy(t + tl, digits + decpt, n - decpt);
            tl += n - decpt;
            dot = 1;
        } else {
            memcpy(t + tl, digits, n);
            tl += n;
            for (int i = 0; i < decpt - n; i++) t[tl++] = '0';
        }
        if (!dot) {
            t[tl++] = '.';
            t[tl++] = '0';
        }
        return put(o, t, tl);
    }
    t[tl++] = digits[0];
    if (n > 1) {
        t[tl++] = '.';
        memcpy(t + tl, digits + 1, n - 1);
        tl += n - 1;
    }
    t[tl++] = 'e';
    if (put(o, t, tl) < 0) return -1;
    return put_i64(o, (int64_t)decpt - 1);
}

/* the first min(n, 8) bytes, little-endian, signed (int.from_bytes(data[:8], signed=True)) */
static int64_t signed_le(const unsigned char *p, Py_ssize_t n) {
    if (n > 8) n = 8;
    if (n == 0) return 0;
    uint64_t v = fd_le(p, (int)n);
    if (n < 8 && (v >> (8 * n - 1) & 1)) v |= ~(uint64_t)0 << (8 * n);
    return (int64_t)v;
}

static int put_datetime(Buf *o, const unsigned char *p, Py_ssize_t n, int field_type) {
    int64_t sv = signed_le(p, n);
    uint64_t v = sv < 0 ? (uint64_t)0 - (uint64_t)sv : (uint64_t)sv;
    uint64_t ymdhms = v >> 24, frac = v & 0xFFFFFF;
    uint64_t ymd = ymdhms >> 17, hms = ymdhms & 0x1FFFF;
    uint64_t ym = ymd >> 5, day = ymd & 31, year = ym / 13, month = ym % 13;
    char t[96];
    int tl;
    if (field_type == F_DATE)
        tl = snprintf(t, sizeof(t), "\"%04llu-%02llu-%02llu\"", (unsigned long long)year,
                      (unsigned long long)month, (unsigned long long)day);
    else
        tl = snprintf(t, sizeof(t), "\"%04llu-%02llu-%02llu %02llu:%02llu:%02llu.%06llu\"",
                      (unsigned long long)year, (unsigned long long)month,
                      (unsigned long long)day, (unsigned long long)(hms >> 12),
                      (unsigned long long)(hms >> 6 & 63), (unsigned long long)(hms & 63),
                      (unsigned long long)frac);
    return put(o, t, tl);
}

static int put_time(Buf *o, const unsigned char *p, Py_ssize_t n) {
    int64_t sv = signed_le(p, n);
    uint64_t v = sv < 0 ? (uint64_t)0 - (uint64_t)sv : (uint64_t)sv;
    uint64_t hms = v >> 24, frac = v & 0xFFFFFF;
    char t[96];
    int tl = snprintf(t, sizeof(t), "\"%s%02llu:%02llu:%02llu.%06llu\"", sv < 0 ? "-" : "",
                      (unsigned long long)(hms >> 12 & 1023), (unsigned long long)(hms >> 6 & 63),
                      (unsigned long long)(hms & 63), (unsigned long long)frac);
    return put(o, t, tl);
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* "base64:type<N>:<base64>", a line break (escaped: \n) every 76 characters */
static int put_base64(Buf *o, int field_type, const unsigned char *p, Py_ssize_t n) {
    char head[32];
    int hl = snprintf(head, sizeof(head), "\"base64:type%d:", field_type);
    Py_ssize_t chars = (n + 2) / 3 * 4;
    if (put(o, head, hl) < 0 || grow(o, chars + chars / 76 * 2 + 1) < 0) return -1;
    Py_ssize_t written = 0;
    for (Py_ssize_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        int k = (int)(n - i < 3 ? n - i : 3);
        if (k > 1) v |= (uint32_t)p[i + 1] << 8;
        if (k > 2) v |= p[i + 2];
        char q[4] = {B64[v >> 18 & 63], B64[v >> 12 & 63], k > 1 ? B64[v >> 6 & 63] : '=',
                     k > 2 ? B64[v & 63] : '='};
        for (int j = 0; j < 4; j++) {
            if (written && written % 76 == 0) {
                o->b[o->n++] = '\\';
                o->b[o->n++] = 'n';
            }
            o->b[o->n++] = q[j];
            written++;
        }
    }
    return put1(o, '"');
}

static int put_opaque(Buf *o, int field_type, const unsigned char *p, Py_ssize_t n) {
    if (field_type == F_NEWDECIMAL || field_type == F_DECIMAL) {
        if (n < 2) return bad("a DECIMAL without its precision and scale");
        int precision = p[0], scale = p[1];
        if (scale > precision) return bad("a DECIMAL with more scale than precision");
        int size = fd_decimal_size(precision, scale);
        if (n - 2 < size || size == 0) return bad("a DECIMAL shorter than its precision");
        PyObject *text = fd_decimal_text(p + 2, precision, scale);
        if (text == NULL) return -1;
        Py_ssize_t tn;
        const char *ts = PyUnicode_AsUTF8AndSize(text, &tn);
        int rc = ts == NULL ? -1 : put(o, ts, tn);
        Py_DECREF(text);
        return rc;
    }
    if (field_type == F_DATE || field_type == F_DATETIME || field_type == F_TIMESTAMP)
        return put_datetime(o, p, n, field_type);
    if (field_type == F_TIME) return put_time(o, p, n);
    if (field_type == F_VAR_STRING) return quote(o, p, n);
    return put_base64(o, field_type, p, n);
}

/* -- values -------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *d;
    Py_ssize_t len;
} Doc;

/* A length in 7-bit groups, lowest first (at most 5 bytes). */
static int varlen(const Doc *doc, Py_ssize_t *p, uint64_t *n) {
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (*p >= doc->len) return bad("a length past the value");
        unsigned c = doc->d[(*p)++];
        v |= (uint64_t)(c & 0x7F) << (7 * i);
        if (!(c & 0x80)) {
            *n = v;
            return 0;
        }
    }
    return bad("a length of more than 5 bytes");
}

static int inlined(int vt, int large) {
    return vt == LITERAL || vt == INT16 || vt == UINT16 || (large && (vt == INT32 || vt == UINT32));
}

static int container(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth, Buf *o);

/* The value of type ``t`` whose data starts at ``p`` (json_binary._value), as text. */
static int value(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth, Buf *o) {
    const unsigned char *d = doc->d;
    Py_ssize_t len = doc->len;
    if (t <= LARGE_ARRAY) return container(doc, t, p, end, depth + 1, o);
    switch (t) {
    case STRING: {
        uint64_t n;
        if (varlen(doc, &p, &n) < 0) return -1;
        if ((uint64_t)p + n > (uint64_t)end) return bad("a string longer than its value");
        return quote(o, d + p, (Py_ssize_t)n);
    }
    case LITERAL:
        if (p >= len) return bad("a literal past the value");
        switch (d[p]) {
        case 0: return put(o, "null", 4);
        case 1: return put(o, "true", 4);
        case 2: return put(o, "false", 5);
        }
        return bad("a literal of an unknown kind");
    case INT16: case UINT16:
        if (p + 2 > len) return bad("a number past the value");
        return t == INT16 ? put_i64(o, (int16_t)fd_le(d + p, 2)) : put_u64(o, fd_le(d + p, 2));
    case INT32: case UINT32:
        if (p + 4 > len) return bad("a number past the value");
        return t == INT32 ? put_i64(o, (int32_t)fd_le(d + p, 4)) : put_u64(o, fd_le(d + p, 4));
    case INT64: case UINT64:
        if (p + 8 > len) return bad("a number past the value");
        return t == INT64 ? put_i64(o, (int64_t)fd_le(d + p, 8)) : put_u64(o, fd_le(d + p, 8));
    case DOUBLE: {
        if (p + 8 > len) return bad("a number past the value");
        uint64_t bits = fd_le(d + p, 8);
        double x;
        memcpy(&x, &bits, 8);
        return put_double(o, x);
    }
    case OPAQUE: {
        if (p >= len) return bad("an opaque value past the value");
        int field_type = d[p++];
        uint64_t n;
        if (varlen(doc, &p, &n) < 0) return -1;
        if ((uint64_t)p + n > (uint64_t)end) return bad("an opaque value longer than its value");
        return put_opaque(o, field_type, d + p, (Py_ssize_t)n);
    }
    }
    return bad("a value of an unknown type");
}

/* An object or an array (json_binary._container): ``count`` and ``size`` first (2 bytes
 * each, 4 when large), then the key entries (objects: offset, length), the value entries
 * (type, then the value inlined or its offset), then keys and values. Offsets are relative
 * to ``p``. */
static int container(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth, Buf *o) {
    if (depth > MAX_DEPTH) return bad("nested too deep");
    const unsigned char *d = doc->d;
    int large = t & 1, osz = large ? 4 : 2, is_object = t <= LARGE_OBJECT;
    if (p + 2 * osz > doc->len) return bad("a container header past the value");
    uint64_t count = fd_le(d + p, osz), size = fd_le(d + p + osz, osz);
    if ((uint64_t)p + size > (uint64_t)end) return bad("a container longer than its value");
    Py_ssize_t entries = p + 2 * osz;
    Py_ssize_t values = is_object ? entries + (Py_ssize_t)count * (osz + 2) : entries;
    const unsigned char *pkey = NULL;
    uint64_t pkn = 0;
    if (put1(o, is_object ? '{' : '[') < 0) return -1;
    for (uint64_t i = 0; i < count; i++) {
        if (i && put(o, ", ", 2) < 0) return -1;
        if (is_object) {
            Py_ssize_t e = entries + (Py_ssize_t)i * (osz + 2);
            if (e + osz + 2 > doc->len) return bad("a key entry past the value");
            uint64_t koff = fd_le(d + e, osz), kn = fd_le(d + e + osz, 2);
            if (koff + kn > size) return bad("a key outside its object");
            const unsigned char *key = d + p + koff;
            if (pkey != NULL && !(kn > pkn || (kn == pkn && memcmp(key, pkey, kn) > 0)))
                return UNSORTED;
            pkey = key;
            pkn = kn;
            if (quote(o, key, (Py_ssize_t)kn) < 0 || put(o, ": ", 2) < 0) return -1;
        }
        Py_ssize_t e = values + (Py_ssize_t)i * (1 + osz);
        if (e >= doc->len) return bad("a value entry past the value");
        int vt = d[e], rc;
        if (inlined(vt, large))
            rc = value(doc, vt, e + 1, e + 1 + osz, depth, o);
        else {
            if (e + 1 + osz > doc->len) return bad("a value entry past the value");
            uint64_t off = fd_le(d + e + 1, osz);
            if (off >= size) return bad("a value outside its container");
            rc = value(doc, vt, p + (Py_ssize_t)off, p + (Py_ssize_t)size, depth, o);
        }
        if (rc < 0) return rc;
    }
    return put1(o, is_object ? '}' : ']');
}

/* -- the tree (json_binary.parse) --------------------------------------------------------- */

static PyObject *tree_value(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth);

static PyObject *tree_container(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end,
                                int depth) {
    if (depth > MAX_DEPTH) return bad("nested too deep"), NULL;
    const unsigned char *d = doc->d;
    int large = t & 1, osz = large ? 4 : 2, is_object = t <= LARGE_OBJECT;
    if (p + 2 * osz > doc->len) return bad("a container header past the value"), NULL;
    uint64_t count = fd_le(d + p, osz), size = fd_le(d + p + osz, osz);
    if ((uint64_t)p + size > (uint64_t)end)
        return bad("a container longer than its value"), NULL;
    Py_ssize_t entries = p + 2 * osz;
    Py_ssize_t values = is_object ? entries + (Py_ssize_t)count * (osz + 2) : entries;
    PyObject *list = PyList_New(0), *obj = NULL;
    if (list == NULL) return NULL;
    for (uint64_t i = 0; i < count; i++) {
        Py_ssize_t e = values + (Py_ssize_t)i * (1 + osz);
        PyObject *v;
        if (e >= doc->len) {
            bad("a value entry past the value");
            goto fail;
        }
        int vt = d[e];
        if (inlined(vt, large))
            v = tree_value(doc, vt, e + 1, e + 1 + osz, depth);
        else {
            if (e + 1 + osz > doc->len) {
                bad("a value entry past the value");
                goto fail;
            }
            uint64_t off = fd_le(d + e + 1, osz);
            if (off >= size) {
                bad("a value outside its container");
                goto fail;
            }
            v = tree_value(doc, vt, p + (Py_ssize_t)off, p + (Py_ssize_t)size, depth);
        }
        if (v == NULL) goto fail;
        int rc = PyList_Append(list, v);
        Py_DECREF(v);
        if (rc < 0) goto fail;
    }
    if (!is_object) return list;
    obj = PyDict_New();
    if (obj == NULL) goto fail;
    for (uint64_t i = 0; i < count; i++) {
        Py_ssize_t e = entries + (Py_ssize_t)i * (osz + 2);
        if (e + osz + 2 > doc->len) {
            bad("a key entry past the value");
            goto fail;
        }
        uint64_t koff = fd_le(d + e, osz), kn = fd_le(d + e + osz, 2);
        if (koff + kn > size) {
            bad("a key outside its object");
            goto fail;
        }
        PyObject *k = PyUnicode_DecodeUTF8((const char *)d + p + koff, (Py_ssize_t)kn,
                                           "surrogateescape");
        if (k == NULL) goto fail;
        int rc = PyDict_SetItem(obj, k, PyList_GET_ITEM(list, (Py_ssize_t)i));
        Py_DECREF(k);
        if (rc < 0) goto fail;
    }
    Py_DECREF(list);
    return obj;
fail:
    Py_XDECREF(obj);
    Py_DECREF(list);
    return NULL;
}

static PyObject *tree_value(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth) {
    if (t <= LARGE_ARRAY) return tree_container(doc, t, p, end, depth + 1);
    Buf o;
    buf_init(&o);
    PyObject *out = value(doc, t, p, end, depth, &o) < 0 ? NULL : buf_str(&o);
    buf_free(&o);
    return out;
}

static PyObject *tree(const unsigned char *d, Py_ssize_t n) {
    if (n == 0) return Py_NewRef(s_null);
    Doc doc = {d, n};
    return tree_value(&doc, d[0], 1, n, 0);
}

/* -- rendering a tree (json_binary.render) ------------------------------------------------- */

/* json.dumps(key, ensure_ascii=False), code point by code point */
static PyObject *quote_str(PyObject *k) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(k), extra = 0;
    int kind = PyUnicode_KIND(k);
    const void *data = PyUnicode_DATA(k);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' ||
            c == '\t')
            extra += 1;
        else if (c < 0x20)
            extra += 5;
    }
    Py_UCS4 maxchar = PyUnicode_MAX_CHAR_VALUE(k);
    PyObject *out = PyUnicode_New(n + 2 + extra, maxchar < 127 ? 127 : maxchar);
    if (out == NULL) return NULL;
    int okind = PyUnicode_KIND(out);
    void *odata = PyUnicode_DATA(out);
    Py_ssize_t j = 0;
    PyUnicode_WRITE(okind, odata, j++, '"');
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        }
        if (esc != NULL) {
            PyUnicode_WRITE(okind, odata, j++, esc[0]);
            PyUnicode_WRITE(okind, odata, j++, esc[1]);
        } else if (c < 0x20) {
            const char u[6] = {'\\', 'u', '0', '0', HEX[c >> 4], HEX[c & 15]};
            for (int m = 0; m < 6; m++) PyUnicode_WRITE(okind, odata, j++, u[m]);
        } else
            PyUnicode_WRITE(okind, odata, j++, c);
    }
    PyUnicode_WRITE(okind, odata, j++, '"');
    return out;
}

static int append(PyObject *pieces, PyObject *s) { return PyList_Append(pieces, s); }

static int render(PyObject *node, PyObject *pieces, int depth) {
    if (depth > MAX_DEPTH) return bad("nested too deep");
    if (PyUnicode_CheckExact(node)) return append(pieces, node);
    if (PyDict_CheckExact(node)) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *v;
        if (append(pieces, s_open_obj) < 0) return -1;
        while (PyDict_Next(node, &pos, &k, &v)) {
            if (!PyUnicode_Check(k)) {
                PyErr_SetString(PyExc_TypeError, "a JSON object's key must be str");
                return -1;
            }
            if (i++ && append(pieces, s_comma) < 0) return -1;
            PyObject *q = quote_str(k);
            if (q == NULL) return -1;
            int rc = append(pieces, q);
            Py_DECREF(q);
            if (rc < 0 || append(pieces, s_colon) < 0 || render(v, pieces, depth + 1) < 0)
                return -1;
        }
        return append(pieces, s_close_obj);
    }
    if (PyList_CheckExact(node)) {
        if (append(pieces, s_open_arr) < 0) return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(node); i++) {
            if (i && append(pieces, s_comma) < 0) return -1;
            if (render(PyList_GET_ITEM(node, i), pieces, depth + 1) < 0) return -1;
        }
        return append(pieces, s_close_arr);
    }
    PyErr_Format(PyExc_TypeError, "a JSON tree holds dict, list and str, not %.80s",
                 Py_TYPE(node)->tp_name);
    return -1;
}

static PyObject *render_tree(PyObject *node) {
    if (PyUnicode_CheckExact(node)) return Py_NewRef(node);
    PyObject *pieces = PyList_New(0);
    if (pieces == NULL) return NULL;
    PyObject *out = render(node, pieces, 0) < 0 ? NULL : PyUnicode_Join(s_empty, pieces);
    Py_DECREF(pieces);
    return out;
}

/* -- entry points ---------------------------------------------------------------------------- */

PyObject *fj_text(const unsigned char *d, Py_ssize_t n) {
    if (n == 0) return Py_NewRef(s_null);  /* an empty value: the server reads JSON null */
    Doc doc = {d, n};
    Buf o;
    buf_init(&o);
    int rc = value(&doc, d[0], 1, n, 0, &o);
    PyObject *out = NULL;
    if (rc == 0)
        out = buf_str(&o);
    else if (rc == UNSORTED) {  /* not MySQL's key order: as json_binary's dicts print it */
        PyObject *t = tree(d, n);
        if (t != NULL) {
            out = render_tree(t);
            Py_DECREF(t);
        }
    }
    buf_free(&o);
    return out;
}

PyObject *fj_py_text(PyObject *self, PyObject *arg) {
    Py_buffer b;
    (void)self;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = fj_text((const unsigned char *)b.buf, b.len);
    PyBuffer_Release(&b);
    return out;
}

PyObject *fj_py_tree(PyObject *self, PyObject *arg) {
    Py_buffer b;
    (void)self;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = tree((const unsigned char *)b.buf, b.len);
    PyBuffer_Release(&b);
    return out;
}

PyObject *fj_py_render(PyObject *self, PyObject *arg) {
    (void)self;
    return render_tree(arg);
}

int fj_init(void) {
    s_null = PyUnicode_InternFromString("null");
    s_open_obj = PyUnicode_InternFromString("{");
    s_close_obj = PyUnicode_InternFromString("}");
    s_open_arr = PyUnicode_InternFromString("[");
    s_close_arr = PyUnicode_InternFromString("]");
    s_comma = PyUnicode_InternFromString(", ");
    s_colon = PyUnicode_InternFromString(": ");
    s_empty = PyUnicode_InternFromString("");
    return s_null && s_open_obj && s_close_obj && s_open_arr && s_close_arr && s_comma &&
                   s_colon && s_empty
               ? 0
               : -1;
}
