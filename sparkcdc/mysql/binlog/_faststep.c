/* One binlog event as the reader's loop (reader.BinlogReader._consume) takes it, for the
 * event loop in C (_fastloop.c): a GTID event (MySQL's or MariaDB's) begins a transaction,
 * the BEGIN after a MySQL GTID marks it explicit, a TABLE_MAP already parsed is placed, a
 * captured rows event is checked against its CRC32, decoded (_fastrows.c) and made into
 * records (_faststate.c), an XID commits and the boundary after it moves the low key or
 * ends the window, and a TRANSACTION_PAYLOAD is opened and decompressed (by libzstd, or the
 * decoder's zstandard decompressor). Anything else, or
 * anything unusual, is FE_HAND: nothing changed, and Python's loop takes the event. */
#include "_faststep.h"
#include "_fastpayload.h"
#include "_fastrows.h"
#include "_faststream.h"
#include "_fastvalues.h"

#include <string.h>
#include <time.h>

enum { /* event types (protocol/codes.py) */
    T_QUERY = 2, T_ROTATE = 4, T_FD = 15, T_XID = 16, T_TABLE_MAP = 19, T_HEARTBEAT = 27,
    T_GTID = 33, T_ANONYMOUS_GTID = 34, T_PREVIOUS_GTIDS = 35, T_XA_PREPARE = 38,
    T_PARTIAL = 39, T_PAYLOAD = 40, T_MARIADB_GTID = 162, T_MARIADB_GTID_LIST = 163,
    T_QUERY_COMPRESSED = 165,
};
#define ARTIFICIAL 0x20

static PyObject *s_decompress, *s_key, *s_table_id, *s_dctx, *kw_decompress;

/* -- one step ------------------------------------------------------------------------------ */

static int cmp4(const long long *a, const long long *b) {
    for (int k = 0; k < 4; k++)
        if (a[k] != b[k]) return a[k] < b[k] ? -1 : 1;
    return 0;
}

/* After an event that may end a transaction (_consume's last lines): a boundary moves the
 * low key, ends the window, or makes a heartbeat due. */
static int boundary(Stream *L) {
    State *st = &L->st;
    if (st->in_txn) return FE_TAKEN;
    long long b[4] = {st->fidx, st->boundary_pos, 0, 0};
    if (L->has_end && cmp4(b, L->end) >= 0) return FE_DONE;
    if (cmp4(b, st->low) > 0) memcpy(st->low, b, sizeof b);
    if (L->tailing) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now); /* time.monotonic's clock */
        double last = PyFloat_AsDouble(PyList_GET_ITEM(L->beat, 0));
        if (last == -1.0 && PyErr_Occurred()) return FE_FAILED;
        if ((double)now.tv_sec + now.tv_nsec * 1e-9 - last >= L->heartbeat) return FE_BEAT;
    }
    return FE_TAKEN;
}

/* A bad event or a missing piece: Python takes the event (and names the problem). */
static int hand_if_error(void) {
    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
        return FE_FAILED;
    PyErr_Clear();
    return FE_HAND;
}

/* protocol.events.mariadb_inflate, looked up at the first compressed rows event */
static PyObject *inflate_fn;

static PyObject *inflate_function(void) {
    if (inflate_fn == NULL) {
        PyObject *m = PyImport_ImportModule("sparkcdc.mysql.binlog.protocol.events");
        if (m == NULL) return NULL;
        inflate_fn = PyObject_GetAttrString(m, "mariadb_inflate");
        Py_DECREF(m);
    }
    return inflate_fn;
}

