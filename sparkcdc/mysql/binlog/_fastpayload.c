/* MySQL 8's TRANSACTION_PAYLOAD event opened in C: its header read, its zstd frame
 * decompressed by the system's libzstd when it is there (fp_unzstd; the zstandard package's
 * otherwise, called from Python), and its uncompressed events split into the dump stream's
 * event form. The reference is transaction_payload.py (its docstring has the format);
 * tests/mysql/binlog/test_transaction_payload.py runs both. Malformed bytes raise ValueError
 * with transaction_payload's messages. */
#include "_fastpayload.h"
#include "_fastvalues.h"

#include <string.h>
#if defined(__linux__)
#include <dlfcn.h>
#endif


#define TRANSACTION_PAYLOAD 40

/* A length-encoded integer at *p (protocol._packed_int); 1 when the header ends first. */
static int packed(const unsigned char *d, Py_ssize_t end, Py_ssize_t *p, uint64_t *v) {
    if (*p >= end) return 1;
    unsigned c = d[*p];
    int n = c < 251 ? 0 : c == 252 ? 2 : c == 253 ? 3 : c == 254 ? 8 : -1;
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "bad length-encoded integer 0x%02x in a binlog event", c);
        return -1;
    }
    if (end - *p - 1 < n) return 1;
    *v = n == 0 ? c : fd_le(d + *p + 1, n);
    *p += 1 + n;
    return 0;
}

/* The header of a payload event whose body is d[start:end] (transaction_payload
 * .read_header): 0 with its fields (``*p`` where the payload starts, ``*have_uncompressed``
 * whether the header gives its uncompressed size), or -1 with ValueError. */
int fp_header(const unsigned char *d, Py_ssize_t start, Py_ssize_t end, PayloadHeader *h) {
    Py_ssize_t p = start;
    uint64_t field, length, value;
    int have_size = 0, have_compression = 0, rc;
    h->have_uncompressed = 0;
    for (;;) {
        if ((rc = packed(d, end, &p, &field)) != 0) goto early;
        if (field == 0) break;
        if ((rc = packed(d, end, &p, &length)) != 0) goto early;
        if (length > (uint64_t)(end - p)) {
            PyErr_SetString(PyExc_ValueError,
                            "a TRANSACTION_PAYLOAD header field runs past the event");
            return -1;
        }
        Py_ssize_t stop = p + (Py_ssize_t)length;
        if (field == 1 || field == 2 || field == 3) {
            Py_ssize_t q = p;
            if ((rc = packed(d, end, &q, &value)) != 0) goto early;
            if (q != stop) {
                PyErr_Format(PyExc_ValueError, "TRANSACTION_PAYLOAD header field %d has %llu "
                             "bytes for a %zd-byte value", (int)field,
                             (unsigned long long)length, q - p);
                return -1;
            }
            if (field == 1) { h->size = value; have_size = 1; }
            else if (field == 2) { h->compression = value; have_compression = 1; }
            else { h->uncompressed = value; h->have_uncompressed = 1; }
        }
        p = stop; /* a field this reader does not know: skipped by its length */
    }
    if (!have_size || !have_compression) {
        PyErr_SetString(PyExc_ValueError, "a TRANSACTION_PAYLOAD header without its payload "
                                          "size or compression type");
        return -1;
    }
    if ((uint64_t)(end - p) != h->size) {
        PyErr_Format(PyExc_ValueError, "a TRANSACTION_PAYLOAD of %llu bytes in %zd bytes",
                     (unsigned long long)h->size, end - p);
        return -1;
    }
    h->p = p;
    return 0;
early:
    if (rc > 0) PyErr_SetString(PyExc_ValueError, "a TRANSACTION_PAYLOAD header ends early");
    return -1;
}

/* payload_header(data, start, end) -> (compression, size, uncompressed | None, payload start)
 *
 * The header of a payload event whose body is data[start:end] (fp_header; the payload start
 * is an index into ``data``). */
PyObject *fp_payload_header(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end;
    PayloadHeader h;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &start, &end)) return NULL;
    if (start < 0 || end > buf.len || start > end) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "a TRANSACTION_PAYLOAD outside its buffer");
        return NULL;
    }
    int rc = fp_header((const unsigned char *)buf.buf, start, end, &h);
    PyBuffer_Release(&buf);
    if (rc < 0) return NULL;
    if (h.have_uncompressed)
        return Py_BuildValue("(KKKn)", (unsigned long long)h.compression,
                             (unsigned long long)h.size, (unsigned long long)h.uncompressed,
                             h.p);
    return Py_BuildValue("(KKOn)", (unsigned long long)h.compression,
                         (unsigned long long)h.size, Py_None, h.p);
}

