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

/* 2 or 4 bytes, little-endian: a binary JSON container's offsets and counts, whose width
 * is known only at run time (the loop in fd_le is not unrolled then) */
static inline uint64_t fd_le24(const unsigned char *p, int wide) {
    uint64_t v = (uint64_t)p[0] | (uint64_t)p[1] << 8;
    if (wide) v |= (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
    return v;
}

static inline uint64_t fd_be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* "00" "01" ... "99": two digits per division */
static const char FD_PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* ``v`` in decimal at ``o`` (24 bytes of room): at least ``width`` digits, zeros first, as
 * snprintf's "%0*llu" without its format parse (DECIMALs, JSON numbers, GTID set texts),
 * written in place from the last digit, two at a time; how many bytes it wrote. */
static inline int fd_put_digits(char *o, uint64_t v, int width) {
    int n = 1;
    for (uint64_t t = v; t >= 10; t /= 10) n++;
    int total = n < width ? width : n;
    char *w = o + total;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        w -= 2;
        w[0] = FD_PAIRS[2 * r];
        w[1] = FD_PAIRS[2 * r + 1];
    }
    if (v >= 10) {
        w -= 2;
        w[0] = FD_PAIRS[2 * v];
        w[1] = FD_PAIRS[2 * v + 1];
    } else
        *--w = (char)('0' + v);
    while (w > o) *--w = '0';
    return total;
}

/* MySQL's binary DECIMAL (``precision``, ``scale``, ``size`` bytes at ``src``) as text:
 * the scale's digits after the point, '-' unless the value is zero. */
PyObject *fd_decimal_text(const unsigned char *src, int precision, int scale);
/* the same text into ``out`` (FD_DECIMAL_CHARS bytes): its length, or -1 with ValueError */
#define FD_DECIMAL_CHARS 640
int fd_decimal_chars(const unsigned char *src, int precision, int scale, char *out);
int fd_decimal_size(int precision, int scale);

#endif
