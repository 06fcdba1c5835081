/* _fastdouble.c: a double's shortest round-trip digits, fast when it can prove them. */
#ifndef SPARKCDC_FASTDOUBLE_H
#define SPARKCDC_FASTDOUBLE_H
#include <stdint.h>

/* The shortest digits of |x| that read back as x (no sign, no zeros at either end) into
 * ``digits`` (18 bytes), their count in ``n`` and the decimal point's place in ``decpt``
 * (|x| = 0.<digits> * 10**decpt): 1, or 0 when they could not be proved here (zero, not
 * finite, or Grisu3's rare undecided case): the caller's exact dtoa then. */
int fdd_shortest(double x, char *digits, int *n, int *decpt);

#endif