/* How many events the uncompressed payload d[0:end] holds, each whole and none a payload
 * itself; -1 with ValueError when not. */
Py_ssize_t fp_count_events(const unsigned char *d, Py_ssize_t end) {
    Py_ssize_t p = 0, count = 0;
    while (p < end) {
        if (end - p < 19) {
            PyErr_SetString(PyExc_ValueError,
                            "a TRANSACTION_PAYLOAD ends inside an event header");
            return -1;
        }
        uint64_t n = fd_le(d + p + 9, 4);
        if (n < 19 || n > (uint64_t)(end - p)) {
            PyErr_Format(PyExc_ValueError, "an event of %llu bytes inside a "
                         "TRANSACTION_PAYLOAD of %zd bytes at %zd", (unsigned long long)n,
                         end, p);
            return -1;
        }
        if (d[p + 4] == TRANSACTION_PAYLOAD) {
            PyErr_SetString(PyExc_ValueError,
                            "a TRANSACTION_PAYLOAD inside a TRANSACTION_PAYLOAD");
            return -1;
        }
        p += (Py_ssize_t)n;
        count++;
    }
    return count;
}

/* payload_events(events, size, log_pos, csum) -> (data, [(timestamp, type, server_id, size,
 * log_pos, flags, start, end), ...])
 *
 * A payload's uncompressed ``events`` in the dump stream's form (transaction_payload
 * .inner_events): each with the payload event's ``size`` and ``log_pos`` and IN_PAYLOAD in
 * its flags; with ``csum`` (the stream's checksum length) each event is followed by that many
 * zero bytes in ``data``, where the stream would have its checksum. */
PyObject *fp_payload_events(PyObject *self, PyObject *args) {
    PyObject *src;
    unsigned long long size, log_pos;
    int csum;
    (void)self;
    if (!PyArg_ParseTuple(args, "SKKi", &src, &size, &log_pos, &csum)) return NULL;
    return fp_inner_events(src, size, log_pos, csum);
}

/* payload_events on a bytes object ``src``: (data, events), or NULL with ValueError. */
PyObject *fp_inner_events(PyObject *src, unsigned long long size, unsigned long long log_pos,
                          int csum) {
    if (csum < 0 || csum > 8) {
        PyErr_SetString(PyExc_ValueError, "a checksum of 0 to 8 bytes");
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(src);
    Py_ssize_t end = PyBytes_GET_SIZE(src), p = 0;
    Py_ssize_t count = fp_count_events(d, end);
    if (count < 0) return NULL;
    PyObject *data, *events = PyList_New(count);
    if (events == NULL) return NULL;
    unsigned char *out = NULL;
    if (csum) {
        data = PyBytes_FromStringAndSize(NULL, end + count * csum);
        if (data == NULL) {
            Py_DECREF(events);
            return NULL;
        }
        out = (unsigned char *)PyBytes_AS_STRING(data);
    } else
        data = Py_NewRef(src);
    Py_ssize_t at = 0;
    p = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        const unsigned char *e = d + p;
        Py_ssize_t n = (Py_ssize_t)fd_le(e + 9, 4);
        Py_ssize_t a = csum ? at : p;
        if (csum) {
            memcpy(out + at, e, n);
            memset(out + at + n, 0, csum);
            at += n + csum;
        }
        PyObject *ev = Py_BuildValue("(kikKKlnn)", (unsigned long)fd_le(e, 4), (int)e[4],
                                     (unsigned long)fd_le(e + 5, 4), size, log_pos,
                                     (long)(fd_le(e + 17, 2) | FP_IN_PAYLOAD), a,
                                     a + n + csum);
        if (ev == NULL) {
            Py_DECREF(events);
            Py_DECREF(data);
            return NULL;
        }
        PyList_SET_ITEM(events, k, ev);
        p += n;
    }
    PyObject *res = PyTuple_Pack(2, data, events);
    Py_DECREF(data);
    Py_DECREF(events);
    return res;
}

/* -- zstd ------------------------------------------------------------------------------------ */

/* libzstd's stable API (zstd.h), looked up at run time: no header and no -lzstd at build
 * time, nothing to install; without the library the zstandard package decompresses. */
static struct {
    int tried;
    void *(*create)(void);
    size_t (*release)(void *);
    size_t (*decompress)(void *, void *, size_t, const void *, size_t);
    unsigned (*is_error)(size_t);
    const char *(*error_name)(size_t);
} Z;

