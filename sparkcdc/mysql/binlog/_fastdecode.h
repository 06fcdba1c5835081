/* What the compiled decoder's C files share (one extension, sparkcdc.mysql.binlog._fastdecode):
 * _fastdecode.c (row images, the module), _fastjson.c (MySQL's binary JSON as the server
 * prints it) and _fastpayload.c (the events of a TRANSACTION_PAYLOAD). */
#ifndef SPARKCDC_FASTDECODE_H
#define SPARKCDC_FASTDECODE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static inline uint64_t fd_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* MySQL's binary DECIMAL (``precision``, ``scale``, ``size`` bytes at ``src``) as text:
 * the scale's digits after the point, '-' unless the value is zero. */
PyObject *fd_decimal_text(const unsigned char *src, int precision, int scale);
int fd_decimal_size(int precision, int scale);

/* _fastjson.c. A stored JSON value (``n`` bytes) as MySQL prints it; ValueError when it is
 * malformed. */
PyObject *fj_text(const unsigned char *d, Py_ssize_t n);
PyObject *fj_py_text(PyObject *self, PyObject *arg);    /* json_text(bytes) -> str */
PyObject *fj_py_tree(PyObject *self, PyObject *arg);    /* json_tree(bytes) -> tree */
PyObject *fj_py_render(PyObject *self, PyObject *arg);  /* json_render(tree) -> str */
int fj_init(void);

/* _fastpayload.c */
PyObject *fp_payload_header(PyObject *self, PyObject *args);
PyObject *fp_payload_events(PyObject *self, PyObject *args);

#endif
