/* MySQL's binary JSON value printed as the server prints it, into a buffer (the rules and
 * the reference: json_binary.py; _fastjson.c has the entry points). Every read is
 * bounds-checked: ValueError names a malformed value. */
#include "_fastjsontext.h"
#include "_fastdouble.h"
#include "_fastvalues.h"

#include <math.h>
#include <string.h>

/* -- an output buffer --------------------------------------------------------------------- */


void fjt_buf_init(Buf *o) {
    o->b = o->small;
    o->n = 0;
    o->cap = sizeof(o->small);
}

void fjt_buf_free(Buf *o) {
    if (o->b != o->small) PyMem_Free(o->b);
}

/* room for ``more`` bytes: the buffer doubled (called only when there is not, by room) */
static int grow_to(Buf *o, Py_ssize_t more) {
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

static inline int grow(Buf *o, Py_ssize_t more) {
    return o->cap - o->n >= more ? 0 : grow_to(o, more);
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

static inline int put_u64(Buf *o, uint64_t v) {
    if (grow(o, 24) < 0) return -1;
    o->n += fd_put_digits(o->b + o->n, v, 0);
    return 0;
}

static inline int put_i64(Buf *o, int64_t v) {
    if (v < 0) {
        if (put1(o, '-') < 0) return -1;
        return put_u64(o, (uint64_t)0 - (uint64_t)v);
    }
    return put_u64(o, (uint64_t)v);
}

/* The buffer's UTF-8 as str, "surrogateescape" for bytes that are not: a document of ASCII
 * alone (most are) is copied into a str made for it, checked eight bytes at a time, without
 * the decoder's call chain. */
PyObject *fjt_buf_str(Buf *o) {
    const unsigned char *b = (const unsigned char *)o->b;
    Py_ssize_t n = o->n, i = 0;
    uint64_t high = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        high |= w;
    }
    for (; i < n; i++) high |= b[i];
    if (high & 0x8080808080808080ULL)
        return PyUnicode_DecodeUTF8(o->b, n, "surrogateescape");
    PyObject *s = PyUnicode_New(n, 127);
    if (s != NULL) memcpy(PyUnicode_1BYTE_DATA(s), b, n);
    return s;
}

int fjt_bad(const char *why) {
    PyErr_Format(PyExc_ValueError, "malformed binary JSON value (%s)", why);
    return -1;
}

/* -- strings ------------------------------------------------------------------------------ */

static const char HEX[] = "0123456789abcdef";

/* the bytes a JSON string escapes: '"', '\\' and the control characters */
static const unsigned char ESCAPED[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, ['"'] = 1, ['\\'] = 1,
};

/* the rest of a string from its first byte to escape (quote's slow part) */
static int quote_escaped(Buf *o, const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (!ESCAPED[c]) continue;
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

/* A JSON string as MySQL's double_quote (and Python's json.dumps) writes it: '"' and '\\'
 * escaped, the control characters as \b \t \n \f \r or \u00xx, every other byte as it is.
 * The bytes are copied as they are scanned, into room made once, until one needs escaping
 * (few strings have one). */
static int quote(Buf *o, const unsigned char *s, Py_ssize_t n) {
    if (grow(o, n + 2) < 0) return -1;
    char *w = o->b + o->n;
    *w++ = '"';
    Py_ssize_t i = 0;
    for (; i < n && !ESCAPED[s[i]]; i++) w[i] = (char)s[i];
    o->n += 1 + i;
    if (i < n) return quote_escaped(o, s + i, n - i);
    o->b[o->n++] = '"';
    return 0;
}

int fjt_put(Buf *o, const char *s, Py_ssize_t n) { return put(o, s, n); }

int fjt_quote(Buf *o, const unsigned char *s, Py_ssize_t n) { return quote(o, s, n); }

/* -- scalars ------------------------------------------------------------------------------ */

/* A double as MySQL prints it in JSON (json_binary.double_text): my_gcvt at its widest field
 * over the shortest digits that read back (Grisu3, _fastdouble.c; Python's repr when it
 * cannot prove them), 'f' notation for decimal points
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
    } else if (fdd_shortest(x, digits, &n, &decpt)) {
        while (n > 1 && digits[n - 1] == '0') n--;
    } else { /* the rare double Grisu3 cannot settle: Python's exact dtoa */
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
    int width_needed = decpt <= 0 ? n - decpt + 2 : decpt < n ? n + 1 : decpt;
    char t[96];
    int tl = 0, dot = 0;
    if (neg) t[tl++] = '-';
    if (width_needed <= width && -14 <= decpt && (decpt <= 15 || n > decpt)) {
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
        if (n < 2) return fjt_bad("a DECIMAL without its precision and scale");
        int precision = p[0], scale = p[1];
        if (scale > precision) return fjt_bad("a DECIMAL with more scale than precision");
        int size = fd_decimal_size(precision, scale);
        if (n - 2 < size || size == 0) return fjt_bad("a DECIMAL shorter than its precision");
        char text[FD_DECIMAL_CHARS];
        int tn = fd_decimal_chars(p + 2, precision, scale, text);
        return tn < 0 ? -1 : put(o, text, tn);
    }
    if (field_type == F_DATE || field_type == F_DATETIME || field_type == F_TIMESTAMP)
        return put_datetime(o, p, n, field_type);
    if (field_type == F_TIME) return put_time(o, p, n);
    if (field_type == F_VAR_STRING) return quote(o, p, n);
    return put_base64(o, field_type, p, n);
}

/* -- values -------------------------------------------------------------------------------- */


/* A length in 7-bit groups, lowest first (at most 5 bytes). */
static int varlen(const Doc *doc, Py_ssize_t *p, uint64_t *n) {
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (*p >= doc->len) return fjt_bad("a length past the value");
        unsigned c = doc->d[(*p)++];
        v |= (uint64_t)(c & 0x7F) << (7 * i);
        if (!(c & 0x80)) {
            *n = v;
            return 0;
        }
    }
    return fjt_bad("a length of more than 5 bytes");
}

