/* Values both the row decoder (_fastdecode.c) and binary JSON (_fastjson.c) read the same
 * way: MySQL's binary DECIMAL, as text. Apart from both so that each uses it and neither
 * reaches into the other. */
#include "_fastvalues.h"

#include <stdio.h>
#include <string.h>

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
                       (unsigned long long)fd_be(b, lead));
        i = lead;
    }
    for (int k = 0; k < intg0; k++, i += 4)
        wl += snprintf(whole + wl, sizeof(whole) - wl, "%09llu",
                       (unsigned long long)fd_be(b + i, 4));
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
                           (unsigned long long)fd_be(b + i, 4));
        if (tail)
            ol += snprintf(out + ol, sizeof(out) - ol, "%0*llu", frac0x,
                           (unsigned long long)fd_be(b + i, tail));
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
