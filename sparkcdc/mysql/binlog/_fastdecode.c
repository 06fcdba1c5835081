/* Row images of binlog row events decoded in C into canonical Python values.
 *
 * The Python side (sparkcdc/mysql/fastdecode.py) compiles a per-table plan once from the
 * TABLE_MAP metadata and the captured schema: one small spec per column (an op code and its
 * arguments). decode() then walks a whole event's row images with that plan and returns
 * (before, after) pairs of dicts, the same values PyRowDecoder builds (sparkcdc.mysql.types).
 * Every read is bounds-checked: a truncated or malformed event raises ValueError, which the
 * Python side turns into DecodeError.
 */
#include "_fastdecode.h"

#include <datetime.h>
#include <stdint.h>
#include <string.h>

enum {
    OP_INT = 1,       /* a: bytes (1, 2, 3, 4, 8), little-endian, signed */
    OP_UINT = 2,      /* a: bytes (1, 2, 3, 4), unsigned */
    OP_UINT64 = 3,    /* 8 bytes unsigned -> Decimal */
    OP_FLOAT = 4,
    OP_DOUBLE = 5,
    OP_YEAR = 6,
    OP_DECIMAL = 7,   /* a: precision, b: scale, c: 1 -> text, 0 -> Decimal */
    OP_TEXT = 8,      /* a: length bytes; b: 0 utf-8, 1 codec named by obj, 2 call obj(bytes) */
    OP_BYTES = 9,     /* a: length bytes; b: pad with zero bytes to this length (BINARY(n)) */
    OP_ENUM = 10,     /* a: 1 or 2 bytes; obj: tuple of members */
    OP_SET = 11,      /* a: bytes of the mask; obj: tuple of members */
    OP_GEOMETRY = 12, /* a: length bytes; the value without its 4-byte SRID */
    OP_CALL = 13,     /* a: length bytes; obj(bytes) -> value */
    OP_BIT1 = 14,     /* a: bytes; any bit set -> True */
    OP_BITS = 15,     /* a: bytes in the binlog; b: bytes of the canonical value */
    OP_DATE = 16,
    OP_TIME2 = 17,    /* a: fsp */
    OP_DATETIME2 = 18,
    OP_TIMESTAMP2 = 19,
    OP_TIME = 20,     /* the old formats */
    OP_DATETIME = 21,
    OP_TIMESTAMP = 22,
    OP_JSON = 23,     /* a: length bytes; MySQL's binary JSON as its text (_fastjson.c); obj:
                         None, or apply(before bytes | None, diff bytes, column) -> text for
                         the partial updates of a PARTIAL_UPDATE_ROWS event */
};

typedef struct {
    int op, a, b, c;
    PyObject *obj; /* borrowed from the plan's specs tuple */
    const char *encoding;
} ColSpec;

typedef struct {
    PyObject_HEAD
    Py_ssize_t ncols;
    ColSpec *cols;
    PyObject *names;  /* tuple of str */
    PyObject *specs;  /* keeps the objects of the specs alive */
    PyObject *decimal; /* decimal.Decimal */
} PlanObject;

static PyObject *empty_str, *empty_bytes, *comma;
static PyTypeObject PlanType;

/* -- reading ------------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *d;
    Py_ssize_t pos, end;
} Cursor;

static int need(Cursor *c, Py_ssize_t n) {
    if (n < 0 || c->end - c->pos < n) {
        PyErr_Format(PyExc_ValueError, "the event ends inside a value (need %zd bytes at %zd)",
                     n, c->pos);
        return -1;
    }
    return 0;
}

static inline uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

static inline int64_t sign_extend(uint64_t v, int bytes) {
    int shift = 64 - 8 * bytes;
    return (int64_t)(v << shift) >> shift;
}

static inline int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/* A length-prefixed value: the length (in ``nbytes`` bytes) and a pointer to the bytes. */
static int read_prefixed(Cursor *c, int nbytes, const unsigned char **p, Py_ssize_t *n) {
    if (need(c, nbytes) < 0) return -1;
    uint64_t len = le(c->d + c->pos, nbytes);
    c->pos += nbytes;
    if (len > (uint64_t)PY_SSIZE_T_MAX || need(c, (Py_ssize_t)len) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a value longer than the event");
        return -1;
    }
    *p = c->d + c->pos;
    *n = (Py_ssize_t)len;
    c->pos += (Py_ssize_t)len;
    return 0;
}

/* -- date and time helpers ---------------------------------------------------------------- */

/* Python's timedelta(microseconds=us), normalized. */
static PyObject *delta_from_us(int64_t us) {
    int64_t day = 86400LL * 1000000LL;
    int64_t days = floordiv(us, day);
    int64_t rem = us - days * day;
    return PyDelta_FromDSU((int)days, (int)(rem / 1000000), (int)(rem % 1000000));
}