/* A rows event; ``compressed``: MariaDB's log_bin_compress twin, its images deflated. */
static int row_event(Stream *L, const Ev *ev, const unsigned char *d, Py_ssize_t len,
                     int csum, int mode, int version, int compressed, PyObject *records) {
    State *st = &L->st;
    if (!st->in_txn) return FE_HAND;
    long long key[4] = {st->fidx, st->txn_pos, st->events, 0};
    if (L->has_end && cmp4(key, L->end) >= 0) {
        st->progress++;
        st->events++;
        return FE_DONE;
    }
    if (ev->s + 19 + L->tid_len > ev->e) return FE_HAND;
    PyObject *tid = PyLong_FromUnsignedLongLong(fd_le(d + ev->s + 19, L->tid_len));
    if (tid == NULL) return FE_FAILED;
    PyObject *tm = PyDict_GetItemWithError(L->maps, tid); /* borrowed */
    Py_DECREF(tid);
    if (tm == NULL) return PyErr_Occurred() ? FE_FAILED : FE_HAND;
    PyObject *skey = PyObject_GetAttr(tm, s_key);
    if (skey == NULL) return FE_FAILED;
    PyObject *schema = PyDict_GetItemWithError(L->schemas, skey);
    if (schema == NULL && PyErr_Occurred()) {
        Py_DECREF(skey);
        return FE_FAILED;
    }
    long long at[4] = {key[0], key[1], key[2], 0}, low[4] = {st->low[0], st->low[1], st->low[2], 0};
    int skip = schema == NULL || cmp4(at, low) < 0;
    if (skip) { /* uncaptured, or wholly before the start: never decoded */
        Py_DECREF(skey);
        st->progress++;
        st->events++;
        return FE_TAKEN;
    }
    int ok = schema != Py_None && !(csum && !(ev->flags & FP_IN_PAYLOAD) &&
                                    fs_crc_bad(d, ev->s, ev->e));
    if (ok && L->fitted != Py_None) { /* table events: its schema fits this table map */
        PyObject *f = PyDict_GetItemWithError(L->fitted, skey);
        if (f == NULL && PyErr_Occurred()) ok = -1;
        else ok = f == tm;
    }
    Py_DECREF(skey);
    if (ok <= 0) return ok < 0 ? FE_FAILED : FE_HAND;
    Py_ssize_t njson = 0;
    if (ev->type == T_PARTIAL) {
        PyObject *nj = PyDict_GetItemWithError(L->njson_of, tm);
        if (nj == NULL) return PyErr_Occurred() ? FE_FAILED : FE_HAND;
        if ((njson = PyLong_AsSsize_t(nj)) < 0) return PyErr_Occurred() ? FE_FAILED : FE_HAND;
    }
    PyObject *hit = PyDict_GetItemWithError(L->by_map, tm); /* (schema, plan) */
    if (hit == NULL) return PyErr_Occurred() ? FE_FAILED : FE_HAND;
    if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2 || PyTuple_GET_ITEM(hit, 0) != schema ||
        !PyObject_TypeCheck(PyTuple_GET_ITEM(hit, 1), &FR_PlanType))
        return FE_HAND;
    PyObject *decoded;
    if (compressed) { /* inflated by the system's zlib (Python's names a fault), then walked */
        PyObject *inflate = inflate_function();
        if (inflate == NULL) return FE_FAILED;
        decoded = fr_decode_compressed_event((PlanObject *)PyTuple_GET_ITEM(hit, 1), d, len,
                                             ev->s + 19, ev->e - csum, L->tid_len, version, mode,
                                             inflate);
    } else
        decoded = fr_decode_event((PlanObject *)PyTuple_GET_ITEM(hit, 1), d, len,
                                  ev->s + 19, ev->e - csum, L->tid_len, version,
                                  ev->type == T_PARTIAL ? 3 : mode, njson);
    if (decoded == NULL) return hand_if_error(); /* Python's loop names what is wrong */
    if (decoded == Py_None) {
        Py_DECREF(decoded);
        return FE_HAND;
    }
    PyObject *table_id = PyObject_GetAttr(schema, s_table_id);
    if (table_id == NULL) {
        Py_DECREF(decoded);
        return FE_FAILED;
    }
    long long evno = st->events;
    st->progress++;
    st->events++;
    int cut = ft_records(st, &L->makers, records, decoded, mode, table_id, evno,
                         L->has_end ? L->end : NULL);
    Py_DECREF(decoded);
    Py_DECREF(table_id);
    return cut < 0 ? FE_FAILED : cut ? FE_DONE : FE_TAKEN;
}

static int table_map(Stream *L, const Ev *ev, const unsigned char *d, int csum) {
    if (ev->e - csum < ev->s + 19) return FE_HAND;
    PyObject *body = PyBytes_FromStringAndSize((const char *)d + ev->s + 19,
                                               ev->e - csum - ev->s - 19);
    if (body == NULL) return FE_FAILED;
    PyObject *tm = PyDict_GetItemWithError(L->cache, body);
    Py_DECREF(body);
    if (tm == NULL) return PyErr_Occurred() ? FE_FAILED : FE_HAND; /* parsed (and checked) by Python */
    PyObject *tid = PyObject_GetAttr(tm, s_table_id);
    if (tid == NULL) return FE_FAILED;
    int rc = PyDict_SetItem(L->maps, tid, tm);
    Py_DECREF(tid);
    if (rc < 0) return FE_FAILED;
    L->st.progress++;
    return FE_TAKEN;
}

