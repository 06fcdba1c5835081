/* The binlog reader's event loop in C: reader.BinlogReader._consume's steps for the events
 * every transaction has, so a transaction costs no Python bytecode at all.
 *
 * ``Loop(...)`` holds what _consume holds for one stream (its ReadState, table maps,
 * schemas, the decoder's plans, the window's end); ``loop.events(data, events)`` wraps one
 * batch of the dump stream (DumpStream.batches) in an iterator that reads the events itself,
 * their headers where they are (split_events' EventList), each taken by _faststep.c: GTID
 * events (MySQL's and MariaDB's), the BEGIN after a MySQL GTID, TABLE_MAPs already parsed,
 * captured rows events (decoded with _fastrows.c and made into ChangeRecords with
 * _faststate.c), XIDs and the boundaries after them; a TRANSACTION_PAYLOAD opened there has
 * its events read here next, in the same loop, before the batch's next.
 *
 * What it yields is what _consume's own loop reads, so the Python loop stays the one
 * reference: an event it does not take (a ROTATE, a FORMAT_DESCRIPTION, a DDL, a table map
 * not parsed yet, an event with a missing column or bad bytes, a commit whose GTID state it
 * cannot grow) is yielded as the event it is, after the loop wrote its state back to the
 * ReadState, and Python takes it exactly as without the loop (and raises, for bad bytes,
 * its own error). Besides events it yields, as events of its own types (protocol/codes.py
 * LOOP_*), the records made so far, the buffer the events that follow are in (a payload's),
 * the window's end and a heartbeat that is due. Python's twin of all this is the loop in
 * _consume itself, which the pure-Python decoder runs. */
#include "_fastloop.h"
#include "_fastpayload.h"
#include "_faststep.h"
#include "_faststream.h"
#include "_fastvalues.h"

#include <string.h>

enum { L_RECORDS = 512, L_DATA = 513, L_DONE = 514, L_BEAT = 515 }; /* codes.py LOOP_* */
#define MAX_RECORDS 1024 /* records handed at once at most */

typedef struct {
    PyObject_HEAD
    Stream s;
} LoopObject;

typedef struct {
    PyObject_HEAD
    LoopObject *loop;
    PyObject *data, *evs; /* the batch's buffer and its events (a list of 8-tuples, or */
    EventListObject *at;  /* ... split_events' EventList, read in place) */
    Py_buffer buf;
    Py_ssize_t i, n;      /* the next of them, how many */
    /* a TRANSACTION_PAYLOAD being read: its events, uncompressed, from ``pl_p`` (the k-th) */
    PyObject *pl_raw, *pl_data, *pl_evs; /* pl_data, pl_evs: as Python reads them, made
                                            when one of them is handed over */
    Py_ssize_t pl_p, pl_k;
    long long pl_size, pl_log_pos;
    PyObject *py_data;  /* the buffer Python reads handed events in (data or pl_data) */
    PyObject *records;  /* made, not yet handed */
    PyObject *queue[3];
    int qn, qi, finished;
} EventsObject;

/* -- a batch's events ----------------------------------------------------------------------- */

enum { END = 10, FULL = 11 }; /* run's outcomes besides a step's (FE_*) */

static int ev_of(PyObject *t, Ev *ev, Py_ssize_t len) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 8) {
        PyErr_SetString(PyExc_TypeError, "an event is an 8-tuple");
        return -1;
    }
    ev->ts = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(t, 0));
    ev->type = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 1));
    ev->server_id = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(t, 2));
    ev->size = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 3));
    ev->log_pos = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 4));
    ev->flags = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 5));
    ev->s = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 6));
    ev->e = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 7));
    if (PyErr_Occurred()) return -1;
    if (ev->s < 0 || ev->e > len || ev->e - ev->s < 19) {
        PyErr_SetString(PyExc_ValueError, "an event outside its batch's bytes");
        return -1;
    }
    return 0;
}

static void close_payload(EventsObject *it) {
    Py_CLEAR(it->pl_raw);
    Py_CLEAR(it->pl_data);
    Py_CLEAR(it->pl_evs);
}

/* Steps until an event for Python (``*hand``, in the buffer ``*hand_buf``), the window's
 * end, a heartbeat, a full list of records, or the batch's end. */
