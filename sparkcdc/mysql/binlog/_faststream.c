/* The replication stream's bytes as events: MySQL packets split into whole binlog events
 * (split_events), a MySQL GTID event and the BEGIN after it folded into one (fold_begins),
 * and the CRC32 an event ends with (fs_crc32, for the event loop, _fastloop.c). The
 * Python twins are protocol/dump_stream.py's split_events and protocol/events.py's
 * fold_begins. */
#include "_faststream.h"
#include "_fastvalues.h"

#include <string.h>

/* -- the replication stream: packets to events ------------------------------------------- */

/* -- the events of a batch, kept as where they are ------------------------------------------ */

/* Event i as (timestamp, type, server_id, event_size, log_pos, flags, start, end). */
PyObject *fs_event_tuple(EventListObject *l, Py_ssize_t i) {
    if (i < 0 || i >= l->n) {
        PyErr_SetString(PyExc_IndexError, "event index out of range");
        return NULL;
    }
    const unsigned char *e = (const unsigned char *)l->buf.buf + l->at[2 * i];
    return Py_BuildValue("(kikkkinn)", (unsigned long)fd_le(e, 4), (int)e[4],
                         (unsigned long)fd_le(e + 5, 4), (unsigned long)fd_le(e + 9, 4),
                         (unsigned long)fd_le(e + 13, 4), (int)fd_le(e + 17, 2), l->at[2 * i],
                         l->at[2 * i + 1]);
}

static Py_ssize_t el_length(EventListObject *l) { return l->n; }

static void el_dealloc(EventListObject *l) {
    if (l->data != NULL) PyBuffer_Release(&l->buf);
    Py_XDECREF(l->data);
    PyMem_Free(l->at);
    PyObject_Free(l);
}

static PySequenceMethods el_sequence = {
    .sq_length = (lenfunc)el_length,
    .sq_item = (ssizeargfunc)fs_event_tuple,
};

PyTypeObject FS_EventListType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sparkcdc.mysql.binlog._fastdecode.EventList",
    .tp_basicsize = sizeof(EventListObject),
    .tp_dealloc = (destructor)el_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A batch's events where they are in its bytes; each read as the 8-tuple "
              "split_events describes (the compiled event loop reads them in place).",
    .tp_as_sequence = &el_sequence,
};

/* split_events(buf, pos, seq) -> (events, pos, seq, status)
 *
 * Walks the MySQL packets of ``buf`` from ``pos`` while they are whole binlog events (an OK
 * byte, then the event) of less than 16 MB with the expected sequence number. ``events`` is
 * a sequence (EventList) of (timestamp, type, server_id, event_size, log_pos, flags, start,
 * end) with each event's bytes at buf[start:end]; the tuples are made when read, and the
 * compiled event loop reads the headers in place instead. status 0: the packet at ``pos``
 * is not complete yet (read more); 2: the packet at ``pos`` is one the caller handles itself
 * (an error, the EOF of a non-blocking dump, an event of 16 MB or more, a wrong sequence
 * number, a malformed packet). */