static int gtid_event(Stream *L, const Ev *ev, const unsigned char *d) {
    State *st = &L->st;
    long long start = ev->log_pos - ev->size;
    PyObject *gtid = NULL;
    int explicit_ = 0;
    const unsigned char *b = d + ev->s + 19;
    if (ev->type == T_MARIADB_GTID) {
        if (ev->e - ev->s < 19 + 13) return FE_HAND;
        unsigned long long parts[3] = {fd_le(b + 8, 4), ev->server_id, fd_le(b, 8)};
        gtid = ft_text(NULL, parts, 3, '-', NULL); /* domain-server-sequence */
        explicit_ = !(b[12] & 1);
    } else if (ev->type == T_GTID) {
        if (ev->e - ev->s < 19 + 25) return FE_HAND;
    }
    long long at[4] = {st->fidx, start, 0, 0};
    st->progress++;
    if (L->has_end && cmp4(at, L->end) >= 0) {
        Py_XDECREF(gtid);
        return FE_DONE;
    }
    if (ev->type == T_MARIADB_GTID) {
        if (gtid == NULL) return FE_FAILED;
        ft_begin(st, start, gtid, (long long)ev->ts, explicit_);
    } else if (ev->type == T_ANONYMOUS_GTID) {
        ft_begin(st, start, NULL, (long long)ev->ts, 0);
    } else { /* MySQL's: its source ("uuid:") and number (protocol.mysql_gtid_parts) */
        const unsigned char *u = b + 1;
        unsigned long long gno = fd_le(b + 17, 8);
        if (L->sid == NULL || memcmp(L->sid_raw, u, 16) != 0) { /* a source seen anew */
            static const char hex[] = "0123456789abcdef";
            char text[37];
            int k = 0;
            for (int i = 0; i < 16; i++) {
                if (i == 4 || i == 6 || i == 8 || i == 10) text[k++] = '-';
                text[k++] = hex[u[i] >> 4];
                text[k++] = hex[u[i] & 15];
            }
            text[k++] = ':';
            Py_XSETREF(L->sid, PyUnicode_FromStringAndSize(text, k));
            if (L->sid == NULL) return FE_FAILED;
            memcpy(L->sid_raw, u, 16);
        }
        if (st->fast_sid != NULL && L->sid != st->fast_sid) { /* the set's own object, so */
            int same = PyUnicode_Compare(L->sid, st->fast_sid); /* commits compare by identity */
            if (same == -1 && PyErr_Occurred()) return FE_FAILED;
            if (same == 0) Py_SETREF(L->sid, Py_NewRef(st->fast_sid));
        }
        PyObject *sid = Py_NewRef(L->sid);
        gtid = ft_text(sid, &gno, 1, 0, NULL);
        if (gtid == NULL) {
            Py_DECREF(sid);
            return FE_FAILED;
        }
        ft_begin(st, start, gtid, (long long)ev->ts, 0);
        Py_SETREF(st->txn_sid, sid);
        st->txn_gno = (long long)gno;
    }
    return FE_TAKEN;
}

/* A TRANSACTION_PAYLOAD opened, decompressed and checked; anything unusual is Python's. */
static int payload(Stream *L, const Ev *ev, const unsigned char *d, int csum,
                   PyObject **opened) {
    PayloadHeader h;
    if (csum && fs_crc_bad(d, ev->s, ev->e)) return FE_HAND;
    if (fp_header(d, ev->s + 19, ev->e - csum, &h) < 0) return hand_if_error();
    PyObject *raw = NULL;
    if (h.compression == FP_ZSTD && h.have_uncompressed && L->zstd) { /* libzstd, in C */
        raw = fp_unzstd(&L->zctx, d + h.p, (Py_ssize_t)h.size, h.uncompressed);
        if (raw == NULL) return hand_if_error(); /* Python's zstandard names the problem */
    } else if (h.compression == FP_ZSTD && h.have_uncompressed) {
        PyObject *dctx = PyObject_GetAttr(L->decoder, s_dctx);
        if (dctx == NULL) return FE_FAILED;
        if (dctx == Py_None) { /* made by Python's open_payload, at the first payload */
            Py_DECREF(dctx);
            return FE_HAND;
        }
        PyObject *view = PyMemoryView_FromMemory((char *)d + h.p, (Py_ssize_t)h.size, PyBUF_READ);
        PyObject *unc = PyLong_FromUnsignedLongLong(h.uncompressed);
        if (view != NULL && unc != NULL) {
            PyObject *args[5] = {NULL, dctx, view, unc, Py_False};
            raw = PyObject_VectorcallMethod(s_decompress, args + 1,
                                            2 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw_decompress);
        }
        Py_DECREF(dctx);
        Py_XDECREF(view);
        Py_XDECREF(unc);
        if (raw == NULL) return hand_if_error();
    } else if (h.compression == FP_NONE) {
        raw = PyBytes_FromStringAndSize((const char *)d + h.p, (Py_ssize_t)h.size);
        if (raw == NULL) return FE_FAILED;
    } else
        return FE_HAND;
    if (!PyBytes_Check(raw) || (h.have_uncompressed &&
                                (uint64_t)PyBytes_GET_SIZE(raw) != h.uncompressed) ||
        fp_count_events((const unsigned char *)PyBytes_AS_STRING(raw),
                        PyBytes_GET_SIZE(raw)) < 0) {
        Py_DECREF(raw);
        return PyErr_Occurred() ? hand_if_error() : FE_HAND;
    }
    L->st.progress++;
    *opened = raw;
    return FE_OPENED;
}

