/* _fastjson.c: MySQL's binary JSON as the server prints it, for the module (_fastdecode.c). */
#ifndef SPARKCDC_FASTJSON_H
#define SPARKCDC_FASTJSON_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

/* A stored JSON value (``n`` bytes) as MySQL prints it; ValueError when it is malformed. */
PyObject *fj_text(const unsigned char *d, Py_ssize_t n);
PyObject *fj_py_text(PyObject *self, PyObject *arg);    /* json_text(bytes) -> str */
PyObject *fj_py_tree(PyObject *self, PyObject *arg);    /* json_tree(bytes) -> tree */
PyObject *fj_py_render(PyObject *self, PyObject *arg);  /* json_render(tree) -> str */
int fj_init(void);

#endif
