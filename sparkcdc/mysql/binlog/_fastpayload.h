/* _fastpayload.c: a TRANSACTION_PAYLOAD's header and events, for the module (_fastdecode.c). */
#ifndef SPARKCDC_FASTPAYLOAD_H
#define SPARKCDC_FASTPAYLOAD_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

PyObject *fp_payload_header(PyObject *self, PyObject *args);
PyObject *fp_payload_events(PyObject *self, PyObject *args);

#endif
