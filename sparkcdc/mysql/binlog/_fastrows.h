/* _fastrows.c: a rows event's images walked with a table's compiled plan, and the plan type,
 * for the module (_fastdecode.c) and the event loop (_fastloop.c). */
#ifndef SPARKCDC_FASTROWS_H
#define SPARKCDC_FASTROWS_H
#include "_fastcols.h"

extern PyTypeObject FR_PlanType; /* _fastdecode.Plan */

/* The rows of the event whose body (after the 19-byte header, without the checksum) is
 * d[start:end]: a list of (before, after), or Py_None when a column is missing or a JSON
 * diff is left to the caller; NULL with ValueError when the bytes are malformed. */
PyObject *fr_decode_event(PlanObject *plan, const unsigned char *d, Py_ssize_t len,
                          Py_ssize_t start, Py_ssize_t end, int tid_len, int version, int mode,
                          Py_ssize_t njson);
/* The same for a MariaDB compressed rows event (log_bin_compress): its images are the bytes
 * after its bitmaps inflated by the system's zlib (fp_inflate_mariadb), or, when they cannot
 * be there, ``inflate(view, p, end)`` (protocol.events.mariadb_inflate), which says why. */
PyObject *fr_decode_compressed_event(PlanObject *plan, const unsigned char *d, Py_ssize_t len,
                                     Py_ssize_t start, Py_ssize_t end, int tid_len, int version,
                                     int mode, PyObject *inflate);
PyObject *fr_py_decode(PyObject *self, PyObject *args);        /* decode(...) */
PyObject *fr_py_decode_event(PyObject *self, PyObject *args);  /* decode_event(...) */

#endif