PyObject *fs_py_split_events(PyObject *self, PyObject *args) {
    PyObject *data;
    Py_ssize_t pos, cap = 0;
    int seq, status = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oni", &data, &pos, &seq)) return NULL;
    EventListObject *l = PyObject_New(EventListObject, &FS_EventListType);
    if (l == NULL) return NULL;
    l->data = NULL;
    l->at = NULL;
    l->n = 0;
    if (PyObject_GetBuffer(data, &l->buf, PyBUF_SIMPLE) < 0) {
        Py_DECREF(l);
        return NULL;
    }
    l->data = Py_NewRef(data);
    const unsigned char *d = (const unsigned char *)l->buf.buf;
    Py_ssize_t len = l->buf.len;
    if (pos < 0 || pos > len) {
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        goto fail;
    }
    for (;;) {
        if (len - pos < 4) break;
        Py_ssize_t n = (Py_ssize_t)fd_le(d + pos, 3);
        if (d[pos + 3] != (unsigned char)seq || n >= 0xFFFFFF) {
            status = 2;
            break;
        }
        if (len - pos - 4 < n) break;
        const unsigned char *e = d + pos + 4;
        if (n < 20 || e[0] != 0 || fd_le(e + 10, 4) != (uint64_t)(n - 1)) {
            status = 2;
            break;
        }
        if (l->n == cap) {
            cap = cap ? 2 * cap : 256;
            Py_ssize_t *at = PyMem_Realloc(l->at, (size_t)cap * 2 * sizeof(Py_ssize_t));
            if (at == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            l->at = at;
        }
        l->at[2 * l->n] = pos + 5;
        l->at[2 * l->n + 1] = pos + 4 + n;
        l->n++;
        seq = (seq + 1) & 0xFF;
        pos += 4 + n;
    }
    return Py_BuildValue("(Nnii)", (PyObject *)l, pos, seq, status);
fail:
    Py_DECREF(l);
    return NULL;
}

/* Whether the QUERY event at d[start:end] (``csum`` checksum bytes at its end, the QUERY
 * post-header ``qpost`` bytes long) has the statement ``BEGIN``, exactly as servers write it. */
int fs_is_begin(const unsigned char *d, Py_ssize_t len, Py_ssize_t start, Py_ssize_t end,
                    Py_ssize_t csum, Py_ssize_t qpost) {
    Py_ssize_t b = start + 19;
    if (start < 0 || end > len || b + 13 > end || qpost < 13) return 0;
    Py_ssize_t stmt = b + qpost + (Py_ssize_t)(d[b + 11] | d[b + 12] << 8) + d[b + 8] + 1;
    return end - csum - stmt == 5 && memcmp(d + stmt, "BEGIN", 5) == 0;
}

/* fold_begins(data, events, csum, query_post) -> events: each MySQL GTID or anonymous GTID
 * event directly followed by the QUERY event ``BEGIN`` that opens its transaction, as one
 * event of type 256 + the GTID's type with the GTID event's own fields. MySQL writes both
 * for every transaction (MariaDB's GTID event stands for its BEGIN), and the reader's loop
 * over events runs in Python: folded, it takes the same steps per transaction on both
 * servers. ``csum`` and ``query_post`` hold until a FORMAT_DESCRIPTION or ROTATE event,
 * after which nothing is folded (the caller passes the ones it knows at the list's start).
 * With ``lead``, the type of the event just before the list (a TRANSACTION_PAYLOAD's events
 * follow their GTID event), a first event ``BEGIN`` after a GTID becomes one of type 256 +
 * QUERY (its own fields). A statement written any other way is left to the caller. */
PyObject *fs_py_fold_begins(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *evs;
    Py_ssize_t csum, qpost;
    int lead = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*Onn|i", &buf, &evs, &csum, &qpost, &lead)) return NULL;
    PyObject *seq = PySequence_Fast(evs, "events are a sequence");
    if (seq == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    evs = seq;
    const unsigned char *d = (const unsigned char *)buf.buf;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(evs), i;
    int folding = 1;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto fail;
    for (i = 0; i < n; i++) {
        PyObject *ev = PySequence_Fast_GET_ITEM(evs, i);
        if (!PyTuple_Check(ev) || PyTuple_GET_SIZE(ev) != 8) {
            PyErr_SetString(PyExc_ValueError, "an event is an 8-tuple");
            goto fail;
        }
        long type = PyLong_AsLong(PyTuple_GET_ITEM(ev, 1));
        if (type == -1 && PyErr_Occurred()) goto fail;
        if (type == 15 || type == 4) folding = 0;  /* FORMAT_DESCRIPTION, ROTATE */
        /* a payload's first event: the BEGIN of the transaction its GTID (``lead``) began */
        int opens = i == 0 && (lead == 33 || lead == 34) && type == 2;
        if (folding && (opens || ((type == 33 || type == 34) && i + 1 < n))) {
            PyObject *q = PySequence_Fast_GET_ITEM(evs, opens ? i : i + 1);
            if (PyTuple_Check(q) && PyTuple_GET_SIZE(q) == 8 &&
                PyLong_AsLong(PyTuple_GET_ITEM(q, 1)) == 2) {
                Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(q, 6));
                Py_ssize_t e = PyLong_AsSsize_t(PyTuple_GET_ITEM(q, 7));
                if (PyErr_Occurred()) goto fail;
                if (fs_is_begin(d, buf.len, s, e, csum, qpost)) {
                    PyObject *folded = PyTuple_New(8);
                    if (folded == NULL) goto fail;
                    for (Py_ssize_t k = 0; k < 8; k++) {
                        PyObject *item = k == 1 ? PyLong_FromLong(256 + type)
                                                : Py_NewRef(PyTuple_GET_ITEM(ev, k));
                        if (item == NULL) {
                            Py_DECREF(folded);
                            goto fail;
                        }
                        PyTuple_SET_ITEM(folded, k, item);
                    }
                    int rc = PyList_Append(out, folded);
                    Py_DECREF(folded);
                    if (rc < 0) goto fail;
                    if (!opens) i++;
                    continue;
                }
            }
        }
        if (PyList_Append(out, ev) < 0) goto fail;
    }
    Py_DECREF(seq);
    PyBuffer_Release(&buf);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    PyBuffer_Release(&buf);
    return NULL;
}

/* -- CRC32 (zlib's, slicing by 8) ---------------------------------------------------------- */

static uint32_t crc_table[8][256];

uint32_t fs_crc32(const unsigned char *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t a = c ^ (uint32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][a & 0xFF] ^ crc_table[6][(a >> 8) & 0xFF] ^
            crc_table[5][(a >> 16) & 0xFF] ^ crc_table[4][a >> 24] ^
            crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

int fs_crc_bad(const unsigned char *d, Py_ssize_t start, Py_ssize_t end) {
    if (end - start < 4) return 1;
    return fs_crc32(d + start, end - start - 4) != (uint32_t)fd_le(d + end - 4, 4);
}

int fs_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = crc_table[0][crc_table[t - 1][i] & 0xFF] ^ (crc_table[t - 1][i] >> 8);
    return PyType_Ready(&FS_EventListType);
}
