/* Where the binlog reader is, for its event loop in C (_fastloop.c): read_state.ReadState's
 * fields, its transactions' begin and commit with the GTID state they move, and the records
 * of a rows event with their offsets (event_records.py). The Python modules stay the
 * reference and the pure-Python loop's; this is their twin, and does only what it can do
 * exactly as they do: a commit whose GTID state it cannot grow itself (MariaDB's second
 * domain, a MySQL GTID that is not its source's next, the first commit of a read) is left
 * to ReadState.commit, the loop handing that event to Python. */
#include "_faststate.h"
#include "_fastvalues.h"

#include <string.h>

static PyObject *empty_tuple;
/* attribute names, interned */
static PyObject *a_file, *a_fidx, *a_boundary_pos, *a_gtid, *a_in_txn, *a_txn_pos, *a_txn_gtid,
    *a_txn_gtid_before, *a_txn_ts, *a_explicit, *a_events, *a_progress, *a_low_key, *a_server,
    *a_domains, *a_mysql_set, *a_txn_sid, *a_txn_gno, *a_fast_next, *a_extend_fast;
/* BinlogOffset's fields and ChangeRecord's, in their dataclasses' order */
static PyObject *offset_names[7], *record_names[7];

PyObject *ft_text(PyObject *a, const unsigned long long *nums, int count, char sep, PyObject *b) {
    const char *pa = "", *pb = "";
    Py_ssize_t la = 0, lb = 0;
    if (a != NULL) {
        if (!PyUnicode_IS_ASCII(a)) return NULL;
        pa = (const char *)PyUnicode_DATA(a);
        la = PyUnicode_GET_LENGTH(a);
    }
    if (b != NULL) {
        if (!PyUnicode_IS_ASCII(b)) return NULL;
        pb = (const char *)PyUnicode_DATA(b);
        lb = PyUnicode_GET_LENGTH(b);
    }
    char mid[3 * 21];
    int lm = 0;
    for (int k = 0; k < count && k < 3; k++) {
        if (k) mid[lm++] = sep;
        lm += fd_put_digits(mid + lm, nums[k], 0);
    }
    PyObject *r = PyUnicode_New(la + lm + lb, 127);
    if (r == NULL) return NULL;
    char *o = (char *)PyUnicode_DATA(r);
    memcpy(o, pa, (size_t)la);
    memcpy(o + la, mid, (size_t)lm);
    memcpy(o + la + lm, pb, (size_t)lb);
    return r;
}

static int get_obj(PyObject *o, PyObject *name, PyObject **slot) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    Py_XSETREF(*slot, v);
    return 0;
}

static int get_ll(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

static int get_bool(PyObject *o, PyObject *name, int *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    int x = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (x < 0) return -1;
    *out = x;
    return 0;
}

static int set_ll(PyObject *o, PyObject *name, long long v) {
    PyObject *x = PyLong_FromLongLong(v);
    if (x == NULL) return -1;
    int rc = PyObject_SetAttr(o, name, x);
    Py_DECREF(x);
    return rc;
}

static void fast_clear(State *st) {
    Py_CLEAR(st->fast_sid);
    Py_CLEAR(st->fast_head);
    Py_CLEAR(st->fast_tail);
    Py_CLEAR(st->fast_text);
    st->advanced = 0;
}

void ft_clear(State *st) {
    Py_CLEAR(st->file);
    Py_CLEAR(st->server);
    Py_CLEAR(st->gtid);
    Py_CLEAR(st->txn_gtid);
    Py_CLEAR(st->txn_gtid_before);
    Py_CLEAR(st->txn_sid);
    Py_CLEAR(st->domains);
    Py_CLEAR(st->gset);
    fast_clear(st);
}

int ft_in(State *st, PyObject *rs, int mysql) {
    PyObject *low = NULL;
    if (get_obj(rs, a_file, &st->file) < 0 || get_obj(rs, a_server, &st->server) < 0 ||
        get_obj(rs, a_gtid, &st->gtid) < 0 || get_obj(rs, a_txn_gtid, &st->txn_gtid) < 0 ||
        get_obj(rs, a_txn_gtid_before, &st->txn_gtid_before) < 0 ||
        get_obj(rs, a_txn_sid, &st->txn_sid) < 0 || get_ll(rs, a_fidx, &st->fidx) < 0 ||
        get_ll(rs, a_boundary_pos, &st->boundary_pos) < 0 ||
        get_ll(rs, a_txn_pos, &st->txn_pos) < 0 || get_ll(rs, a_txn_ts, &st->txn_ts) < 0 ||
        get_ll(rs, a_events, &st->events) < 0 || get_ll(rs, a_progress, &st->progress) < 0 ||
        get_ll(rs, a_txn_gno, &st->txn_gno) < 0 || get_bool(rs, a_in_txn, &st->in_txn) < 0 ||
        get_bool(rs, a_explicit, &st->explicit_) < 0 || get_obj(rs, a_low_key, &low) < 0)
        goto fail;
    if (!PyTuple_Check(low) || PyTuple_GET_SIZE(low) != 4) {
        PyErr_SetString(PyExc_ValueError, "ReadState.low_key is not a 4-tuple");
        goto fail;
    }
    for (int k = 0; k < 4; k++) {
        st->low[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(low, k));
        if (st->low[k] == -1 && PyErr_Occurred()) goto fail;
    }
    Py_CLEAR(low);
    fast_clear(st);
    if (!mysql) return get_obj(rs, a_domains, &st->domains);
    if (get_obj(rs, a_mysql_set, &st->gset) < 0) return -1;
    if (st->gset == Py_None) return 0;
    PyObject *fast = PyObject_CallMethodNoArgs(st->gset, a_fast_next);
    if (fast == NULL) return -1;
    if (fast != Py_None) {
        long long last;
        if (!PyTuple_Check(fast) || PyTuple_GET_SIZE(fast) != 4 ||
            ((last = PyLong_AsLongLong(PyTuple_GET_ITEM(fast, 1))) == -1 && PyErr_Occurred())) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "GtidSet.fast_next is not a 4-tuple");
            Py_DECREF(fast);
            return -1;
        }
        st->fast_sid = Py_NewRef(PyTuple_GET_ITEM(fast, 0));
        st->fast_last = last;
        st->fast_head = Py_NewRef(PyTuple_GET_ITEM(fast, 2));
        st->fast_tail = Py_NewRef(PyTuple_GET_ITEM(fast, 3));
    }
    Py_DECREF(fast);
    return 0;
