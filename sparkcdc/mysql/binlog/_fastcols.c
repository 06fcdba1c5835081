/* One column's value of a row image decoded in C into its canonical Python value, the same
 * value PyRowDecoder's field decoders build (sparkcdc.mysql.types); the column's spec (an op
 * code and its arguments, see _fastcols.h) was compiled once per table by fastdecode.py.
 * Every read is bounds-checked: a truncated value raises ValueError. */
#include "_fastcols.h"
#include "_fastjson.h"
#include "_fastvalues.h"

#include <datetime.h>
#include <stdint.h>
#include <string.h>

static PyObject *empty_str, *empty_bytes, *comma;

int fc_need(Cursor *c, Py_ssize_t n) {
    if (n < 0 || c->end - c->pos < n) {
        PyErr_Format(PyExc_ValueError, "the event ends inside a value (need %zd bytes at %zd)",
                     n, c->pos);
        return -1;
    }
    return 0;
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
int fc_read_prefixed(Cursor *c, int nbytes, const unsigned char **p, Py_ssize_t *n) {
    if (fc_need(c, nbytes) < 0) return -1;
    uint64_t len = fd_le(c->d + c->pos, nbytes);
    c->pos += nbytes;
    if (len > (uint64_t)PY_SSIZE_T_MAX || fc_need(c, (Py_ssize_t)len) < 0) {
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
    uint64_t v = fd_be(p, n);
    int64_t x = is_signed ? sign_extend(v, n) : (int64_t)v;
    return n == 1 ? x * 10000 : n == 2 ? x * 100 : x;
}

/* -- one value ---------------------------------------------------------------------------- */

PyObject *fc_value(PlanObject *plan, ColSpec *s, Cursor *c) {
    const unsigned char *p;
    Py_ssize_t n;
    switch (s->op) {
    case OP_INT:
        if (fc_need(c, s->a) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += s->a;
        return PyLong_FromLongLong(sign_extend(fd_le(p, s->a), s->a));
    case OP_UINT:
        if (fc_need(c, s->a) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += s->a;
        return PyLong_FromUnsignedLongLong(fd_le(p, s->a));
    case OP_UINT64: {
        if (fc_need(c, 8) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += 8;
        PyObject *i = PyLong_FromUnsignedLongLong(fd_le(p, 8));
        if (i == NULL) return NULL;
        PyObject *v = PyObject_CallOneArg(plan->decimal, i);
        Py_DECREF(i);
        return v;
    }
    case OP_FLOAT: {
        float f;
        if (fc_need(c, 4) < 0) return NULL;
        memcpy(&f, c->d + c->pos, 4);
        c->pos += 4;
        return PyFloat_FromDouble((double)f);
    }
    case OP_DOUBLE: {
        double f;
        if (fc_need(c, 8) < 0) return NULL;
        memcpy(&f, c->d + c->pos, 8);
        c->pos += 8;
        return PyFloat_FromDouble(f);
    }
    case OP_YEAR: {
        if (fc_need(c, 1) < 0) return NULL;
        int v = c->d[c->pos++];
        return PyLong_FromLong(v ? 1900 + v : 0);
    }
    case OP_DECIMAL: {
        int size = fd_decimal_size(s->a, s->b);
        if (fc_need(c, size) < 0) return NULL;
        PyObject *text = fd_decimal_text(c->d + c->pos, s->a, s->b);
        c->pos += size;
        if (text == NULL || s->c) return text;
        PyObject *v = PyObject_CallOneArg(plan->decimal, text);
        Py_DECREF(text);
        return v;
    }
    case OP_TEXT:
        if (fc_read_prefixed(c, s->a, &p, &n) < 0) return NULL;
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
        if (fc_read_prefixed(c, s->a, &p, &n) < 0) return NULL;
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
        if (fc_need(c, s->a) < 0) return NULL;
        Py_ssize_t i = (Py_ssize_t)fd_le(c->d + c->pos, s->a);
        c->pos += s->a;
        if (i > 0 && i <= PyTuple_GET_SIZE(s->obj))
            return Py_NewRef(PyTuple_GET_ITEM(s->obj, i - 1));
        return Py_NewRef(empty_str);
    }
    case OP_SET: {
        if (fc_need(c, s->a) < 0) return NULL;
        uint64_t mask = fd_le(c->d + c->pos, s->a);
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
        if (fc_read_prefixed(c, s->a, &p, &n) < 0) return NULL;
        if (n <= 4) return Py_NewRef(empty_bytes);
        uint32_t srid = (uint32_t)fd_le(p, 4);
        const unsigned char *w = p + 4;
        Py_ssize_t wn = n - 4;
        if (srid == 0 || wn < 5 || (w[0] != 0 && w[0] != 1))
            return PyBytes_FromStringAndSize((const char *)w, wn);
        PyObject *out = PyBytes_FromStringAndSize(NULL, wn + 4);
        if (out == NULL) return NULL;
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        int little = w[0] == 1;
        uint32_t kind = (uint32_t)(little ? fd_le(w + 1, 4) : fd_be(w + 1, 4)) | 0x20000000u;
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
        if (fc_read_prefixed(c, s->a, &p, &n) < 0) return NULL;
        return fj_text(p, n);
    case OP_CALL: {
        if (fc_read_prefixed(c, s->a, &p, &n) < 0) return NULL;
        PyObject *raw = PyBytes_FromStringAndSize((const char *)p, n);
        if (raw == NULL) return NULL;
        PyObject *v = PyObject_CallOneArg(s->obj, raw);
        Py_DECREF(raw);
        return v;
    }
    case OP_BIT1: {
        if (fc_need(c, s->a) < 0) return NULL;
        int any = 0;
        for (int i = 0; i < s->a; i++) any |= c->d[c->pos + i];
        c->pos += s->a;
        return PyBool_FromLong(any != 0);
    }
    case OP_BITS: {
        /* rjust(b, '\0')[-b:] of the a binlog bytes */
        if (fc_need(c, s->a) < 0) return NULL;
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
        if (fc_need(c, 3) < 0) return NULL;
        uint64_t v = fd_le(c->d + c->pos, 3);
        c->pos += 3;
        int day = v & 31, month = (v >> 5) & 15, year = (int)(v >> 9);
        if (!(year && month && day) || month > 12 || year > 9999) Py_RETURN_NONE;
        return none_if_invalid(PyDate_FromDate(year, month, day));
    }
    case OP_TIME2: {
        int fsp = s->a;
        int64_t packed;
        if (fsp == 5 || fsp == 6) {
            if (fc_need(c, 6) < 0) return NULL;
            packed = (int64_t)fd_be(c->d + c->pos, 6) - 0x800000000000LL;
            c->pos += 6;
        } else {
            int n3 = fsp == 1 || fsp == 2 ? 4 : fsp == 3 || fsp == 4 ? 5 : 3;
            if (fc_need(c, n3) < 0) return NULL;
            p = c->d + c->pos;
            int64_t intpart = (int64_t)fd_be(p, 3) - 0x800000;
            int64_t frac = 0, full = 1, unit = 0;
            if (n3 == 4) {
                frac = p[3];
                full = 0x100;
                unit = 10000;
            } else if (n3 == 5) {
                frac = (int64_t)fd_be(p + 3, 2);
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
        if (fc_need(c, 5 + nf) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += 5 + nf;
        int64_t v = (int64_t)fd_be(p, 5) - 0x8000000000LL;
        int64_t ymd = v >> 17, hms = v & ((1 << 17) - 1);
        int64_t ym = ymd >> 5, day = ymd & 31;
        int64_t year = floordiv(ym, 13), month = ym - year * 13;
        int64_t micro = frac_us(p + 5, s->a, 1);
        if (!(year && month && day)) Py_RETURN_NONE;
        return make_datetime(year, month, day, hms >> 12, (hms >> 6) & 63, hms & 63, micro);
    }
    case OP_TIMESTAMP2: {
        int nf = frac_bytes(s->a);
        if (fc_need(c, 4 + nf) < 0) return NULL;
        p = c->d + c->pos;
        c->pos += 4 + nf;
        int64_t sec = (int64_t)fd_be(p, 4), micro = frac_us(p + 4, s->a, 0);
        if (sec == 0 && micro == 0) Py_RETURN_NONE; /* the zero timestamp */
        return utc_from_us(sec * 1000000LL + micro);
    }
    case OP_TIME: {
        if (fc_need(c, 3) < 0) return NULL;
        int64_t v = sign_extend(fd_le(c->d + c->pos, 3), 3);
        c->pos += 3;
        int neg = v < 0;
        if (neg) v = -v;
        int64_t us = ((v / 10000) * 3600 + (v / 100 % 100) * 60 + v % 100) * 1000000LL;
        return delta_from_us(neg ? -us : us);
    }
    case OP_DATETIME: {
        if (fc_need(c, 8) < 0) return NULL;
        uint64_t v = fd_le(c->d + c->pos, 8);
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
        if (fc_need(c, 4) < 0) return NULL;
        int64_t sec = (int64_t)fd_le(c->d + c->pos, 4);
        c->pos += 4;
        if (sec == 0) Py_RETURN_NONE;
        return utc_from_us(sec * 1000000LL);
    }
    }
    PyErr_Format(PyExc_ValueError, "unknown column op %d", s->op);
    return NULL;
}

/* Past one non-NULL value of ``s`` without making it: exactly the bytes fc_value reads. For
 * an image of which only some columns are wanted (an update's before image when the reader
 * drops update preimages: its key columns). */
int fc_skip(ColSpec *s, Cursor *c) {
    const unsigned char *p;
    Py_ssize_t n;
    int size;
    switch (s->op) {
    case OP_INT: case OP_UINT: case OP_ENUM: case OP_SET: case OP_BIT1: case OP_BITS:
        size = s->a;
        break;
    case OP_UINT64: case OP_DOUBLE: case OP_DATETIME:
        size = 8;
        break;
    case OP_FLOAT: case OP_TIMESTAMP:
        size = 4;
        break;
    case OP_YEAR:
        size = 1;
        break;
    case OP_DATE: case OP_TIME:
        size = 3;
        break;
    case OP_DECIMAL:
        size = fd_decimal_size(s->a, s->b);
        break;
    case OP_TIME2:
        size = s->a == 5 || s->a == 6 ? 6 : s->a == 1 || s->a == 2 ? 4 : s->a == 3 || s->a == 4 ? 5 : 3;
        break;
    case OP_DATETIME2:
        size = 5 + frac_bytes(s->a);
        break;
    case OP_TIMESTAMP2:
        size = 4 + frac_bytes(s->a);
        break;
    case OP_TEXT: case OP_BYTES: case OP_GEOMETRY: case OP_JSON: case OP_CALL:
        return fc_read_prefixed(c, s->a, &p, &n);
    default:
        PyErr_Format(PyExc_ValueError, "unknown column op %d", s->op);
        return -1;
    }
    if (fc_need(c, size) < 0) return -1;
    c->pos += size;
    return 0;
}

int fc_init(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return -1;
    empty_str = PyUnicode_FromString("");
    empty_bytes = PyBytes_FromStringAndSize("", 0);
    comma = PyUnicode_FromString(",");
    return empty_str && empty_bytes && comma ? 0 : -1;
}