static int run(EventsObject *it, PyObject **hand, PyObject **hand_buf) {
    Stream *L = &it->loop->s;
    for (;;) {
        Ev ev;
        const unsigned char *d;
        Py_ssize_t len;
        int csum, inner = it->pl_raw != NULL;
        if (inner) { /* a payload's events: as their own, with the payload's size and end */
            d = (const unsigned char *)PyBytes_AS_STRING(it->pl_raw);
            len = PyBytes_GET_SIZE(it->pl_raw);
            if (it->pl_p >= len) {
                close_payload(it);
                continue;
            }
            const unsigned char *h = d + it->pl_p;
            ev.ts = (unsigned long)fd_le(h, 4);
            ev.type = h[4];
            ev.server_id = (unsigned long)fd_le(h + 5, 4);
            ev.size = it->pl_size;
            ev.log_pos = it->pl_log_pos;
            ev.flags = (long long)fd_le(h + 17, 2) | FP_IN_PAYLOAD;
            ev.s = it->pl_p;
            ev.e = it->pl_p + (Py_ssize_t)fd_le(h + 9, 4); /* checked: fp_count_events */
            csum = 0;
        } else {
            if (it->i >= it->n) return END;
            d = (const unsigned char *)it->buf.buf;
            len = it->buf.len;
            if (it->at != NULL) { /* the header where it is */
                const unsigned char *h = d + it->at->at[2 * it->i];
                ev.ts = (unsigned long)fd_le(h, 4);
                ev.type = h[4];
                ev.server_id = (unsigned long)fd_le(h + 5, 4);
                ev.size = (long long)fd_le(h + 9, 4);
                ev.log_pos = (long long)fd_le(h + 13, 4);
                ev.flags = (long long)fd_le(h + 17, 2);
                ev.s = it->at->at[2 * it->i];
                ev.e = it->at->at[2 * it->i + 1];
            } else if (ev_of(PyList_GET_ITEM(it->evs, it->i), &ev, len) < 0)
                return FE_FAILED;
            csum = L->csum;
        }
        PyObject *opened = NULL;
        int r = fe_step(L, &ev, d, len, csum, it->records, &opened);
        if (r == FE_FAILED) return FE_FAILED;
        if (r == FE_OPENED) { /* its events next, as their own, then the batch's next */
            it->pl_raw = opened;
            it->pl_p = it->pl_k = 0;
            it->pl_size = ev.size;
            it->pl_log_pos = ev.log_pos;
            it->i++;
            continue;
        }
        if (r == FE_HAND) {
            if (inner) {
                if (it->pl_evs == NULL) { /* the payload as Python reads it (open_payload) */
                    PyObject *got = fp_inner_events(it->pl_raw, (unsigned long long)it->pl_size,
                                                    (unsigned long long)it->pl_log_pos, L->csum);
                    if (got == NULL) return FE_FAILED;
                    it->pl_data = Py_NewRef(PyTuple_GET_ITEM(got, 0));
                    it->pl_evs = Py_NewRef(PyTuple_GET_ITEM(got, 1));
                    Py_DECREF(got);
                }
                *hand = Py_NewRef(PyList_GET_ITEM(it->pl_evs, it->pl_k));
                *hand_buf = it->pl_data;
            } else {
                *hand = it->at != NULL ? fs_event_tuple(it->at, it->i)
                                       : Py_NewRef(PyList_GET_ITEM(it->evs, it->i));
                if (*hand == NULL) return FE_FAILED;
                *hand_buf = it->data;
            }
        }
        if (inner) {
            it->pl_p = ev.e;
            it->pl_k++;
        } else {
            it->i++;
            /* a MySQL GTID's BEGIN, next in the batch: taken with it, not stepped to */
            if (r == FE_TAKEN && it->at != NULL && it->i < it->n &&
                fe_begin_after(L, ev.type, d, len, it->at->at[2 * it->i],
                               it->at->at[2 * it->i + 1], csum))
                it->i++;
        }
        if (r != FE_TAKEN) return r;
        if (PyList_GET_SIZE(it->records) >= MAX_RECORDS) return FULL;
    }
}

static int push(EventsObject *it, PyObject *item) {
    if (item == NULL) return -1;
    it->queue[it->qn++] = item;
    return 0;
}

static int push_own(EventsObject *it, int type, PyObject *obj) {
    return push(it, Py_BuildValue("(iiiiiiOi)", 0, type, 0, 0, 0, 0, obj, 0));
}