fail:
    Py_XDECREF(low);
    return -1;
}

int ft_out(State *st, PyObject *rs) {
    PyObject *low = Py_BuildValue("(LLLL)", st->low[0], st->low[1], st->low[2], st->low[3]);
    if (low == NULL) return -1;
    int rc = PyObject_SetAttr(rs, a_low_key, low);
    Py_DECREF(low);
    if (rc < 0 || set_ll(rs, a_boundary_pos, st->boundary_pos) < 0 ||
        PyObject_SetAttr(rs, a_gtid, st->gtid) < 0 ||
        PyObject_SetAttr(rs, a_in_txn, st->in_txn ? Py_True : Py_False) < 0 ||
        set_ll(rs, a_txn_pos, st->txn_pos) < 0 || PyObject_SetAttr(rs, a_txn_gtid, st->txn_gtid) < 0 ||
        PyObject_SetAttr(rs, a_txn_gtid_before, st->txn_gtid_before) < 0 ||
        set_ll(rs, a_txn_ts, st->txn_ts) < 0 ||
        PyObject_SetAttr(rs, a_explicit, st->explicit_ ? Py_True : Py_False) < 0 ||
        set_ll(rs, a_events, st->events) < 0 || set_ll(rs, a_progress, st->progress) < 0 ||
        PyObject_SetAttr(rs, a_txn_sid, st->txn_sid) < 0 || set_ll(rs, a_txn_gno, st->txn_gno) < 0)
        return -1;
    if (st->advanced) {  /* the numbers added here, told to the set in one call */
        PyObject *n = PyLong_FromLongLong(st->fast_last);
        if (n == NULL) return -1;
        PyObject *r = PyObject_CallMethodObjArgs(st->gset, a_extend_fast, n, st->fast_text, NULL);
        Py_DECREF(n);
        if (r == NULL) return -1;
        Py_DECREF(r);
        st->advanced = 0;
    }
    return 0;
}

void ft_begin(State *st, long long pos, PyObject *gtid, long long ts, int explicit_) {
    st->in_txn = 1;
    st->txn_pos = pos;
    Py_XSETREF(st->txn_gtid, gtid != NULL ? gtid : Py_NewRef(Py_None));
    st->txn_ts = ts;
    Py_XSETREF(st->txn_gtid_before, Py_NewRef(st->gtid));
    st->explicit_ = explicit_;
    st->events = 0;
    Py_XSETREF(st->txn_sid, Py_NewRef(Py_None));
}

/* MariaDB's domain of a GTID's text ("domain-server-sequence"); -1 when it has none. */
static long long domain_of(PyObject *gtid) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(gtid, &n);
    if (s == NULL) {
        PyErr_Clear();
        return -1;
    }
    long long d = 0;
    Py_ssize_t i = 0;
    for (; i < n && i < 10 && s[i] >= '0' && s[i] <= '9'; i++) d = d * 10 + (s[i] - '0');
    return i > 0 && (i == n || s[i] == '-') ? d : -1;
}

