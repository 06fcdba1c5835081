/* _faststep.c: one event as the reader's loop takes it, for the event loop (_fastloop.c). */
#ifndef SPARKCDC_FASTSTEP_H
#define SPARKCDC_FASTSTEP_H
#include "_faststate.h"

/* What the loop knows of one stream (reader.BinlogReader._consume's locals). Strong
 * references. */
typedef struct {
    PyObject *state, *maps, *cache, *schemas, *fitted, *decoder, *by_map, *njson_of, *beat;
    Makers makers;
    State st;
    int mysql, has_end, tailing, csum, qpost, tid_len;
    long long end[4];
    double heartbeat;
    int zstd;                   /* payloads decompressed by libzstd (decoder.zstd_in_c) */
    void *zctx;                 /* ... with this context, made at the first one */
    PyObject *sid;              /* the last MySQL GTID's source ("uuid:"), of ... */
    unsigned char sid_raw[16];  /* ... these 16 bytes */
} Stream;

typedef struct { /* one event, as split_events gives it */
    unsigned long ts, server_id;
    int type;
    long long size, log_pos, flags;
    Py_ssize_t s, e;
} Ev;

/* A step's outcome: the loop took the event; Python takes it (nothing changed); the window
 * ended; a heartbeat is due; a TRANSACTION_PAYLOAD was opened (its events in ``*opened``);
 * an error was raised. */
enum { FE_TAKEN, FE_HAND, FE_DONE, FE_BEAT, FE_OPENED, FE_FAILED = -1 };

/* One event at d[ev->s:ev->e] (``csum`` checksum bytes at its end); records made go to
 * ``records``. */
int fe_step(Stream *L, const Ev *ev, const unsigned char *d, Py_ssize_t len, int csum,
            PyObject *records, PyObject **opened);
/* After an event of type ``prev_type`` the loop took: when that is a MySQL GTID and the event
 * at d[s:e] the QUERY ``BEGIN`` that opens its transaction, that event taken as fe_step would
 * take it, without a step of its own (MySQL writes one after every GTID; MariaDB's GTID
 * event stands for it): 1, else 0. */
int fe_begin_after(Stream *L, int prev_type, const unsigned char *d, Py_ssize_t len,
                   Py_ssize_t s, Py_ssize_t e, int csum);
int fe_init(void);

#endif
