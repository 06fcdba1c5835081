/* _fastjsondiff.c: a partial JSON update's diffs applied to the stored value before it, for
 * the row images of _fastrows.c and the module (_fastdecode.c). */
#ifndef SPARKCDC_FASTJSONDIFF_H
#define SPARKCDC_FASTJSONDIFF_H
#include "_fastjsontext.h"

#define FJD_NOT_HERE 1 /* json_diff decides: fjd_apply's answer when it does not apply a vector */

/* json_diff.apply in C: the text after the diff vector ``diffs`` (``dn`` bytes, after the
 * column's length) applied to the stored value ``before`` (``bn`` bytes). 0 with ``*out``;
 * FJD_NOT_HERE, no error set, when json_diff is to decide (a diff the server would reject, a
 * path or a document this file does not read, malformed bytes: json_diff names them, or
 * reads what this file leaves); -1 with an error (memory). */
int fjd_apply(const unsigned char *before, Py_ssize_t bn, const unsigned char *diffs,
              Py_ssize_t dn, PyObject **out);
/* json_apply_diffs(before bytes, diffs bytes) -> str | None (None: FJD_NOT_HERE) */
PyObject *fjd_py_apply(PyObject *self, PyObject *args);

#endif