int ft_commit(State *st, int mysql, long long end_pos) {
    if (st->in_txn && PyUnicode_Check(st->txn_gtid) && PyUnicode_GET_LENGTH(st->txn_gtid) > 0) {
        if (!mysql) {  /* one domain: the position is its last GTID (ReadState._merge) */
            long long d = domain_of(st->txn_gtid);
            if (d < 0 || !PyDict_Check(st->domains)) return 0;
            PyObject *key = PyLong_FromLongLong(d);
            if (key == NULL) return -1;
            Py_ssize_t nd = PyDict_GET_SIZE(st->domains);
            int has = nd == 1 ? PyDict_Contains(st->domains, key) : 0;
            if (has < 0 || nd > 1 || (nd == 1 && !has)) {
                Py_DECREF(key);
                return has < 0 ? -1 : 0;
            }
            int rc = PyDict_SetItem(st->domains, key, st->txn_gtid);
            Py_DECREF(key);
            if (rc < 0) return -1;
            Py_SETREF(st->gtid, Py_NewRef(st->txn_gtid));
        } else if (st->gtid != Py_None) {  /* the next GTID of the set's last source */
            if (st->fast_sid == NULL || !PyUnicode_Check(st->txn_sid) ||
                st->txn_gno != st->fast_last + 1)
                return 0;
            if (st->txn_sid != st->fast_sid) {
                int same = PyUnicode_Compare(st->txn_sid, st->fast_sid);
                if (same == -1 && PyErr_Occurred()) return -1;
                if (same != 0) return 0;
            }
            unsigned long long gno = (unsigned long long)st->txn_gno;
            PyObject *text = ft_text(st->fast_head, &gno, 1, 0, st->fast_tail);
            if (text == NULL) {
                if (PyErr_Occurred()) return -1;
                return 0; /* not ASCII: Python's */
            }
            st->fast_last = st->txn_gno;
            Py_XSETREF(st->fast_text, Py_NewRef(text));
            st->advanced = 1;
            Py_SETREF(st->gtid, text);
        }
    }
    st->in_txn = 0;
    st->boundary_pos = end_pos;
    return 1;
}

/* -- records -------------------------------------------------------------------------------- */

/* A slotted dataclass's member descriptors for ``names`` into ``out``, or all NULL when the
 * type keeps its fields in a __dict__. */
static int member_descriptors(PyObject *type, PyObject **names, PyObject **out) {
    int slotted = 1;
    for (int k = 0; k < 7; k++) {
        PyObject *d = PyObject_GetAttr(type, names[k]);
        if (d == NULL) return -1;
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type)) slotted = 0;
        out[k] = d;
    }
    if (!slotted)
        for (int k = 0; k < 7; k++) Py_CLEAR(out[k]);
    return 0;
}

int ft_makers(Makers *m, PyObject *record_type, PyObject *offset_type, PyObject *flavor,
              PyObject *ops) {
    if (!PyType_Check(record_type) || !PyType_Check(offset_type) || !PyUnicode_Check(flavor) ||
        !PyTuple_Check(ops) || PyTuple_GET_SIZE(ops) != 3) {
        PyErr_SetString(PyExc_TypeError, "Loop: record and offset types, a flavor and 3 ops");
        return -1;
    }
    m->record_type = Py_NewRef(record_type);
    m->offset_type = Py_NewRef(offset_type);
    m->flavor = Py_NewRef(flavor);
    for (int k = 0; k < 3; k++) m->ops[k] = Py_NewRef(PyTuple_GET_ITEM(ops, k));
    /* a slotted dataclass: its fields set through their descriptors, as object.__setattr__
     * does (its frozen __init__ costs 7 Python-level calls per record) */
    if (member_descriptors(record_type, record_names, m->slots) < 0) return -1;
    if (member_descriptors(offset_type, offset_names, m->oslots) < 0) return -1;
    return 0;
}

void ft_makers_clear(Makers *m) {
    Py_CLEAR(m->record_type);
    Py_CLEAR(m->offset_type);
    Py_CLEAR(m->flavor);
    for (int k = 0; k < 3; k++) Py_CLEAR(m->ops[k]);
    for (int k = 0; k < 7; k++) Py_CLEAR(m->slots[k]);
    for (int k = 0; k < 7; k++) Py_CLEAR(m->oslots[k]);
}

/* object.__new__(type) with its fields set (event_records.offset_at does the same): through
 * the slots' descriptors, or by name when the type has a __dict__. */
static PyObject *make_offset(Makers *m, PyObject **vals) {
    PyObject *o = PyBaseObject_Type.tp_new((PyTypeObject *)m->offset_type, empty_tuple, NULL);
    if (o == NULL) return NULL;
    for (int k = 0; k < 7; k++) {
        PyObject *d = m->oslots[k];
        if ((d ? Py_TYPE(d)->tp_descr_set(d, o, vals[k])
               : PyObject_GenericSetAttr(o, offset_names[k], vals[k])) < 0) {
            Py_DECREF(o);
            return NULL;
        }
    }
    return o;
}

