/* MySQL's binary JSON printed as the server prints it, in C.
 *
 * The reference is json_binary.py (its docstring has MySQL's rules: ", " and ": ", keys in
 * stored order, doubles as my_gcvt prints them, DECIMAL with its scale, dates and times
 * quoted, opaque values in base64); this file gives the same text for the same bytes
 * (tests/mysql/binlog/test_fastjson.py holds them equal on generated documents):
 *
 * - fj_text: a stored value straight to text, written as UTF-8 bytes and decoded once at
 *   the end with "surrogateescape" (what json_binary does string by string: escaping
 *   touches ASCII bytes only, so the two agree);
 * - json_tree: the tree json_binary.parse builds (dict, list, a scalar's text as str), for
 *   partial updates (json_diff applies the diffs to it in Python);
 * - json_render: json_binary.render of such a tree.
 *
 * An object whose keys are not in MySQL's order (shorter first, then bytewise; every value
 * MySQL writes is) is printed through the tree, so a malformed value with a key twice comes
 * out as json_binary's dict makes it. Every read is bounds-checked: ValueError names a
 * malformed value. The value's text itself is _fastjsontext.c's.
 */
#include "_fastjson.h"
#include "_fastjsontext.h"
#include "_fastvalues.h"

#include <string.h>

static PyObject *s_null, *s_open_obj, *s_close_obj, *s_open_arr, *s_close_arr, *s_comma,
    *s_colon, *s_empty;
static const char HEX[] = "0123456789abcdef";

/* -- the tree (json_binary.parse) --------------------------------------------------------- */

static PyObject *tree_value(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth);

static PyObject *tree_container(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end,
                                int depth) {
    if (depth > MAX_DEPTH) return fjt_bad("nested too deep"), NULL;
    const unsigned char *d = doc->d;
    int large = t & 1, osz = large ? 4 : 2, is_object = t <= LARGE_OBJECT;
    if (p + 2 * osz > doc->len) return fjt_bad("a container header past the value"), NULL;
    uint64_t count = fd_le24(d + p, large), size = fd_le24(d + p + osz, large);
    if ((uint64_t)p + size > (uint64_t)end)
        return fjt_bad("a container longer than its value"), NULL;
    Py_ssize_t entries = p + 2 * osz;
    Py_ssize_t values = is_object ? entries + (Py_ssize_t)count * (osz + 2) : entries;
    PyObject *list = PyList_New(0), *obj = NULL;
    if (list == NULL) return NULL;
    for (uint64_t i = 0; i < count; i++) {
        Py_ssize_t e = values + (Py_ssize_t)i * (1 + osz);
        PyObject *v;
        if (e >= doc->len) {
            fjt_bad("a value entry past the value");
            goto fail;
        }
        int vt = d[e];
        if (fjt_inlined(vt, large))
            v = tree_value(doc, vt, e + 1, e + 1 + osz, depth);
        else {
            if (e + 1 + osz > doc->len) {
                fjt_bad("a value entry past the value");
                goto fail;
            }
            uint64_t off = fd_le24(d + e + 1, large);
            if (off >= size) {
                fjt_bad("a value outside its container");
                goto fail;
            }
            v = tree_value(doc, vt, p + (Py_ssize_t)off, p + (Py_ssize_t)size, depth);
        }
        if (v == NULL) goto fail;
        int rc = PyList_Append(list, v);
        Py_DECREF(v);
        if (rc < 0) goto fail;
    }
    if (!is_object) return list;
    obj = PyDict_New();
    if (obj == NULL) goto fail;
    for (uint64_t i = 0; i < count; i++) {
        Py_ssize_t e = entries + (Py_ssize_t)i * (osz + 2);
        if (e + osz + 2 > doc->len) {
            fjt_bad("a key entry past the value");
            goto fail;
        }
        uint64_t koff = fd_le24(d + e, large), kn = fd_le(d + e + osz, 2);
        if (koff + kn > size) {
            fjt_bad("a key outside its object");
            goto fail;
        }
        PyObject *k = PyUnicode_DecodeUTF8((const char *)d + p + koff, (Py_ssize_t)kn,
                                           "surrogateescape");
        if (k == NULL) goto fail;
        int rc = PyDict_SetItem(obj, k, PyList_GET_ITEM(list, (Py_ssize_t)i));
        Py_DECREF(k);
        if (rc < 0) goto fail;
    }
    Py_DECREF(list);
    return obj;
fail:
    Py_XDECREF(obj);
    Py_DECREF(list);
    return NULL;
}

static PyObject *tree_value(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth) {
    if (t <= LARGE_ARRAY) return tree_container(doc, t, p, end, depth + 1);
    Buf o;
    fjt_buf_init(&o);
    PyObject *out = fjt_value(doc, t, p, end, depth, &o) < 0 ? NULL : fjt_buf_str(&o);
    fjt_buf_free(&o);
    return out;
}

static PyObject *tree(const unsigned char *d, Py_ssize_t n) {
    if (n == 0) return Py_NewRef(s_null);
    Doc doc = {d, n};
    return tree_value(&doc, d[0], 1, n, 0);
}

/* -- rendering a tree (json_binary.render) ------------------------------------------------- */

