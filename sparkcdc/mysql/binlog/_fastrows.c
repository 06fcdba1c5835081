/* Row images of binlog row events decoded in C into canonical Python values.
 *
 * The Python side (sparkcdc/mysql/binlog/fastdecode.py) compiles a per-table plan once from
 * the TABLE_MAP metadata and the captured schema: one small spec per column (an op code and
 * its arguments, _fastcols.h). A whole event's row images are then walked with that plan
 * into (before, after) pairs of dicts, the same values PyRowDecoder builds
 * (sparkcdc.mysql.types), each column's value by _fastcols.c. Every read is bounds-checked:
 * a truncated or malformed event raises ValueError, which the Python side turns into
 * DecodeError. */
#include "_fastrows.h"
#include "_fastjson.h"
#include "_fastjsondiff.h"
#include "_fastpayload.h"
#include "_fastvalues.h"

#include <stdint.h>
#include <string.h>

/* -- images and events -------------------------------------------------------------------- */

/* Where a before image's JSON values lie (a PARTIAL_UPDATE_ROWS row's diffs apply to them):
 * per column, the value's bytes, or NULL for a NULL. */
typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} Span;

static int is_json(const ColSpec *s) { return s->op == OP_JSON || s->op == OP_CALL; }

/* One row image; ``spans`` (or NULL) gets where its JSON columns' stored values are. With
 * ``keys_only`` (an update's before image under a plan with keys, PlanObject), its key
 * columns alone: the other values are stepped over, never made (a JSON column's bytes still
 * placed in ``spans``: a partial update's diffs apply to them). */
static PyObject *decode_image(PlanObject *plan, Cursor *c, Span *spans, int keys_only) {
    Py_ssize_t ncols = plan->ncols, nbits = (ncols + 7) / 8;
    if (fc_need(c, nbits) < 0) return NULL;
    const unsigned char *nulls = c->d + c->pos;
    c->pos += nbits;
    PyObject *row = _PyDict_NewPresized(keys_only ? plan->nkeys : ncols);
    if (row == NULL) return NULL;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *v;
        ColSpec *s = &plan->cols[i];
        if (keys_only && !plan->key[i]) {
            int null = nulls[i >> 3] >> (i & 7) & 1;
            if (spans != NULL && is_json(s)) {
                spans[i].p = NULL;
                if (!null) {
                    if (fc_need(c, s->a) < 0) {
                        Py_DECREF(row);
                        return NULL;
                    }
                    spans[i].n = (Py_ssize_t)fd_le(c->d + c->pos, s->a);
                    spans[i].p = c->d + c->pos + s->a;
                }
            }
            if (!null && fc_skip(s, c) < 0) {
                Py_DECREF(row);
                return NULL;
            }
            continue;
        }
        if (nulls[i >> 3] >> (i & 7) & 1) {
            v = Py_NewRef(Py_None);
            if (spans != NULL) spans[i].p = NULL;
        } else {
            if (spans != NULL && is_json(s)) {
                if (fc_need(c, s->a) < 0) {
                    Py_DECREF(row);
                    return NULL;
                }
                spans[i].n = (Py_ssize_t)fd_le(c->d + c->pos, s->a);
                spans[i].p = c->d + c->pos + s->a;
            }
            if ((v = fc_value(plan, s, c)) == NULL) {
                Py_DECREF(row);
                return NULL;
            }
        }
        int rc = PyDict_SetItem(row, PyTuple_GET_ITEM(plan->names, i), v);
        Py_DECREF(v);
        if (rc < 0) {
            Py_DECREF(row);
            return NULL;
        }
    }
    return row;
}

/* 1 when the key columns of ``a`` and ``b`` hold equal values (as the tuples of them
 * compare), 0 when not, -1 on an error. */