static PyObject *events_next(EventsObject *it) {
    if (it->qi == it->qn && !it->finished) {
        Stream *L = &it->loop->s;
        PyObject *hand = NULL, *hand_buf = NULL;
        it->qi = it->qn = 0;
        if (ft_in(&L->st, L->state, L->mysql) < 0) return NULL;
        int r = run(it, &hand, &hand_buf);
        if (r == FE_FAILED || ft_out(&L->st, L->state) < 0) {
            Py_XDECREF(hand);
            return NULL;
        }
        int rc = 0;
        if (PyList_GET_SIZE(it->records)) {
            rc = push_own(it, L_RECORDS, it->records);
            Py_SETREF(it->records, PyList_New(0));
            if (it->records == NULL) rc = -1;
        }
        if (r == FE_HAND) {
            if (rc == 0 && hand_buf != it->py_data) {
                rc = push_own(it, L_DATA, hand_buf);
                Py_SETREF(it->py_data, Py_NewRef(hand_buf));
            }
            if (rc == 0) rc = push(it, hand);
            else Py_DECREF(hand);
        } else if (r == FE_DONE) {
            it->finished = 1;
            if (rc == 0) rc = push_own(it, L_DONE, Py_None);
        } else if (r == FE_BEAT) {
            if (rc == 0) rc = push_own(it, L_BEAT, Py_None);
        } else if (r == END)
            it->finished = 1;
        if (rc < 0) return NULL;
    }
    if (it->qi == it->qn) return NULL; /* StopIteration */
    PyObject *item = it->queue[it->qi];
    it->queue[it->qi++] = NULL;
    return item;
}

static void events_dealloc(EventsObject *it) {
    if (it->data != NULL) PyBuffer_Release(&it->buf);
    for (int k = it->qi; k < it->qn; k++) Py_XDECREF(it->queue[k]);
    close_payload(it);
    Py_XDECREF(it->py_data);
    Py_XDECREF(it->records);
    Py_XDECREF(it->evs);
    Py_XDECREF(it->data);
    Py_XDECREF(it->loop);
    PyObject_Free(it);
}

PyTypeObject FL_EventsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sparkcdc.mysql.binlog._fastdecode.Events",
    .tp_basicsize = sizeof(EventsObject),
    .tp_dealloc = (destructor)events_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One batch's events as the reader's Python loop reads them (Loop.events).",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)events_next,
};

/* -- the loop ------------------------------------------------------------------------------- */

/* Loop.events(data, events) -> an iterator over what the reader's loop takes of the batch */
static PyObject *loop_events(LoopObject *L, PyObject *args) {
    PyObject *data, *evs;
    if (!PyArg_ParseTuple(args, "OO", &data, &evs)) return NULL;
    EventsObject *it = PyObject_New(EventsObject, &FL_EventsType);
    if (it == NULL) return NULL;
    memset((char *)it + sizeof(PyObject), 0, sizeof(EventsObject) - sizeof(PyObject));
    it->loop = (LoopObject *)Py_NewRef(L);
    int in_place = Py_IS_TYPE(evs, &FS_EventListType) &&
                   ((EventListObject *)evs)->data == data;
    it->evs = PyList_Check(evs) || in_place ? Py_NewRef(evs) : PySequence_List(evs);
    it->records = PyList_New(0);
    if (it->evs == NULL || it->records == NULL ||
        PyObject_GetBuffer(data, &it->buf, PyBUF_SIMPLE) < 0) {
        Py_DECREF(it);
        return NULL;
    }
    it->at = in_place ? (EventListObject *)it->evs : NULL;
    it->n = in_place ? it->at->n : PyList_GET_SIZE(it->evs);
    it->data = Py_NewRef(data);
    it->py_data = Py_NewRef(data);
    return (PyObject *)it;
}

/* Loop.formats(csum, query_post, table_id_len): what a FORMAT_DESCRIPTION said */
static PyObject *loop_formats(LoopObject *self, PyObject *args) {
    Stream *L = &self->s;
    int csum, qpost, tid_len;
    if (!PyArg_ParseTuple(args, "iii", &csum, &qpost, &tid_len)) return NULL;
    if (csum < 0 || csum > 8 || qpost < 0 || tid_len < 1 || tid_len > 8) {
        PyErr_SetString(PyExc_ValueError, "Loop.formats: bad checksum, post-header or table "
                                          "id length");
        return NULL;
    }
    L->csum = csum;
    L->qpost = qpost;
    L->tid_len = tid_len;
    Py_RETURN_NONE;
}