/* json.dumps(key, ensure_ascii=False), code point by code point */
static PyObject *quote_str(PyObject *k) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(k), extra = 0;
    int kind = PyUnicode_KIND(k);
    const void *data = PyUnicode_DATA(k);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' ||
            c == '\t')
            extra += 1;
        else if (c < 0x20)
            extra += 5;
    }
    Py_UCS4 maxchar = PyUnicode_MAX_CHAR_VALUE(k);
    PyObject *out = PyUnicode_New(n + 2 + extra, maxchar < 127 ? 127 : maxchar);
    if (out == NULL) return NULL;
    int okind = PyUnicode_KIND(out);
    void *odata = PyUnicode_DATA(out);
    Py_ssize_t j = 0;
    PyUnicode_WRITE(okind, odata, j++, '"');
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        }
        if (esc != NULL) {
            PyUnicode_WRITE(okind, odata, j++, esc[0]);
            PyUnicode_WRITE(okind, odata, j++, esc[1]);
        } else if (c < 0x20) {
            const char u[6] = {'\\', 'u', '0', '0', HEX[c >> 4], HEX[c & 15]};
            for (int m = 0; m < 6; m++) PyUnicode_WRITE(okind, odata, j++, u[m]);
        } else
            PyUnicode_WRITE(okind, odata, j++, c);
    }
    PyUnicode_WRITE(okind, odata, j++, '"');
    return out;
}

static int append(PyObject *pieces, PyObject *s) { return PyList_Append(pieces, s); }

static int render(PyObject *node, PyObject *pieces, int depth) {
    if (depth > MAX_DEPTH) return fjt_bad("nested too deep");
    if (PyUnicode_CheckExact(node)) return append(pieces, node);
    if (PyDict_CheckExact(node)) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *v;
        if (append(pieces, s_open_obj) < 0) return -1;
        while (PyDict_Next(node, &pos, &k, &v)) {
            if (!PyUnicode_Check(k)) {
                PyErr_SetString(PyExc_TypeError, "a JSON object's key must be str");
                return -1;
            }
            if (i++ && append(pieces, s_comma) < 0) return -1;
            PyObject *q = quote_str(k);
            if (q == NULL) return -1;
            int rc = append(pieces, q);
            Py_DECREF(q);
            if (rc < 0 || append(pieces, s_colon) < 0 || render(v, pieces, depth + 1) < 0)
                return -1;
        }
        return append(pieces, s_close_obj);
    }
    if (PyList_CheckExact(node)) {
        if (append(pieces, s_open_arr) < 0) return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(node); i++) {
            if (i && append(pieces, s_comma) < 0) return -1;
            if (render(PyList_GET_ITEM(node, i), pieces, depth + 1) < 0) return -1;
        }
        return append(pieces, s_close_arr);
    }
    PyErr_Format(PyExc_TypeError, "a JSON tree holds dict, list and str, not %.80s",
                 Py_TYPE(node)->tp_name);
    return -1;
}

static PyObject *render_tree(PyObject *node) {
    if (PyUnicode_CheckExact(node)) return Py_NewRef(node);
    PyObject *pieces = PyList_New(0);
    if (pieces == NULL) return NULL;
    PyObject *out = render(node, pieces, 0) < 0 ? NULL : PyUnicode_Join(s_empty, pieces);
    Py_DECREF(pieces);
    return out;
}

/* -- entry points ---------------------------------------------------------------------------- */

PyObject *fj_text(const unsigned char *d, Py_ssize_t n) {
    if (n == 0) return Py_NewRef(s_null);  /* an empty value: the server reads JSON null */
    Doc doc = {d, n};
    Buf o;
    fjt_buf_init(&o);
    int rc = fjt_value(&doc, d[0], 1, n, 0, &o);
    PyObject *out = NULL;
    if (rc == 0)
        out = fjt_buf_str(&o);
    else if (rc == UNSORTED) {  /* not MySQL's key order: as json_binary's dicts print it */
        PyObject *t = tree(d, n);
        if (t != NULL) {
            out = render_tree(t);
            Py_DECREF(t);
        }
    }
    fjt_buf_free(&o);
    return out;
}

PyObject *fj_py_text(PyObject *self, PyObject *arg) {
    Py_buffer b;
    (void)self;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = fj_text((const unsigned char *)b.buf, b.len);
    PyBuffer_Release(&b);
    return out;
}

PyObject *fj_py_tree(PyObject *self, PyObject *arg) {
    Py_buffer b;
    (void)self;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = tree((const unsigned char *)b.buf, b.len);
    PyBuffer_Release(&b);
    return out;
}

PyObject *fj_py_render(PyObject *self, PyObject *arg) {
    (void)self;
    return render_tree(arg);
}

int fj_init(void) {
    s_null = PyUnicode_InternFromString("null");
    s_open_obj = PyUnicode_InternFromString("{");
    s_close_obj = PyUnicode_InternFromString("}");
    s_open_arr = PyUnicode_InternFromString("[");
    s_close_arr = PyUnicode_InternFromString("]");
    s_comma = PyUnicode_InternFromString(", ");
    s_colon = PyUnicode_InternFromString(": ");
    s_empty = PyUnicode_InternFromString("");
    return s_null && s_open_obj && s_close_obj && s_open_arr && s_close_arr && s_comma &&
                   s_colon && s_empty
               ? 0
               : -1;
}