static int same_key(PlanObject *plan, PyObject *a, PyObject *b) {
    for (Py_ssize_t i = 0; i < plan->ncols; i++) {
        if (!plan->key[i]) continue;
        PyObject *name = PyTuple_GET_ITEM(plan->names, i);
        PyObject *x = PyDict_GetItemWithError(a, name), *y = PyDict_GetItemWithError(b, name);
        if (x == NULL || y == NULL) return PyErr_Occurred() ? -1 : 0;
        int eq = PyObject_RichCompareBool(x, y, Py_EQ);
        if (eq <= 0) return eq;
    }
    return 1;
}

/* The after image of a PARTIAL_UPDATE_ROWS row whose JSON columns flagged in ``bits`` (one
 * bit per JSON column, in column order) hold diffs. An empty diff (what MySQL logs for a
 * JSON column the UPDATE left alone) is the before image's value; any other diff is applied
 * here (_fastjsondiff.c, when the OP_JSON spec's c is 1: fastdecode.DIFFS_IN_C) to the before
 * value's bytes (from ``spans``), and what that leaves by the column's ``apply(before bytes |
 * None, diff bytes, column)`` (the spec's obj: json_diff, which applies or names it). Without
 * one, returns Py_None without a reference: the caller applies the whole event's diffs in
 * Python. */
static PyObject *decode_partial_after(PlanObject *plan, Cursor *c, PyObject *before,
                                      const unsigned char *bits, const Span *spans) {
    Py_ssize_t ncols = plan->ncols, nbits = (ncols + 7) / 8, k = 0;
    if (fc_need(c, nbits) < 0) return NULL;
    const unsigned char *nulls = c->d + c->pos;
    c->pos += nbits;
    PyObject *row = _PyDict_NewPresized(ncols);
    if (row == NULL) return NULL;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        ColSpec *s = &plan->cols[i];
        PyObject *v, *name = PyTuple_GET_ITEM(plan->names, i);
        int diff = 0;
        if (is_json(s)) {
            diff = bits != NULL && bits[k >> 3] >> (k & 7) & 1;
            k++;
        }
        if (nulls[i >> 3] >> (i & 7) & 1)
            v = Py_NewRef(Py_None);
        else if (diff) {
            const unsigned char *dp;
            Py_ssize_t dn;
            if (fc_need(c, s->a) < 0) { Py_DECREF(row); return NULL; }
            if (fd_le(c->d + c->pos, s->a) == 0) {  /* left alone: the before value */
                c->pos += s->a;
                v = PyDict_GetItemWithError(before, name);
                if (v != NULL)
                    Py_INCREF(v);
                else if (!PyErr_Occurred() && s->op == OP_JSON) /* a before image of keys */
                    v = spans[i].p == NULL ? Py_NewRef(Py_None) : fj_text(spans[i].p, spans[i].n);
                if (v == NULL) {
                    Py_DECREF(row);
                    if (!PyErr_Occurred()) return Py_None;
                    return NULL;
                }
            } else if (s->op != OP_JSON || s->obj == Py_None) {
                Py_DECREF(row);
                return Py_None;
            } else if (fc_read_prefixed(c, s->a, &dp, &dn) < 0) {
                Py_DECREF(row);
                return NULL;
            } else {
                int rc = s->c && spans[i].p != NULL
                             ? fjd_apply(spans[i].p, spans[i].n, dp, dn, &v) : FJD_NOT_HERE;
                if (rc == FJD_NOT_HERE) { /* json_diff's to apply or name */
                    PyObject *was = spans[i].p == NULL ? Py_NewRef(Py_None) :
                        PyBytes_FromStringAndSize((const char *)spans[i].p, spans[i].n);
                    PyObject *diffs = PyBytes_FromStringAndSize((const char *)dp, dn);
                    v = was == NULL || diffs == NULL ? NULL :
                        PyObject_CallFunctionObjArgs(s->obj, was, diffs, name, NULL);
                    Py_XDECREF(was);
                    Py_XDECREF(diffs);
                } else if (rc < 0)
                    v = NULL;
                if (v == NULL) {
                    Py_DECREF(row);
                    return NULL;
                }
            }
        } else if ((v = fc_value(plan, s, c)) == NULL) {
            Py_DECREF(row);
            return NULL;
        }
        int rc = PyDict_SetItem(row, name, v);
        Py_DECREF(v);
        if (rc < 0) {
            Py_DECREF(row);
            return NULL;
        }
    }
    return row;
}