static void loop_dealloc(LoopObject *self) {
    Stream *L = &self->s;
    ft_clear(&L->st);
    ft_makers_clear(&L->makers);
    fp_zstd_free(L->zctx);
    Py_XDECREF(L->state);
    Py_XDECREF(L->maps);
    Py_XDECREF(L->cache);
    Py_XDECREF(L->schemas);
    Py_XDECREF(L->fitted);
    Py_XDECREF(L->decoder);
    Py_XDECREF(L->by_map);
    Py_XDECREF(L->njson_of);
    Py_XDECREF(L->beat);
    Py_XDECREF(L->sid);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Loop(state, maps, cache, schemas, fitted | None, decoder, end_key | None, heartbeat | None,
 *      beat, flavor, record_type, offset_type, ops, csum, query_post, table_id_len) */
static PyObject *loop_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *state, *maps, *cache, *schemas, *fitted, *decoder, *end_key, *heartbeat, *beat,
        *flavor, *record_type, *offset_type, *ops;
    int csum, qpost, tid_len;
    if (!PyArg_ParseTuple(args, "OO!O!O!OOOOO!UOOO!iii", &state, &PyDict_Type, &maps,
                          &PyDict_Type, &cache, &PyDict_Type, &schemas, &fitted, &decoder,
                          &end_key, &heartbeat, &PyList_Type, &beat, &flavor, &record_type,
                          &offset_type, &PyTuple_Type, &ops, &csum, &qpost, &tid_len))
        return NULL;
    if ((fitted != Py_None && !PyDict_Check(fitted)) || PyList_GET_SIZE(beat) < 1 ||
        (end_key != Py_None && (!PyTuple_Check(end_key) || PyTuple_GET_SIZE(end_key) != 4))) {
        PyErr_SetString(PyExc_TypeError, "Loop: fitted a dict or None, beat a list, end_key a "
                                         "4-tuple or None");
        return NULL;
    }
    LoopObject *self = (LoopObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Stream *L = &self->s;
    L->state = Py_NewRef(state);
    L->maps = Py_NewRef(maps);
    L->cache = Py_NewRef(cache);
    L->schemas = Py_NewRef(schemas);
    L->fitted = Py_NewRef(fitted);
    L->decoder = Py_NewRef(decoder);
    L->beat = Py_NewRef(beat);
    L->mysql = PyUnicode_CompareWithASCIIString(flavor, "mysql") == 0;
    L->csum = csum;
    L->qpost = qpost;
    L->tid_len = tid_len;
    if ((L->by_map = PyObject_GetAttrString(decoder, "_by_map")) == NULL ||
        (L->njson_of = PyObject_GetAttrString(decoder, "_njson")) == NULL ||
        ft_makers(&L->makers, record_type, offset_type, flavor, ops) < 0)
        goto fail;
    PyObject *zstd = PyObject_GetAttrString(decoder, "zstd_in_c"); /* False: zstandard's */
    if (zstd == NULL || (L->zstd = PyObject_IsTrue(zstd)) < 0) {
        Py_XDECREF(zstd);
        goto fail;
    }
    Py_DECREF(zstd);
    L->zstd = L->zstd && fp_zstd_ready();
    if (!PyDict_Check(L->by_map) || !PyDict_Check(L->njson_of)) {
        PyErr_SetString(PyExc_TypeError, "Loop: the decoder's plans are not dicts");
        goto fail;
    }
    if (end_key != Py_None) {
        L->has_end = 1;
        for (int k = 0; k < 4; k++)
            if ((L->end[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(end_key, k))) == -1 &&
                PyErr_Occurred())
                goto fail;
    }
    if (heartbeat != Py_None) {
        L->tailing = 1;
        if ((L->heartbeat = PyFloat_AsDouble(heartbeat)) == -1.0 && PyErr_Occurred()) goto fail;
    }
    if (csum < 0 || csum > 8 || qpost < 0 || tid_len < 1 || tid_len > 8) {
        PyErr_SetString(PyExc_ValueError, "Loop: bad checksum, post-header or table id length");
        goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyMethodDef loop_methods[] = {
    {"events", (PyCFunction)loop_events, METH_VARARGS,
     "events(data, events) -> iterator: what the reader's loop takes of one batch"},
    {"formats", (PyCFunction)loop_formats, METH_VARARGS,
     "formats(csum, query_post, table_id_len): what a FORMAT_DESCRIPTION said"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject FL_LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sparkcdc.mysql.binlog._fastdecode.Loop",
    .tp_basicsize = sizeof(LoopObject),
    .tp_dealloc = (destructor)loop_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The binlog reader's event loop over one stream (reader.BinlogReader._consume).",
    .tp_new = loop_new,
    .tp_methods = loop_methods,
};

int fl_init(void) {
    if (PyType_Ready(&FL_LoopType) < 0 || PyType_Ready(&FL_EventsType) < 0) return -1;
    return fe_init();
}