/* days since 1970-01-01 -> civil date (Howard Hinnant's algorithm) */
static void civil_from_days(int64_t z, int *y, int *m, int *d) {
    z += 719468;
    int64_t era = floordiv(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t yy = yoe + era * 400;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t dd = doy - (153 * mp + 2) / 5 + 1;
    int64_t mm = mp < 10 ? mp + 3 : mp - 9;
    *y = (int)(yy + (mm <= 2));
    *m = (int)mm;
    *d = (int)dd;
}

/* EPOCH (UTC) + timedelta(microseconds=us), as an aware datetime. */
static PyObject *utc_from_us(int64_t us) {
    int64_t day = 86400LL * 1000000LL;
    int64_t days = floordiv(us, day);
    int64_t rem = us - days * day;
    int y, m, d;
    civil_from_days(days, &y, &m, &d);
    int64_t secs = rem / 1000000;
    return PyDateTimeAPI->DateTime_FromDateAndTime(
        y, m, d, (int)(secs / 3600), (int)(secs / 60 % 60), (int)(secs % 60),
        (int)(rem % 1000000), PyDateTime_TimeZone_UTC, PyDateTimeAPI->DateTimeType);
}

/* A date or datetime that Python refuses (month 13, Feb 30...) reads as None, like the
 * zero dates; any other error propagates. */
static PyObject *none_if_invalid(PyObject *v) {
    if (v == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return v;
}

static PyObject *make_datetime(int64_t year, int64_t month, int64_t day, int64_t hour,
                               int64_t minute, int64_t second, int64_t micro) {
    if (year < 1 || year > 9999 || month < 1 || month > 12 || day < 1 || day > 31 ||
        hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59 ||
        micro < 0 || micro > 999999)
        Py_RETURN_NONE;
    return none_if_invalid(PyDateTime_FromDateAndTime((int)year, (int)month, (int)day,
                                                      (int)hour, (int)minute, (int)second,
                                                      (int)micro));
}

/* the fractional part of TIME2/DATETIME2/TIMESTAMP2 in microseconds */
static int frac_bytes(int fsp) { return (fsp + 1) / 2; }

static int64_t frac_us(const unsigned char *p, int fsp, int is_signed) {
    int n = frac_bytes(fsp);
    if (n == 0) return 0;
    uint64_t v = be(p, n);
    int64_t x = is_signed ? sign_extend(v, n) : (int64_t)v;
    return n == 1 ? x * 10000 : n == 2 ? x * 100 : x;
}

/* -- DECIMAL ------------------------------------------------------------------------------ */

static const int dig2bytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

int fd_decimal_size(int precision, int scale) {
    int intg = precision - scale;
    return intg / 9 * 4 + dig2bytes[intg % 9] + scale / 9 * 4 + dig2bytes[scale % 9];
}

/* MySQL's binary DECIMAL as plain text, exactly as PyRowDecoder (and, in JSON, json_binary)
 * writes it; a precision of at most 255 (a JSON DECIMAL's byte). */
PyObject *fd_decimal_text(const unsigned char *src, int precision, int scale) {
    int intg = precision - scale;
    int intg0 = intg / 9, intg0x = intg % 9, frac0 = scale / 9, frac0x = scale % 9;
    int size = fd_decimal_size(precision, scale);
    unsigned char b[128];
    char out[640];
    if (size > (int)sizeof(b) || size < 1 || intg < 0 || scale < 0 || precision > 255) {
        PyErr_SetString(PyExc_ValueError, "DECIMAL too wide");
        return NULL;
    }
    memcpy(b, src, size);
    int negative = !(b[0] & 0x80);
    b[0] ^= 0x80;
    if (negative)
        for (int i = 0; i < size; i++) b[i] ^= 0xFF;
    char whole[320];
    int wl = 0, i = 0, lead = dig2bytes[intg0x], tail = dig2bytes[frac0x];
    if (lead) {
        wl += snprintf(whole + wl, sizeof(whole) - wl, "%llu",
                       (unsigned long long)be(b, lead));
        i = lead;
    }
    for (int k = 0; k < intg0; k++, i += 4)
        wl += snprintf(whole + wl, sizeof(whole) - wl, "%09llu",
                       (unsigned long long)be(b + i, 4));
    int z = 0;
    while (z < wl && whole[z] == '0') z++;
    int ol = 0;
    if (z == wl)
        out[ol++] = '0';
    else {
        memcpy(out, whole + z, wl - z);
        ol = wl - z;
    }
    if (scale) {
        out[ol++] = '.';
        for (int k = 0; k < frac0; k++, i += 4)
            ol += snprintf(out + ol, sizeof(out) - ol, "%09llu",
                           (unsigned long long)be(b + i, 4));
        if (tail)
            ol += snprintf(out + ol, sizeof(out) - ol, "%0*llu", frac0x,
                           (unsigned long long)be(b + i, tail));
    }
    int nonzero = 0;
    for (int k = 0; k < ol; k++)
        if (out[k] != '0' && out[k] != '.') nonzero = 1;
    if (negative && nonzero) {
        memmove(out + 1, out, ol);
        out[0] = '-';
        ol++;
    }
    return PyUnicode_FromStringAndSize(out, ol);
}

/* -- one value ---------------------------------------------------------------------------- */

static PyObject *decode_value(PlanObject *plan, ColSpec *s, Cursor *c) {
    const unsigned char *p;
    Py_ssize_t n;
    switch (s->op) {
    case OP_INT:
        if (need(c, s->a) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += s->a;
        return PyLong_FromLongLong(sign_extend(le(p, s->a), s->a));
    case OP_UINT:
        if (need(c, s->a) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += s->a;
        return PyLong_FromUnsignedLongLong(le(p, s->a));
    case OP_UINT64: {
        if (need(c, 8) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += 8;
        PyObject *i = PyLong_FromUnsignedLongLong(le(p, 8));
        if (i == NULL) return NULL;
        PyObject *v = PyObject_CallOneArg(plan->decimal, i);
        Py_DECREF(i);
        return v;
    }
    case OP_FLOAT: {
        float f;
        if (need(c, 4) < 0) return NULL;
        memcpy(&f, c->d + c->pos, 4);
        c->pos += 4;
        return PyFloat_FromDouble((double)f);
    }
    case OP_DOUBLE: {
        double f;
        if (need(c, 8) < 0) return NULL;
        memcpy(&f, c->d + c->pos, 8);
        c->pos += 8;
        return PyFloat_FromDouble(f);
    }
    case OP_YEAR: {
        if (need(c, 1) < 0) return NULL;
        int v = c->d[c->pos++];
        return PyLong_FromLong(v ? 1900 + v : 0);
    }
    case OP_DECIMAL: {
        int size = fd_decimal_size(s->a, s->b);
        if (need(c, size) < 0) return NULL;
        PyObject *text = fd_decimal_text(c->d + c->pos, s->a, s->b);
        c->pos += size;
        if (text == NULL || s->c) return text;
        PyObject *v = PyObject_CallOneArg(plan->decimal, text);
        Py_DECREF(text);
        return v;
    }
    case OP_TEXT:
        if (read_prefixed(c, s->a, &p, &n) < 0) return NULL;
        if (s->b == 0) return PyUnicode_DecodeUTF8((const char *)p, n, NULL);
        if (s->b == 1) return PyUnicode_Decode((const char *)p, n, s->encoding, NULL);
        {
            PyObject *raw = PyBytes_FromStringAndSize((const char *)p, n);
            if (raw == NULL) return NULL;
            PyObject *v = PyObject_CallOneArg(s->obj, raw);
            Py_DECREF(raw);
            return v;
        }
    case OP_BYTES: {
        if (read_prefixed(c, s->a, &p, &n) < 0) return NULL;
        if (s->b && n < s->b) {
            PyObject *v = PyBytes_FromStringAndSize(NULL, s->b);
            if (v == NULL) return NULL;
            memcpy(PyBytes_AS_STRING(v), p, n);
            memset(PyBytes_AS_STRING(v) + n, 0, s->b - n);
            return v;
        }
        return PyBytes_FromStringAndSize((const char *)p, n);
    }
    case OP_ENUM: {
        if (need(c, s->a) < 0) return NULL;
        Py_ssize_t i = (Py_ssize_t)le(c->d + c->pos, s->a);
        c->pos += s->a;
        if (i > 0 && i <= PyTuple_GET_SIZE(s->obj))
            return Py_NewRef(PyTuple_GET_ITEM(s->obj, i - 1));
        return Py_NewRef(empty_str);
    }
    case OP_SET: {
        if (need(c, s->a) < 0) return NULL;
        uint64_t mask = le(c->d + c->pos, s->a);
        c->pos += s->a;
        Py_ssize_t m = PyTuple_GET_SIZE(s->obj);
        if (mask == 0) return Py_NewRef(empty_str);
        PyObject *parts = PyList_New(0);
        if (parts == NULL) return NULL;
        for (Py_ssize_t i = 0; i < m && i < 64; i++)
            if (mask >> i & 1)
                if (PyList_Append(parts, PyTuple_GET_ITEM(s->obj, i)) < 0) {
                    Py_DECREF(parts);
                    return NULL;
                }
        PyObject *v = PyUnicode_Join(comma, parts);
        Py_DECREF(parts);
        return v;
    }
    case OP_GEOMETRY: {
        /* as stored: a little-endian SRID, then WKB; out: WKB when the SRID is 0, else
           EWKB (the type word | 0x20000000, then the SRID, in the WKB's byte order), as
           types.ewkb does */
        if (read_prefixed(c, s->a, &p, &n) < 0) return NULL;
        if (n <= 4) return Py_NewRef(empty_bytes);
        uint32_t srid = (uint32_t)le(p, 4);
        const unsigned char *w = p + 4;
        Py_ssize_t wn = n - 4;
        if (srid == 0 || wn < 5 || (w[0] != 0 && w[0] != 1))
            return PyBytes_FromStringAndSize((const char *)w, wn);
        PyObject *out = PyBytes_FromStringAndSize(NULL, wn + 4);
        if (out == NULL) return NULL;
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        int little = w[0] == 1;
        uint32_t kind = (uint32_t)(little ? le(w + 1, 4) : be(w + 1, 4)) | 0x20000000u;
        o[0] = w[0];
        for (int k = 0; k < 4; k++) {
            int shift = little ? 8 * k : 8 * (3 - k);
            o[1 + k] = (unsigned char)(kind >> shift);
            o[5 + k] = (unsigned char)(srid >> shift);
        }
        memcpy(o + 9, w + 5, (size_t)(wn - 5));
        return out;
    }
    case OP_JSON:
        if (read_prefixed(c, s->a, &p, &n) < 0) return NULL;
        return fj_text(p, n);
    case OP_CALL: {
        if (read_prefixed(c, s->a, &p, &n) < 0) return NULL;
        PyObject *raw = PyBytes_FromStringAndSize((const char *)p, n);
        if (raw == NULL) return NULL;
        PyObject *v = PyObject_CallOneArg(s->obj, raw);
        Py_DECREF(raw);
        return v;
    }
    case OP_BIT1: {
        if (need(c, s->a) < 0) return NULL;
        int any = 0;
        for (int i = 0; i < s->a; i++) any |= c->d[c->pos + i];
        c->pos += s->a;
        return PyBool_FromLong(any != 0);
    }
    case OP_BITS: {
        /* rjust(b, '\0')[-b:] of the a binlog bytes */
        if (need(c, s->a) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += s->a;
        PyObject *v = PyBytes_FromStringAndSize(NULL, s->b);
        if (v == NULL) return NULL;
        char *o = PyBytes_AS_STRING(v);
        if (s->a >= s->b)
            memcpy(o, p + (s->a - s->b), s->b);
        else {
            memset(o, 0, s->b - s->a);
            memcpy(o + (s->b - s->a), p, s->a);
        }
        return v;
    }
    case OP_DATE: {
        if (need(c, 3) < 0) return NULL;
        uint64_t v = le(c->d + c->pos, 3);
        c->pos += 3;
        int day = v & 31, month = (v >> 5) & 15, year = (int)(v >> 9);
        if (!(year && month && day) || month > 12 || year > 9999) Py_RETURN_NONE;
        return none_if_invalid(PyDate_FromDate(year, month, day));
    }
    case OP_TIME2: {
        int fsp = s->a;
        int64_t packed;
        if (fsp == 5 || fsp == 6) {
            if (need(c, 6) < 0) return NULL;
            packed = (int64_t)be(c->d + c->pos, 6) - 0x800000000000LL;
            c->pos += 6;
        } else {
            int n3 = fsp == 1 || fsp == 2 ? 4 : fsp == 3 || fsp == 4 ? 5 : 3;
            if (need(c, n3) < 0) return NULL;
            p = c->d + c->pos;
            int64_t intpart = (int64_t)be(p, 3) - 0x800000;
            int64_t frac = 0, full = 1, unit = 0;
            if (n3 == 4) {
                frac = p[3];
                full = 0x100;
                unit = 10000;
            } else if (n3 == 5) {
                frac = (int64_t)be(p + 3, 2);
                full = 0x10000;
                unit = 100;
            }
            c->pos += n3;
            if (intpart < 0 && frac) {
                intpart += 1; /* negative values store the fraction reversed, for sorting */
                frac -= full;
            }
            packed = intpart * (1LL << 24) + frac * unit;
        }
        int neg = packed < 0;
        int64_t a = neg ? -packed : packed;
        int64_t hms = a >> 24, micro = a & ((1LL << 24) - 1);
        int64_t us = ((((hms >> 12) % 1024) * 60 + ((hms >> 6) % 64)) * 60 + hms % 64)
                     * 1000000LL + micro;
        return delta_from_us(neg ? -us : us);
    }
    case OP_DATETIME2: {
        int nf = frac_bytes(s->a);
        if (need(c, 5 + nf) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += 5 + nf;
        int64_t v = (int64_t)be(p, 5) - 0x8000000000LL;
        int64_t ymd = v >> 17, hms = v & ((1 << 17) - 1);
        int64_t ym = ymd >> 5, day = ymd & 31;
        int64_t year = floordiv(ym, 13), month = ym - year * 13;
        int64_t micro = frac_us(p + 5, s->a, 1);
        if (!(year && month && day)) Py_RETURN_NONE;
        return make_datetime(year, month, day, hms >> 12, (hms >> 6) & 63, hms & 63, micro);
    }
    case OP_TIMESTAMP2: {
        int nf = frac_bytes(s->a);
        if (need(c, 4 + nf) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += 4 + nf;
        int64_t sec = (int64_t)be(p, 4), micro = frac_us(p + 4, s->a, 0);
        if (sec == 0 && micro == 0) Py_RETURN_NONE; /* the zero timestamp */
        return utc_from_us(sec * 1000000LL + micro);
    }
    case OP_TIME: {
        if (need(c, 3) < 0) return NULL;
        int64_t v = sign_extend(le(c->d + c->pos, 3), 3);
        c->pos += 3;
        int neg = v < 0;
        if (neg) v = -v;
        int64_t us = ((v / 10000) * 3600 + (v / 100 % 100) * 60 + v % 100) * 1000000LL;
        return delta_from_us(neg ? -us : us);
    }
    case OP_DATETIME: {
        if (need(c, 8) < 0) return NULL;
        uint64_t v = le(c->d + c->pos, 8);
        c->pos += 8;
        uint64_t date = v / 1000000, tod = v % 1000000;
        uint64_t year = date / 10000, md = date % 10000;
        uint64_t month = md / 100, day = md % 100;
        if (!(year && month && day) || year > 9999) Py_RETURN_NONE;
        return make_datetime((int64_t)year, (int64_t)month, (int64_t)day,
                             (int64_t)(tod / 10000), (int64_t)(tod / 100 % 100),
                             (int64_t)(tod % 100), 0);
    }
    case OP_TIMESTAMP: {
        if (need(c, 4) < 0) return NULL;
        int64_t sec = (int64_t)le(c->d + c->pos, 4);
        c->pos += 4;
        if (sec == 0) Py_RETURN_NONE;
        return utc_from_us(sec * 1000000LL);
    }
    }
    PyErr_Format(PyExc_ValueError, "unknown column op %d", s->op);
    return NULL;
}

/* -- images and events -------------------------------------------------------------------- */

/* Where a before image's JSON values lie (a PARTIAL_UPDATE_ROWS row's diffs apply to them):
 * per column, the value's bytes, or NULL for a NULL. */
typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} Span;

static int is_json(const ColSpec *s) { return s->op == OP_JSON || s->op == OP_CALL; }

/* One row image; ``spans`` (or NULL) gets where its JSON columns' stored values are. */
static PyObject *decode_image(PlanObject *plan, Cursor *c, Span *spans) {
    Py_ssize_t ncols = plan->ncols, nbits = (ncols + 7) / 8;
    if (need(c, nbits) < 0) return NULL;
    const unsigned char *nulls = c->d + c->pos;
    c->pos += nbits;
    PyObject *row = _PyDict_NewPresized(ncols);
    if (row == NULL) return NULL;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *v;
        ColSpec *s = &plan->cols[i];
        if (nulls[i >> 3] >> (i & 7) & 1) {
            v = Py_NewRef(Py_None);
            if (spans != NULL) spans[i].p = NULL;
        } else {
            if (spans != NULL && is_json(s)) {
                if (need(c, s->a) < 0) {
                    Py_DECREF(row);
                    return NULL;
                }
                spans[i].n = (Py_ssize_t)le(c->d + c->pos, s->a);
                spans[i].p = c->d + c->pos + s->a;
            }
            if ((v = decode_value(plan, s, c)) == NULL) {
                Py_DECREF(row);
                return NULL;
            }
        }
        int rc = PyDict_SetItem(row, PyTuple_GET_ITEM(plan->names, i), v);
        Py_DECREF(v);
        if (rc < 0) {
            Py_DECREF(row);
            return NULL;
        }
    }
    return row;
}

/* The after image of a PARTIAL_UPDATE_ROWS row whose JSON columns flagged in ``bits`` (one
 * bit per JSON column, in column order) hold diffs. An empty diff (what MySQL logs for a
 * JSON column the UPDATE left alone) is the before image's value; any other diff is applied
 * by the column's ``apply(before bytes | None, diff bytes, column)`` (an OP_JSON spec's obj;
 * the before value's bytes from ``spans``). Without one, returns Py_None without a
 * reference: the caller applies the whole event's diffs in Python. */
static PyObject *decode_partial_after(PlanObject *plan, Cursor *c, PyObject *before,
                                      const unsigned char *bits, const Span *spans) {
    Py_ssize_t ncols = plan->ncols, nbits = (ncols + 7) / 8, k = 0;
    if (need(c, nbits) < 0) return NULL;
    const unsigned char *nulls = c->d + c->pos;
    c->pos += nbits;
    PyObject *row = _PyDict_NewPresized(ncols);
    if (row == NULL) return NULL;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        ColSpec *s = &plan->cols[i];
        PyObject *v, *name = PyTuple_GET_ITEM(plan->names, i);
        int diff = 0;
        if (is_json(s)) {
            diff = bits != NULL && bits[k >> 3] >> (k & 7) & 1;
            k++;
        }
        if (nulls[i >> 3] >> (i & 7) & 1)
            v = Py_NewRef(Py_None);
        else if (diff) {
            const unsigned char *dp;
            Py_ssize_t dn;
            if (need(c, s->a) < 0) { Py_DECREF(row); return NULL; }
            if (le(c->d + c->pos, s->a) == 0) {  /* left alone: the before value */
                c->pos += s->a;
                v = PyDict_GetItemWithError(before, name);
                if (v == NULL) {
                    Py_DECREF(row);
                    if (!PyErr_Occurred()) return Py_None;
                    return NULL;
                }
                Py_INCREF(v);
            } else if (s->op != OP_JSON || s->obj == Py_None) {
                Py_DECREF(row);
                return Py_None;
            } else if (read_prefixed(c, s->a, &dp, &dn) < 0) {
                Py_DECREF(row);
                return NULL;
            } else {
                PyObject *was = spans[i].p == NULL ? Py_NewRef(Py_None) :
                    PyBytes_FromStringAndSize((const char *)spans[i].p, spans[i].n);
                PyObject *diffs = PyBytes_FromStringAndSize((const char *)dp, dn);
                v = was == NULL || diffs == NULL ? NULL :
                    PyObject_CallFunctionObjArgs(s->obj, was, diffs, name, NULL);
                Py_XDECREF(was);
                Py_XDECREF(diffs);
                if (v == NULL) {
                    Py_DECREF(row);
                    return NULL;
                }
            }
        } else if ((v = decode_value(plan, s, c)) == NULL) {
            Py_DECREF(row);
            return NULL;
        }
        int rc = PyDict_SetItem(row, name, v);
        Py_DECREF(v);
        if (rc < 0) {
            Py_DECREF(row);
            return NULL;
        }
    }
    return row;
}

/* The shared image of a PARTIAL_UPDATE_ROWS row, between its before and after images: a
 * packed value_options integer and, when its PARTIAL_JSON_UPDATES bit is set, one bit per
 * JSON column of the table (``njson``) saying that column's after value is a diff. Sets
 * ``*bits`` to those bits (NULL when none is set). Returns 0, or -1 on a malformed event. */
static int value_options(Cursor *c, Py_ssize_t njson, const unsigned char **bits) {
    *bits = NULL;
    if (need(c, 1) < 0) return -1;
    unsigned first = c->d[c->pos];
    uint64_t options;
    int n = first < 251 ? 0 : first == 252 ? 2 : first == 253 ? 3 : first == 254 ? 8 : -1;
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "bad length-encoded integer 0x%02x", first);
        return -1;
    }
    if (need(c, 1 + n) < 0) return -1;
    options = n == 0 ? first : le(c->d + c->pos + 1, n);
    c->pos += 1 + n;
    if (!(options & 1)) return 0;
    Py_ssize_t nb = (njson + 7) / 8;
    if (need(c, nb) < 0) return -1;
    for (Py_ssize_t i = 0; i < nb; i++)
        if (c->d[c->pos + i]) *bits = c->d + c->pos;
    c->pos += nb;
    return 0;
}

/* decode(plan, data, mode[, njson]) -> [(before, after), ...]; mode 0 insert, 1 delete,
 * 2 update, 3 a PARTIAL_UPDATE_ROWS event (updates whose after images follow their shared
 * image, see value_options; decode_partial_after applies the JSON diffs): None when a row
 * holds a JSON diff that its column's spec cannot apply (the caller then applies the
 * event's diffs in Python). */
static PyObject *fd_decode(PyObject *self, PyObject *args) {
    PlanObject *plan;
    Py_buffer buf;
    int mode;
    Py_ssize_t njson = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*i|n", &PlanType, &plan, &buf, &mode, &njson)) return NULL;
    Cursor c = {(const unsigned char *)buf.buf, 0, buf.len};
    Span *spans = NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto fail;
    if (mode == 3 && (spans = PyMem_Calloc(plan->ncols ? plan->ncols : 1, sizeof(Span))) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    while (c.pos < c.end) {
        PyObject *img = decode_image(plan, &c, spans), *pair;
        if (img == NULL) goto fail;
        if (mode == 3) {
            const unsigned char *bits;
            if (value_options(&c, njson, &bits) < 0) {
                Py_DECREF(img);
                goto fail;
            }
            PyObject *after = decode_partial_after(plan, &c, img, bits, spans);
            if (after == NULL || after == Py_None) {
                Py_DECREF(img);
                if (after == NULL) goto fail;
                Py_DECREF(out);  /* a JSON diff this plan cannot apply: the caller does */
                PyMem_Free(spans);
                PyBuffer_Release(&buf);
                Py_RETURN_NONE;
            }
            pair = PyTuple_Pack(2, img, after);
            Py_DECREF(after);
        } else if (mode == 2) {
            PyObject *after = decode_image(plan, &c, NULL);
            if (after == NULL) {
                Py_DECREF(img);
                goto fail;
            }
            pair = PyTuple_Pack(2, img, after);
            Py_DECREF(after);
        } else if (mode == 1)
            pair = PyTuple_Pack(2, img, Py_None);
        else
            pair = PyTuple_Pack(2, Py_None, img);
        Py_DECREF(img);
        if (pair == NULL) goto fail;
        int rc = PyList_Append(out, pair);
        Py_DECREF(pair);
        if (rc < 0) goto fail;
    }
    PyMem_Free(spans);
    PyBuffer_Release(&buf);
    return out;
fail:
    PyMem_Free(spans);
    if (PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_UnicodeError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_Format(PyExc_ValueError, "at byte %zd: %S", c.pos, value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

/* decode_event(plan, data, start, end, table_id_len, version, mode[, njson]) -> list | None
 *
 * A whole rows event in one call: its body is data[start:end] (after the 19-byte header,
 * without the checksum). Reads the post-header (table id, flags, v2 extra data), the column
 * count and the columns-present bitmap(s), then decodes the row images with the plan.
 * Returns None when the event does not carry every column of the plan in every image (the
 * caller then names the missing column), and for mode 3 (PARTIAL_UPDATE_ROWS, ``njson``
 * JSON columns) when a row holds a JSON diff (the caller applies it). */
static PyObject *fd_decode_event(PyObject *self, PyObject *args) {
    PlanObject *plan;
    Py_buffer buf;
    Py_ssize_t start, end, njson = 0;
    int tid_len, version, mode;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*nniii|n", &PlanType, &plan, &buf, &start, &end, &tid_len,
                          &version, &mode, &njson))
        return NULL;
    if (start < 0 || end > buf.len || start > end || tid_len < 1 || tid_len > 8) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "a rows event outside its buffer");
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)buf.buf;
    Py_ssize_t p = start + tid_len + 2, ncols = 0;
    int ok = 1;
    if (version == 2) {
        if (end - p < 2) ok = 0;
        else p += (Py_ssize_t)le(d + p, 2);
    }
    if (ok && p < end) {
        unsigned c = d[p];
        if (c < 251) { ncols = c; p += 1; }
        else if (c == 252 && end - p >= 3) { ncols = (Py_ssize_t)le(d + p + 1, 2); p += 3; }
        else if (c == 253 && end - p >= 4) { ncols = (Py_ssize_t)le(d + p + 1, 3); p += 4; }
        else ok = 0;
    } else
        ok = 0;
    Py_ssize_t nb = (ncols + 7) / 8;
    if (ok && ncols != plan->ncols) ok = 0;
    for (int img = 0; ok && img < (mode >= 2 ? 2 : 1); img++) {
        if (end - p < nb) { ok = 0; break; }
        for (Py_ssize_t i = 0; i < ncols; i++)
            if (!(d[p + (i >> 3)] >> (i & 7) & 1)) { ok = 0; break; }
        p += nb;
    }
    if (!ok) {
        PyBuffer_Release(&buf);
        Py_RETURN_NONE;
    }
    PyObject *rest = PyMemoryView_FromMemory((char *)d + p, end - p, PyBUF_READ);
    PyObject *out = NULL;
    if (rest != NULL) {
        PyObject *a = Py_BuildValue("(OOin)", (PyObject *)plan, rest, mode, njson);
        if (a != NULL) {
            out = fd_decode(NULL, a);
            Py_DECREF(a);
        }
        Py_DECREF(rest);
    }
    PyBuffer_Release(&buf);
    return out;
}

/* -- the replication stream: packets to events ------------------------------------------- */

/* split_events(buf, pos, seq) -> (events, pos, seq, status)
 *
 * Walks the MySQL packets of ``buf`` from ``pos`` while they are whole binlog events (an OK
 * byte, then the event) of less than 16 MB with the expected sequence number. Each event is
 * (timestamp, type, server_id, event_size, log_pos, flags, start, end) with its bytes at
 * buf[start:end]. status 0: the packet at ``pos`` is not complete yet (read more); 2: the
 * packet at ``pos`` is one the caller handles itself (an error, the EOF of a non-blocking
 * dump, an event of 16 MB or more, a wrong sequence number, a malformed packet). */
static PyObject *fd_split_events(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos;
    int seq, status = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ni", &buf, &pos, &seq)) return NULL;
    const unsigned char *d = (const unsigned char *)buf.buf;
    Py_ssize_t len = buf.len;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto fail;
    if (pos < 0 || pos > len) {
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        goto fail;
    }
    for (;;) {
        if (len - pos < 4) break;
        Py_ssize_t n = (Py_ssize_t)le(d + pos, 3);
        if (d[pos + 3] != (unsigned char)seq || n >= 0xFFFFFF) {
            status = 2;
            break;
        }
        if (len - pos - 4 < n) break;
        const unsigned char *e = d + pos + 4;
        if (n < 20 || e[0] != 0) {
            status = 2;
            break;
        }
        uint64_t size = le(e + 10, 4);
        if (size != (uint64_t)(n - 1)) {
            status = 2;
            break;
        }
        PyObject *ev = Py_BuildValue("(kikkkinn)", (unsigned long)le(e + 1, 4), (int)e[5],
                                     (unsigned long)le(e + 6, 4), (unsigned long)size,
                                     (unsigned long)le(e + 14, 4), (int)le(e + 18, 2),
                                     pos + 5, pos + 4 + n);
        if (ev == NULL) goto fail;
        int rc = PyList_Append(out, ev);
        Py_DECREF(ev);
        if (rc < 0) goto fail;
        seq = (seq + 1) & 0xFF;
        pos += 4 + n;
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("(Nnii)", out, pos, seq, status);
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

/* -- the plan type ------------------------------------------------------------------------ */

static void plan_dealloc(PlanObject *self) {
    PyMem_Free(self->cols);
    Py_XDECREF(self->names);
    Py_XDECREF(self->specs);
    Py_XDECREF(self->decimal);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Plan(names: tuple[str], specs: tuple[(op, a, b, c, obj)], decimal_type) */
static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *names, *specs, *decimal;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyTuple_Type, &names, &PyTuple_Type, &specs, &decimal))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(specs) != n) {
        PyErr_SetString(PyExc_ValueError, "one spec per name");
        return NULL;
    }
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->ncols = n;
    self->names = Py_NewRef(names);
    self->specs = Py_NewRef(specs);
    self->decimal = Py_NewRef(decimal);
    self->cols = PyMem_Calloc(n ? n : 1, sizeof(ColSpec));
    if (self->cols == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        ColSpec *s = &self->cols[i];
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i)) ||
            !PyArg_ParseTuple(PyTuple_GET_ITEM(specs, i), "iiiiO", &s->op, &s->a, &s->b, &s->c,
                              &s->obj)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "names must be str");
            Py_DECREF(self);
            return NULL;
        }
        int lenbytes = s->op == OP_TEXT || s->op == OP_BYTES || s->op == OP_GEOMETRY ||
                       s->op == OP_CALL || s->op == OP_JSON;
        if (s->op < OP_INT || s->op > OP_JSON ||
            (lenbytes && (s->a < 1 || s->a > 4)) ||
            ((s->op == OP_INT) && !(s->a == 1 || s->a == 2 || s->a == 3 || s->a == 4 || s->a == 8)) ||
            ((s->op == OP_UINT) && (s->a < 1 || s->a > 4)) ||
            ((s->op == OP_ENUM) && (s->a < 1 || s->a > 2 || !PyTuple_Check(s->obj))) ||
            ((s->op == OP_SET) && (s->a < 1 || s->a > 8 || !PyTuple_Check(s->obj))) ||
            ((s->op == OP_BIT1 || s->op == OP_BITS) && (s->a < 1 || s->a > 8 || s->b < 0 || s->b > 8)) ||
            ((s->op == OP_DECIMAL) && (s->a < 1 || s->a > 65 || s->b < 0 || s->b > 38 || s->b > s->a)) ||
            ((s->op == OP_TIME2 || s->op == OP_DATETIME2 || s->op == OP_TIMESTAMP2) &&
             (s->a < 0 || s->a > 6)) ||
            ((s->op == OP_TEXT) && s->b == 1 && !PyUnicode_Check(s->obj)) ||
            (((s->op == OP_TEXT && s->b == 2) || s->op == OP_CALL) && !PyCallable_Check(s->obj)) ||
            (s->op == OP_JSON && s->obj != Py_None && !PyCallable_Check(s->obj))) {
            PyErr_Format(PyExc_ValueError, "bad spec for column %zd", i);
            Py_DECREF(self);
            return NULL;
        }
        if (s->op == OP_TEXT && s->b == 1) {
            s->encoding = PyUnicode_AsUTF8(s->obj);
            if (s->encoding == NULL) {
                Py_DECREF(self);
                return NULL;
            }
        }
        if (s->op == OP_SET)
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(s->obj); k++)
                if (!PyUnicode_Check(PyTuple_GET_ITEM(s->obj, k))) {
                    PyErr_SetString(PyExc_TypeError, "SET members must be str");
                    Py_DECREF(self);
                    return NULL;
                }
    }
    return (PyObject *)self;
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sparkcdc.mysql._fastdecode.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled per-table decode plan.",
    .tp_new = plan_new,
};

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))fd_decode, METH_VARARGS,
     "decode(plan, data, mode) -> list of (before, after); mode 0 insert, 1 delete, 2 update"},
    {"decode_event", (PyCFunction)(void (*)(void))fd_decode_event, METH_VARARGS,
     "decode_event(plan, data, start, end, table_id_len, version, mode) -> list of "
     "(before, after), or None when a columns-present bitmap lacks a column"},
    {"split_events", (PyCFunction)(void (*)(void))fd_split_events, METH_VARARGS,
     "split_events(buf, pos, seq) -> (events, pos, seq, status): the whole binlog events "
     "of a replication stream's bytes"},
    {"json_text", (PyCFunction)fj_py_text, METH_O,
     "json_text(stored JSON bytes) -> str: MySQL's text (json_binary.to_text)"},
    {"json_tree", (PyCFunction)fj_py_tree, METH_O,
     "json_tree(stored JSON bytes) -> dict | list | str (json_binary.parse)"},
    {"json_render", (PyCFunction)fj_py_render, METH_O,
     "json_render(tree) -> str (json_binary.render)"},
    {"payload_header", (PyCFunction)(void (*)(void))fp_payload_header, METH_VARARGS,
     "payload_header(data, start, end) -> (compression, size, uncompressed | None, payload "
     "start) of a TRANSACTION_PAYLOAD body (transaction_payload.read_header)"},
    {"payload_events", (PyCFunction)(void (*)(void))fp_payload_events, METH_VARARGS,
     "payload_events(events, size, log_pos, csum) -> (data, events) "
     "(transaction_payload.inner_events, after decompression)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_fastdecode", .m_size = -1,
                                    .m_methods = methods};

PyMODINIT_FUNC PyInit__fastdecode(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return NULL;
    if (PyType_Ready(&PlanType) < 0) return NULL;
    empty_str = PyUnicode_FromString("");
    empty_bytes = PyBytes_FromStringAndSize("", 0);
    comma = PyUnicode_FromString(",");
    if (!empty_str || !empty_bytes || !comma || fj_init() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0 ||
        /* decode/decode_event take mode 3 (PARTIAL_UPDATE_ROWS) */
        PyModule_AddIntConstant(m, "PARTIAL_UPDATES", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
