/* _faststream.c: the stream's events (packets split, GTID and BEGIN folded, CRC32), for the
 * module (_fastdecode.c) and the event loop (_fastloop.c). */
#ifndef SPARKCDC_FASTSTREAM_H
#define SPARKCDC_FASTSTREAM_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stdint.h>

/* split_events' events: where each is in the batch's bytes (at[2i], at[2i + 1]) */
typedef struct {
    PyObject_HEAD
    PyObject *data;
    Py_buffer buf;
    Py_ssize_t n, *at;
} EventListObject;

extern PyTypeObject FS_EventListType;
PyObject *fs_event_tuple(EventListObject *l, Py_ssize_t i); /* the i-th as an 8-tuple */
PyObject *fs_py_split_events(PyObject *self, PyObject *args);  /* split_events(...) */
PyObject *fs_py_fold_begins(PyObject *self, PyObject *args);   /* fold_begins(...) */
/* Whether the QUERY event at d[start:end] (``csum`` checksum bytes, a ``qpost``-byte QUERY
 * post-header) has the statement ``BEGIN``, exactly as servers write it. */
int fs_is_begin(const unsigned char *d, Py_ssize_t len, Py_ssize_t start, Py_ssize_t end,
                Py_ssize_t csum, Py_ssize_t qpost);
uint32_t fs_crc32(const unsigned char *p, Py_ssize_t n);
/* Whether the event at d[start:end] does not match the CRC32 in its last 4 bytes. */
int fs_crc_bad(const unsigned char *d, Py_ssize_t start, Py_ssize_t end);
int fs_init(void);

#endif