static PyObject *make_record(Makers *m, PyObject **vals) {
    if (m->slots[0] == NULL) return PyObject_Vectorcall(m->record_type, vals, 7, NULL);
    PyObject *o = PyBaseObject_Type.tp_new((PyTypeObject *)m->record_type, empty_tuple, NULL);
    if (o == NULL) return NULL;
    for (int k = 0; k < 7; k++)
        if (Py_TYPE(m->slots[k])->tp_descr_set(m->slots[k], o, vals[k]) < 0) {
            Py_DECREF(o);
            return NULL;
        }
    return o;
}

int ft_records(State *st, Makers *m, PyObject *out, PyObject *decoded, int mode,
               PyObject *table_id, long long ev, const long long *end) {
    long long key0 = st->fidx, key1 = st->txn_pos;
    if (!PyList_Check(decoded) || mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_TypeError, "decoded rows are a list");
        return -1;
    }
    long long n = PyList_GET_SIZE(decoded), stop = n;
    long long first = st->low[0] == key0 && st->low[1] == key1 && st->low[2] == ev
                      ? st->low[3] : 0;
    if (end != NULL && end[0] == key0 && end[1] == key1 && end[2] == ev && end[3] < stop)
        stop = end[3];
    int cut = stop < n;
    if (first >= stop) return cut;
    PyObject *ts = PyLong_FromLongLong(st->txn_ts * 1000), *pos = PyLong_FromLongLong(key1);
    PyObject *evo = PyLong_FromLongLong(ev);
    int rc = ts != NULL && pos != NULL && evo != NULL ? 0 : -1;
    for (long long i = first; rc == 0 && i < stop; i++) {
        PyObject *pair = PyList_GET_ITEM(decoded, i), *rows = PyLong_FromLongLong(i);
        if (rows == NULL || !PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            if (rows != NULL) PyErr_SetString(PyExc_TypeError, "a decoded row is a pair");
            Py_XDECREF(rows);
            rc = -1;
            break;
        }
        PyObject *ovals[7] = {st->file, pos, evo, rows, st->txn_gtid_before, m->flavor,
                              st->server};
        PyObject *off = make_offset(m, ovals);
        Py_DECREF(rows);
        if (off == NULL) { rc = -1; break; }
        PyObject *rvals[7] = {m->ops[mode], table_id, PyTuple_GET_ITEM(pair, 0),
                              PyTuple_GET_ITEM(pair, 1), off, ts, st->txn_gtid};
        PyObject *rec = make_record(m, rvals);
        Py_DECREF(off);
        if (rec == NULL || PyList_Append(out, rec) < 0) rc = -1;
        Py_XDECREF(rec);
    }
    Py_XDECREF(ts);
    Py_XDECREF(pos);
    Py_XDECREF(evo);
    if (rc < 0) return -1;
    st->low[0] = key0;
    st->low[1] = key1;
    st->low[2] = ev;
    st->low[3] = stop;
    return cut;
}

int ft_init(void) {
    static const char *offsets[7] = {"file", "pos", "events", "rows", "gtid", "flavor", "server"};
    static const char *records[7] = {"op", "table_id", "before", "after", "offset", "ts_ms",
                                     "gtid"};
    for (int k = 0; k < 7; k++) {
        if ((offset_names[k] = PyUnicode_InternFromString(offsets[k])) == NULL ||
            (record_names[k] = PyUnicode_InternFromString(records[k])) == NULL)
            return -1;
    }
    struct { PyObject **slot; const char *name; } names[] = {
        {&a_file, "file"}, {&a_fidx, "fidx"}, {&a_boundary_pos, "boundary_pos"},
        {&a_gtid, "gtid"}, {&a_in_txn, "in_txn"}, {&a_txn_pos, "txn_pos"},
        {&a_txn_gtid, "txn_gtid"}, {&a_txn_gtid_before, "txn_gtid_before"},
        {&a_txn_ts, "txn_ts"}, {&a_explicit, "explicit"}, {&a_events, "events"},
        {&a_progress, "progress"}, {&a_low_key, "low_key"}, {&a_server, "server"},
        {&a_domains, "_mariadb_domains"}, {&a_mysql_set, "_mysql_set"},
        {&a_txn_sid, "_txn_sid"}, {&a_txn_gno, "_txn_gno"}, {&a_fast_next, "fast_next"},
        {&a_extend_fast, "extend_fast"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if ((*names[k].slot = PyUnicode_InternFromString(names[k].name)) == NULL) return -1;
    empty_tuple = PyTuple_New(0);
    return empty_tuple == NULL ? -1 : 0;
}