/* The QUERY event at d[s:e], taken if it is the BEGIN of the transaction its GTID began: 1,
 * else 0 (any other statement, or no transaction open: Python's). */
static int take_begin(Stream *L, const unsigned char *d, Py_ssize_t len, Py_ssize_t s,
                      Py_ssize_t e, int csum) {
    if (!L->st.in_txn || !fs_is_begin(d, len, s, e, csum, L->qpost)) return 0;
    L->st.progress++;
    L->st.explicit_ = 1;
    return 1;
}

int fe_begin_after(Stream *L, int prev_type, const unsigned char *d, Py_ssize_t len,
                   Py_ssize_t s, Py_ssize_t e, int csum) {
    if ((prev_type != T_GTID && prev_type != T_ANONYMOUS_GTID) || s < 0 || e > len ||
        e - s < 19)
        return 0;
    const unsigned char *h = d + s; /* fe_step's checks of an event it would step to */
    if (h[4] != T_QUERY || fd_le(h + 13, 4) == 0 || fd_le(h + 17, 2) & ARTIFICIAL) return 0;
    return take_begin(L, d, len, s, e, csum);
}

/* One event, as _consume's loop takes it; ``csum``: the checksum bytes at its end. */
int fe_step(Stream *L, const Ev *ev, const unsigned char *d, Py_ssize_t len, int csum,
            PyObject *records, PyObject **opened) {
    State *st = &L->st;
    int t = ev->type, r;
    switch (t) {
    case T_HEARTBEAT:
        return L->tailing ? FE_HAND : FE_TAKEN;
    case T_ROTATE:
    case T_FD:
        return FE_HAND;
    case 5: case 13: case 14: case 17: case 18: case 29: case 160: /* IGNORED_EVENTS */
        return FE_TAKEN;
    }
    if (ev->log_pos == 0 || ev->flags & ARTIFICIAL) return FE_TAKEN;
    switch (t) {
    case 23: return row_event(L, ev, d, len, csum, 0, 1, 0, records);
    case 24: return row_event(L, ev, d, len, csum, 2, 1, 0, records);
    case 25: return row_event(L, ev, d, len, csum, 1, 1, 0, records);
    case 30: return row_event(L, ev, d, len, csum, 0, 2, 0, records);
    case 31: case T_PARTIAL: return row_event(L, ev, d, len, csum, 2, 2, 0, records);
    case 32: return row_event(L, ev, d, len, csum, 1, 2, 0, records);
    /* MariaDB's compressed twins (log_bin_compress): WRITE, UPDATE, DELETE, v1 then v2 */
    case 166: return row_event(L, ev, d, len, csum, 0, 1, 1, records);
    case 167: return row_event(L, ev, d, len, csum, 2, 1, 1, records);
    case 168: return row_event(L, ev, d, len, csum, 1, 1, 1, records);
    case 169: return row_event(L, ev, d, len, csum, 0, 2, 1, records);
    case 170: return row_event(L, ev, d, len, csum, 2, 2, 1, records);
    case 171: return row_event(L, ev, d, len, csum, 1, 2, 1, records);
    case T_TABLE_MAP: return table_map(L, ev, d, csum);
    case T_MARIADB_GTID: case T_GTID: case T_ANONYMOUS_GTID: return gtid_event(L, ev, d);
    case T_PAYLOAD: return payload(L, ev, d, csum, opened);
    case T_XID:
        if ((r = ft_commit(st, L->mysql, ev->log_pos)) <= 0) return r < 0 ? FE_FAILED : FE_HAND;
        st->progress++;
        return boundary(L);
    case T_QUERY: /* BEGIN inside a transaction its GTID began; any other statement: Python */
        return take_begin(L, d, len, ev->s, ev->e, csum) ? FE_TAKEN : FE_HAND;
    case T_XA_PREPARE: case T_PREVIOUS_GTIDS: case T_MARIADB_GTID_LIST: case T_QUERY_COMPRESSED:
        return FE_HAND;
    }
    st->progress++;  /* format description, checkpoint, stop... */
    if (st->in_txn) return FE_TAKEN;
    st->boundary_pos = ev->log_pos;
    return boundary(L);
}


int fe_init(void) {
    return (s_decompress = PyUnicode_InternFromString("decompress")) == NULL ||
                   (s_key = PyUnicode_InternFromString("key")) == NULL ||
                   (s_table_id = PyUnicode_InternFromString("table_id")) == NULL ||
                   (s_dctx = PyUnicode_InternFromString("_dctx")) == NULL ||
                   (kw_decompress = Py_BuildValue("(ss)", "max_output_size",
                                                  "allow_extra_data")) == NULL
               ? -1 : ft_init();
}
