/* What the compiled decoder's C files share (one extension, sparkcdc.mysql.binlog._fastdecode;
 * _fastdecode.c lists its files): reading integers and MySQL's binary DECIMAL
 * (_fastvalues.c), below every other file. */
#ifndef SPARKCDC_FASTVALUES_H
#define SPARKCDC_FASTVALUES_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t fd_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint64_t fd_be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* ``v`` in decimal at ``o`` (24 bytes of room): at least ``width`` digits, zeros first, as
 * snprintf's "%0*llu" without its format parse (DECIMALs, JSON numbers, GTID set texts);
 * how many bytes it wrote. */
static inline int fd_put_digits(char *o, uint64_t v, int width) {
    char t[24];
    int i = 24;
    do {
        t[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    int n = 24 - i, pad = width > n ? width - n : 0;
    memset(o, '0', (size_t)pad);
    memcpy(o + pad, t + i, (size_t)n);
    return pad + n;
}

/* MySQL's binary DECIMAL (``precision``, ``scale``, ``size`` bytes at ``src``) as text:
 * the scale's digits after the point, '-' unless the value is zero. */
PyObject *fd_decimal_text(const unsigned char *src, int precision, int scale);
/* the same text into ``out`` (FD_DECIMAL_CHARS bytes): its length, or -1 with ValueError */
#define FD_DECIMAL_CHARS 640
int fd_decimal_chars(const unsigned char *src, int precision, int scale, char *out);
int fd_decimal_size(int precision, int scale);

#endif
