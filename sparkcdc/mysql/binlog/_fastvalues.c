/* Values both the row decoder (_fastdecode.c) and binary JSON (_fastjson.c) read the same
 * way: MySQL's binary DECIMAL, as text. Apart from both so that each uses it and neither
 * reaches into the other. */
#include "_fastvalues.h"

#include <string.h>

/* -- DECIMAL ------------------------------------------------------------------------------ */

static const int dig2bytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

int fd_decimal_size(int precision, int scale) {
    int intg = precision - scale;
    return intg / 9 * 4 + dig2bytes[intg % 9] + scale / 9 * 4 + dig2bytes[scale % 9];
}

/* MySQL's binary DECIMAL as plain text into ``out`` (FD_DECIMAL_CHARS bytes at least),
 * exactly as PyRowDecoder (and, in JSON, json_binary) writes it; a precision of at most 255
 * (a JSON DECIMAL's byte). Its length, or -1 with ValueError. */
int fd_decimal_chars(const unsigned char *src, int precision, int scale, char *out) {
    int intg = precision - scale;
    int intg0 = intg / 9, intg0x = intg % 9, frac0 = scale / 9, frac0x = scale % 9;
    int size = fd_decimal_size(precision, scale);
    unsigned char b[128];
    if (size > (int)sizeof(b) || size < 1 || intg < 0 || scale < 0 || precision > 255) {
        PyErr_SetString(PyExc_ValueError, "DECIMAL too wide");
        return -1;
    }
    memcpy(b, src, size);
    int negative = !(b[0] & 0x80);
    b[0] ^= 0x80;
    if (negative)
        for (int i = 0; i < size; i++) b[i] ^= 0xFF;
    /* written in place after the sign's place (when negative): the integer part from its
     * first group that is not zero, then the scale's digits; a negative zero (every group
     * zero) drops its sign at the end */
    char *w = out + negative;
    uint64_t any = 0;
    int i = 0, started = 0, lead = dig2bytes[intg0x], tail = dig2bytes[frac0x];
    if (lead) {
        uint64_t g = fd_be(b, lead);
        any |= g;
        if (g) {
            w += fd_put_digits(w, g, 0);
            started = 1;
        }
        i = lead;
    }
    for (int k = 0; k < intg0; k++, i += 4) {
        uint64_t g = fd_be(b + i, 4);
        any |= g;
        if (started)
            w += fd_put_digits(w, g, 9);
        else if (g) {
            w += fd_put_digits(w, g, 0);
            started = 1;
        }
    }
    if (!started) *w++ = '0';
    if (scale) {
        *w++ = '.';
        for (int k = 0; k < frac0; k++, i += 4) {
            uint64_t g = fd_be(b + i, 4);
            any |= g;
            w += fd_put_digits(w, g, 9);
        }
        if (tail) {
            uint64_t g = fd_be(b + i, tail);
            any |= g;
            w += fd_put_digits(w, g, frac0x);
        }
    }
    int ol = (int)(w - out);
    if (!negative) return ol;
    if (any) {
        out[0] = '-';
        return ol;
    }
    memmove(out, out + 1, ol - 1);
    return ol - 1;
}

PyObject *fd_decimal_text(const unsigned char *src, int precision, int scale) {
    char out[FD_DECIMAL_CHARS];
    int n = fd_decimal_chars(src, precision, scale, out);
    return n < 0 ? NULL : PyUnicode_FromStringAndSize(out, n);
}