static int container(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth, Buf *o);

/* The value of type ``t`` whose data starts at ``p`` (json_binary._value), as text. */
int fjt_value(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth, Buf *o) {
    const unsigned char *d = doc->d;
    Py_ssize_t len = doc->len;
    if (t <= LARGE_ARRAY) return container(doc, t, p, end, depth + 1, o);
    switch (t) {
    case STRING: {
        uint64_t n;
        if (varlen(doc, &p, &n) < 0) return -1;
        if ((uint64_t)p + n > (uint64_t)end) return fjt_bad("a string longer than its value");
        return quote(o, d + p, (Py_ssize_t)n);
    }
    case LITERAL:
        if (p >= len) return fjt_bad("a literal past the value");
        switch (d[p]) {
        case 0: return put(o, "null", 4);
        case 1: return put(o, "true", 4);
        case 2: return put(o, "false", 5);
        }
        return fjt_bad("a literal of an unknown kind");
    case INT16: case UINT16:
        if (p + 2 > len) return fjt_bad("a number past the value");
        return t == INT16 ? put_i64(o, (int16_t)fd_le(d + p, 2)) : put_u64(o, fd_le(d + p, 2));
    case INT32: case UINT32:
        if (p + 4 > len) return fjt_bad("a number past the value");
        return t == INT32 ? put_i64(o, (int32_t)fd_le(d + p, 4)) : put_u64(o, fd_le(d + p, 4));
    case INT64: case UINT64:
        if (p + 8 > len) return fjt_bad("a number past the value");
        return t == INT64 ? put_i64(o, (int64_t)fd_le(d + p, 8)) : put_u64(o, fd_le(d + p, 8));
    case DOUBLE: {
        if (p + 8 > len) return fjt_bad("a number past the value");
        uint64_t bits = fd_le(d + p, 8);
        double x;
        memcpy(&x, &bits, 8);
        return put_double(o, x);
    }
    case OPAQUE: {
        if (p >= len) return fjt_bad("an opaque value past the value");
        int field_type = d[p++];
        uint64_t n;
        if (varlen(doc, &p, &n) < 0) return -1;
        if ((uint64_t)p + n > (uint64_t)end) return fjt_bad("an opaque value longer than its value");
        return put_opaque(o, field_type, d + p, (Py_ssize_t)n);
    }
    }
    return fjt_bad("a value of an unknown type");
}

/* An object or an array (json_binary._container): ``count`` and ``size`` first (2 bytes
 * each, 4 when large), then the key entries (objects: offset, length), the value entries
 * (type, then the value inlined or its offset), then keys and values. Offsets are relative
 * to ``p``. */
static int container(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth, Buf *o) {
    if (depth > MAX_DEPTH) return fjt_bad("nested too deep");
    const unsigned char *d = doc->d;
    int large = t & 1, osz = large ? 4 : 2, is_object = t <= LARGE_OBJECT;
    if (p + 2 * osz > doc->len) return fjt_bad("a container header past the value");
    uint64_t count = fd_le24(d + p, large), size = fd_le24(d + p + osz, large);
    if ((uint64_t)p + size > (uint64_t)end) return fjt_bad("a container longer than its value");
    Py_ssize_t entries = p + 2 * osz;
    Py_ssize_t values = is_object ? entries + (Py_ssize_t)count * (osz + 2) : entries;
    const unsigned char *pkey = NULL;
    uint64_t pkn = 0;
    if (put1(o, is_object ? '{' : '[') < 0) return -1;
    for (uint64_t i = 0; i < count; i++) {
        if (i && put(o, ", ", 2) < 0) return -1;
        if (is_object) {
            Py_ssize_t e = entries + (Py_ssize_t)i * (osz + 2);
            if (e + osz + 2 > doc->len) return fjt_bad("a key entry past the value");
            uint64_t koff = fd_le24(d + e, large), kn = fd_le(d + e + osz, 2);
            if (koff + kn > size) return fjt_bad("a key outside its object");
            const unsigned char *key = d + p + koff;
            if (pkey != NULL && !(kn > pkn || (kn == pkn && memcmp(key, pkey, kn) > 0)))
                return UNSORTED;
            pkey = key;
            pkn = kn;
            if (quote(o, key, (Py_ssize_t)kn) < 0 || put(o, ": ", 2) < 0) return -1;
        }
        Py_ssize_t e = values + (Py_ssize_t)i * (1 + osz);
        if (e >= doc->len) return fjt_bad("a value entry past the value");
        int vt = d[e], rc;
        if (fjt_inlined(vt, large))
            rc = fjt_value(doc, vt, e + 1, e + 1 + osz, depth, o);
        else {
            if (e + 1 + osz > doc->len) return fjt_bad("a value entry past the value");
            uint64_t off = fd_le24(d + e + 1, large);
            if (off >= size) return fjt_bad("a value outside its container");
            rc = fjt_value(doc, vt, p + (Py_ssize_t)off, p + (Py_ssize_t)size, depth, o);
        }
        if (rc < 0) return rc;
    }
    return put1(o, is_object ? '}' : ']');
}