/* The shared image of a PARTIAL_UPDATE_ROWS row, between its before and after images: a
 * packed value_options integer and, when its PARTIAL_JSON_UPDATES bit is set, one bit per
 * JSON column of the table (``njson``) saying that column's after value is a diff. Sets
 * ``*bits`` to those bits (NULL when none is set). Returns 0, or -1 on a malformed event. */
static int value_options(Cursor *c, Py_ssize_t njson, const unsigned char **bits) {
    *bits = NULL;
    if (fc_need(c, 1) < 0) return -1;
    unsigned first = c->d[c->pos];
    uint64_t options;
    int n = first < 251 ? 0 : first == 252 ? 2 : first == 253 ? 3 : first == 254 ? 8 : -1;
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "bad length-encoded integer 0x%02x", first);
        return -1;
    }
    if (fc_need(c, 1 + n) < 0) return -1;
    options = n == 0 ? first : fd_le(c->d + c->pos + 1, n);
    c->pos += 1 + n;
    if (!(options & 1)) return 0;
    Py_ssize_t nb = (njson + 7) / 8;
    if (fc_need(c, nb) < 0) return -1;
    for (Py_ssize_t i = 0; i < nb; i++)
        if (c->d[c->pos + i]) *bits = c->d + c->pos;
    c->pos += nb;
    return 0;
}

/* An update's before image ``*img`` read as its key alone: the whole image instead (read
 * again from byte ``at``) when the key moved, which the after image shows. 0, or -1 with an
 * error (``*img`` then released). */
static int whole_if_moved(PlanObject *plan, PyObject **img, PyObject *after,
                          const unsigned char *d, Py_ssize_t at, Py_ssize_t n) {
    int same = same_key(plan, *img, after);
    if (same == 0) {
        Cursor again = {d, at, n};
        Py_SETREF(*img, decode_image(plan, &again, NULL, 0));
    }
    if (same < 0 || *img == NULL) {
        Py_CLEAR(*img);
        return -1;
    }
    return 0;
}

/* The row images of one rows event, ``n`` bytes at ``d`` (after its bitmaps): a list of
 * (before, after), or Py_None (a new reference) for a PARTIAL_UPDATE_ROWS row whose JSON
 * diff its column's spec cannot apply; NULL with ValueError("at byte ...") when malformed. */