int fp_zstd_ready(void) {
#if defined(__linux__)
    if (!Z.tried) {
        Z.tried = 1;
        void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib != NULL) {
            *(void **)&Z.create = dlsym(lib, "ZSTD_createDCtx");
            *(void **)&Z.release = dlsym(lib, "ZSTD_freeDCtx");
            *(void **)&Z.decompress = dlsym(lib, "ZSTD_decompressDCtx");
            *(void **)&Z.is_error = dlsym(lib, "ZSTD_isError");
            *(void **)&Z.error_name = dlsym(lib, "ZSTD_getErrorName");
            if (!Z.create || !Z.release || !Z.decompress || !Z.is_error || !Z.error_name) {
                Z.decompress = NULL;
                dlclose(lib);
            }
        }
    }
#endif
    return Z.decompress != NULL;
}

PyObject *fp_unzstd(void **ctx, const unsigned char *src, Py_ssize_t n, uint64_t size) {
    if (!fp_zstd_ready()) {
        PyErr_SetString(PyExc_ValueError, "libzstd is not loaded");
        return NULL;
    }
    if (size > (uint64_t)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_ValueError, "a TRANSACTION_PAYLOAD larger than memory");
        return NULL;
    }
    if (*ctx == NULL && (*ctx = Z.create()) == NULL) return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out == NULL) return NULL;
    size_t got = Z.decompress(*ctx, PyBytes_AS_STRING(out), (size_t)size, src, (size_t)n);
    if (Z.is_error(got) || got != size) {
        Py_DECREF(out);
        PyErr_Format(PyExc_ValueError, "a TRANSACTION_PAYLOAD could not be decompressed: %s",
                     Z.is_error(got) ? Z.error_name(got) : "not the size its header says");
        return NULL;
    }
    return out;
}

void fp_zstd_free(void *ctx) {
    if (ctx != NULL && Z.release != NULL) Z.release(ctx);
}

PyObject *fp_py_zstd_ready(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(fp_zstd_ready());
}

/* unzstd(data, size) -> bytes: fp_unzstd with the module's context (the GIL, held
 * throughout, keeps it to one call at a time) */
PyObject *fp_py_unzstd(PyObject *self, PyObject *args) {
    static void *ctx;
    Py_buffer buf;
    unsigned long long size;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*K", &buf, &size)) return NULL;
    PyObject *out = fp_unzstd(&ctx, (const unsigned char *)buf.buf, buf.len, size);
    PyBuffer_Release(&buf);
    return out;
}

/* -- zlib (MariaDB's compressed events) ------------------------------------------------------- */

/* zlib's uncompress2 (zlib 1.2.9+), looked up at run time like libzstd: Python's own zlib
 * module links the same library, so it is there wherever that module is. */
static struct {
    int tried;
    int (*uncompress2)(unsigned char *, unsigned long *, const unsigned char *, unsigned long *);
} ZL;

static int zlib_ready(void) {
#if defined(__linux__)
    if (!ZL.tried) {
        ZL.tried = 1;
        void *lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib != NULL) {
            *(void **)&ZL.uncompress2 = dlsym(lib, "uncompress2");
            if (ZL.uncompress2 == NULL) dlclose(lib);
        }
    }
#endif
    return ZL.uncompress2 != NULL;
}

int fp_inflate_mariadb(const unsigned char *d, Py_ssize_t p, Py_ssize_t end, unsigned char **out,
                       Py_ssize_t *n) {
    *out = NULL;
    if (end - p < 2 || !zlib_ready()) return 0;
    unsigned head = d[p], lenlen = head & 0x07;
    if (!(head & 0x80) || (head & 0x70) || lenlen < 1 || lenlen > 4 ||
        end - p < 1 + (Py_ssize_t)lenlen)
        return 0;
    uint64_t size = 0;
    for (unsigned i = 1; i <= lenlen; i++) size = (size << 8) | d[p + i];
    if (size == 0) return 0;
    unsigned char *buf = PyMem_Malloc((size_t)size);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const unsigned char *src = d + p + 1 + lenlen;
    unsigned long srclen = (unsigned long)(end - p - 1 - (Py_ssize_t)lenlen), used = srclen;
    unsigned long got = (unsigned long)size;
    int rc = ZL.uncompress2(buf, &got, src, &used);
    if (rc != 0 || got != size || used != srclen) { /* Z_OK; exactly the header's size */
        PyMem_Free(buf);
        return 0;
    }
    *out = buf;
    *n = (Py_ssize_t)size;
    return 1;
}
