/* _fastpayload.c: a TRANSACTION_PAYLOAD's header and events, for the module (_fastdecode.c)
 * and the event loop (_fastloop.c). */
#ifndef SPARKCDC_FASTPAYLOAD_H
#define SPARKCDC_FASTPAYLOAD_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stdint.h>

#define FP_ZSTD 0    /* transaction_payload.ZSTD */
#define FP_NONE 255  /* transaction_payload.NONE */
#define FP_IN_PAYLOAD (1 << 16) /* transaction_payload.IN_PAYLOAD */

typedef struct {
    uint64_t compression, size, uncompressed;
    int have_uncompressed;
    Py_ssize_t p; /* where the payload starts */
} PayloadHeader;

int fp_header(const unsigned char *d, Py_ssize_t start, Py_ssize_t end, PayloadHeader *h);
Py_ssize_t fp_count_events(const unsigned char *d, Py_ssize_t end);
PyObject *fp_inner_events(PyObject *src, unsigned long long size, unsigned long long log_pos,
                          int csum);
PyObject *fp_payload_header(PyObject *self, PyObject *args);
PyObject *fp_payload_events(PyObject *self, PyObject *args);

/* libzstd, the system's (dlopen'd at the first call; Debian's dpkg itself needs it): 1 when
 * it is there, 0 when zstd stays with the zstandard package. */
int fp_zstd_ready(void);
/* The zstd frame(s) ``src[0:n]`` decompressed into a new bytes object of exactly ``size``
 * bytes, with the decompression context ``*ctx`` (made at its first use, kept by the caller
 * for the next payload, freed with fp_zstd_free); NULL with ValueError when they are not
 * that, or libzstd is not there. */
PyObject *fp_unzstd(void **ctx, const unsigned char *src, Py_ssize_t n, uint64_t size);
void fp_zstd_free(void *ctx);
/* The compressed part ``d[p:end]`` of a MariaDB compressed event (protocol.events
 * .mariadb_inflate has the format) inflated by the system's zlib: 1 with ``*out`` (to
 * PyMem_Free) of ``*n`` bytes; 0 when it cannot be inflated here exactly (malformed,
 * corrupt, no libz): Python's mariadb_inflate then says what is wrong; -1 with MemoryError. */
int fp_inflate_mariadb(const unsigned char *d, Py_ssize_t p, Py_ssize_t end, unsigned char **out,
                       Py_ssize_t *n);
PyObject *fp_py_zstd_ready(PyObject *self, PyObject *unused); /* zstd_in_c() -> bool */
PyObject *fp_py_unzstd(PyObject *self, PyObject *args);   /* unzstd(data, size) -> bytes */

#endif