PyObject *fr_decode_images(PlanObject *plan, const unsigned char *d, Py_ssize_t n, int mode,
                           Py_ssize_t njson) {
    Cursor c = {d, 0, n};
    Span *spans = NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto fail;
    if (mode == 3 && (spans = PyMem_Calloc(plan->ncols ? plan->ncols : 1, sizeof(Span))) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    while (c.pos < c.end) {
        Py_ssize_t at = c.pos;
        PyObject *img = decode_image(plan, &c, spans, mode >= 2 && plan->key != NULL), *pair;
        if (img == NULL) goto fail;
        if (mode == 3) {
            const unsigned char *bits;
            if (value_options(&c, njson, &bits) < 0) {
                Py_DECREF(img);
                goto fail;
            }
            PyObject *after = decode_partial_after(plan, &c, img, bits, spans);
            if (after == NULL || after == Py_None) {
                Py_DECREF(img);
                if (after == NULL) goto fail;
                Py_DECREF(out);  /* a JSON diff this plan cannot apply: the caller does */
                PyMem_Free(spans);
                Py_RETURN_NONE;
            }
            if (plan->key != NULL && whole_if_moved(plan, &img, after, d, at, n) < 0) {
                Py_DECREF(after);
                goto fail;
            }
            pair = PyTuple_Pack(2, img, after);
            Py_DECREF(after);
        } else if (mode == 2) {
            PyObject *after = decode_image(plan, &c, NULL, 0);
            if (after == NULL) {
                Py_DECREF(img);
                goto fail;
            }
            if (plan->key != NULL && whole_if_moved(plan, &img, after, d, at, n) < 0) {
                Py_DECREF(after);
                goto fail;
            }
            pair = PyTuple_Pack(2, img, after);
            Py_DECREF(after);
        } else if (mode == 1)
            pair = PyTuple_Pack(2, img, Py_None);
        else
            pair = PyTuple_Pack(2, Py_None, img);
        Py_DECREF(img);
        if (pair == NULL) goto fail;
        int rc = PyList_Append(out, pair);
        Py_DECREF(pair);
        if (rc < 0) goto fail;
    }
    PyMem_Free(spans);
    return out;
fail:
    PyMem_Free(spans);
    if (PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_UnicodeError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_Format(PyExc_ValueError, "at byte %zd: %S", c.pos, value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    Py_XDECREF(out);
    return NULL;
}

/* decode(plan, data, mode[, njson]) -> [(before, after), ...]; mode 0 insert, 1 delete,
 * 2 update, 3 a PARTIAL_UPDATE_ROWS event (updates whose after images follow their shared
 * image, see value_options; decode_partial_after applies the JSON diffs): None when a row
 * holds a JSON diff that its column's spec cannot apply (the caller then applies the
 * event's diffs in Python). */
PyObject *fr_py_decode(PyObject *self, PyObject *args) {
    PlanObject *plan;
    Py_buffer buf;
    int mode;
    Py_ssize_t njson = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*i|n", &FR_PlanType, &plan, &buf, &mode, &njson))
        return NULL;
    PyObject *out = fr_decode_images(plan, (const unsigned char *)buf.buf, buf.len, mode, njson);
    PyBuffer_Release(&buf);
    return out;
}

/* A whole rows event whose body is d[start:end] (after the 19-byte header, without the
 * checksum; ``len`` the buffer's size): the post-header (table id, flags, v2 extra data),
 * the column count and the columns-present bitmap(s), then the row images with the plan.
 * Py_None (a new reference) when the event does not carry every column of the plan in every
 * image (the caller then names the missing column), and for mode 3 (PARTIAL_UPDATE_ROWS,
 * ``njson`` JSON columns) when a row holds a JSON diff the plan cannot apply. */
/* Where a rows event's images start (after its table id, flags, extra data, column count
 * and bitmaps): 1 with ``*at`` set, 0 when a column is missing or the header is short, -1
 * with ValueError when the event lies outside its buffer. */
static int images_at(PlanObject *plan, const unsigned char *d, Py_ssize_t len, Py_ssize_t start,
                     Py_ssize_t end, int tid_len, int version, int mode, Py_ssize_t *at) {
    if (start < 0 || end > len || start > end || tid_len < 1 || tid_len > 8) {
        PyErr_SetString(PyExc_ValueError, "a rows event outside its buffer");
        return -1;
    }
    Py_ssize_t p = start + tid_len + 2, ncols = 0;
    int ok = 1;
    if (version == 2) {
        if (end - p < 2) ok = 0;
        else p += (Py_ssize_t)fd_le(d + p, 2);
    }
    if (ok && p < end) {
        unsigned c = d[p];
        if (c < 251) { ncols = c; p += 1; }
        else if (c == 252 && end - p >= 3) { ncols = (Py_ssize_t)fd_le(d + p + 1, 2); p += 3; }
        else if (c == 253 && end - p >= 4) { ncols = (Py_ssize_t)fd_le(d + p + 1, 3); p += 4; }
        else ok = 0;
    } else
        ok = 0;
    Py_ssize_t nb = (ncols + 7) / 8;
    if (ok && ncols != plan->ncols) ok = 0;
    for (int img = 0; ok && img < (mode >= 2 ? 2 : 1); img++) {
        if (end - p < nb) { ok = 0; break; }
        for (Py_ssize_t i = 0; i < ncols; i++)
            if (!(d[p + (i >> 3)] >> (i & 7) & 1)) { ok = 0; break; }
        p += nb;
    }
    *at = p;
    return ok;
}

PyObject *fr_decode_event(PlanObject *plan, const unsigned char *d, Py_ssize_t len,
                          Py_ssize_t start, Py_ssize_t end, int tid_len, int version, int mode,
                          Py_ssize_t njson) {
    Py_ssize_t p;
    int ok = images_at(plan, d, len, start, end, tid_len, version, mode, &p);
    if (ok <= 0) return ok < 0 ? NULL : Py_NewRef(Py_None);
    return fr_decode_images(plan, d + p, end - p, mode, njson);
}

PyObject *fr_decode_compressed_event(PlanObject *plan, const unsigned char *d, Py_ssize_t len,
                                     Py_ssize_t start, Py_ssize_t end, int tid_len, int version,
                                     int mode, PyObject *inflate) {
    Py_ssize_t p;
    int ok = images_at(plan, d, len, start, end, tid_len, version, mode, &p);
    if (ok <= 0) return ok < 0 ? NULL : Py_NewRef(Py_None);
    unsigned char *raw;
    Py_ssize_t n;
    int c = fp_inflate_mariadb(d, p, end, &raw, &n); /* the system's zlib, in C */
    if (c < 0) return NULL;
    if (c > 0) {
        PyObject *out = fr_decode_images(plan, raw, n, mode, 0);
        PyMem_Free(raw);
        return out;
    }
    /* not inflated here: Python's inflate, which names what is wrong */
    PyObject *view = PyMemoryView_FromMemory((char *)d, end, PyBUF_READ);
    if (view == NULL) return NULL;
    PyObject *images = PyObject_CallFunction(inflate, "Onn", view, p, end);
    Py_DECREF(view);
    if (images == NULL) return NULL;
    if (!PyBytes_Check(images)) {
        Py_DECREF(images);
        PyErr_SetString(PyExc_TypeError, "inflate gave no bytes");
        return NULL;
    }
    PyObject *out = fr_decode_images(plan, (const unsigned char *)PyBytes_AS_STRING(images),
                                     PyBytes_GET_SIZE(images), mode, 0);
    Py_DECREF(images);
    return out;
}

/* decode_event(plan, data, start, end, table_id_len, version, mode[, njson]) -> list | None:
 * fr_decode_event. */
PyObject *fr_py_decode_event(PyObject *self, PyObject *args) {
    PlanObject *plan;
    Py_buffer buf;
    Py_ssize_t start, end, njson = 0;
    int tid_len, version, mode;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*nniii|n", &FR_PlanType, &plan, &buf, &start, &end,
                          &tid_len, &version, &mode, &njson))
        return NULL;
    PyObject *out = fr_decode_event(plan, (const unsigned char *)buf.buf, buf.len, start, end,
                                    tid_len, version, mode, njson);
    PyBuffer_Release(&buf);
    return out;
}

/* -- the plan type ------------------------------------------------------------------------ */

static void plan_dealloc(PlanObject *self) {
    PyMem_Free(self->cols);
    PyMem_Free(self->key);
    Py_XDECREF(self->names);
    Py_XDECREF(self->specs);
    Py_XDECREF(self->decimal);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Plan(names: tuple[str], specs: tuple[(op, a, b, c, obj)], decimal_type[, keys]): ``keys``,
 * the row key's column indices, makes an update's before image its key alone (PlanObject) */
static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *names, *specs, *decimal, *keys = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O|O!", &PyTuple_Type, &names, &PyTuple_Type, &specs,
                          &decimal, &PyTuple_Type, &keys))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(specs) != n) {
        PyErr_SetString(PyExc_ValueError, "one spec per name");
        return NULL;
    }
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->ncols = n;
    self->names = Py_NewRef(names);
    self->specs = Py_NewRef(specs);
    self->decimal = Py_NewRef(decimal);
    self->cols = PyMem_Calloc(n ? n : 1, sizeof(ColSpec));
    if (self->cols == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        ColSpec *s = &self->cols[i];
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i)) ||
            !PyArg_ParseTuple(PyTuple_GET_ITEM(specs, i), "iiiiO", &s->op, &s->a, &s->b, &s->c,
                              &s->obj)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "names must be str");
            Py_DECREF(self);
            return NULL;
        }
        int lenbytes = s->op == OP_TEXT || s->op == OP_BYTES || s->op == OP_GEOMETRY ||
                       s->op == OP_CALL || s->op == OP_JSON;
        if (s->op < OP_INT || s->op > OP_JSON ||
            (lenbytes && (s->a < 1 || s->a > 4)) ||
            ((s->op == OP_INT) && !(s->a == 1 || s->a == 2 || s->a == 3 || s->a == 4 || s->a == 8)) ||
            ((s->op == OP_UINT) && (s->a < 1 || s->a > 4)) ||
            ((s->op == OP_ENUM) && (s->a < 1 || s->a > 2 || !PyTuple_Check(s->obj))) ||
            ((s->op == OP_SET) && (s->a < 1 || s->a > 8 || !PyTuple_Check(s->obj))) ||
            ((s->op == OP_BIT1 || s->op == OP_BITS) && (s->a < 1 || s->a > 8 || s->b < 0 || s->b > 8)) ||
            ((s->op == OP_DECIMAL) && (s->a < 1 || s->a > 65 || s->b < 0 || s->b > 38 || s->b > s->a)) ||
            ((s->op == OP_TIME2 || s->op == OP_DATETIME2 || s->op == OP_TIMESTAMP2) &&
             (s->a < 0 || s->a > 6)) ||
            ((s->op == OP_TEXT) && s->b == 1 && !PyUnicode_Check(s->obj)) ||
            (((s->op == OP_TEXT && s->b == 2) || s->op == OP_CALL) && !PyCallable_Check(s->obj)) ||
            (s->op == OP_JSON && s->obj != Py_None && !PyCallable_Check(s->obj))) {
            PyErr_Format(PyExc_ValueError, "bad spec for column %zd", i);
            Py_DECREF(self);
            return NULL;
        }
        if (s->op == OP_TEXT && s->b == 1) {
            s->encoding = PyUnicode_AsUTF8(s->obj);
            if (s->encoding == NULL) {
                Py_DECREF(self);
                return NULL;
            }
        }
        if (s->op == OP_SET)
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(s->obj); k++)
                if (!PyUnicode_Check(PyTuple_GET_ITEM(s->obj, k))) {
                    PyErr_SetString(PyExc_TypeError, "SET members must be str");
                    Py_DECREF(self);
                    return NULL;
                }
    }
    if (keys != NULL && PyTuple_GET_SIZE(keys) > 0) {
        self->key = PyMem_Calloc(n ? n : 1, 1);
        if (self->key == NULL) {
            Py_DECREF(self);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys); k++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(keys, k));
            if (i < 0 || i >= n) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a key outside the columns");
                Py_DECREF(self);
                return NULL;
            }
            self->nkeys += !self->key[i];
            self->key[i] = 1;
        }
    }
    return (PyObject *)self;
}

PyTypeObject FR_PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sparkcdc.mysql._fastdecode.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled per-table decode plan.",
    .tp_new = plan_new,
};
