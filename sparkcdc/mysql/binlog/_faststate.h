/* _faststate.c: where the reader is (read_state.ReadState's fields, and its transactions'
 * begin and commit with the GTID state they move) and the records of a rows event with their
 * offsets (event_records.py), for the event loop (_fastloop.c). */
#ifndef SPARKCDC_FASTSTATE_H
#define SPARKCDC_FASTSTATE_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

/* ReadState's fields while the loop runs: read from it each time the loop is entered
 * (ft_in) and written back each time it hands Python something (ft_out); between the two,
 * Python does not look at them. Strong references. */
typedef struct {
    PyObject *file, *server, *gtid, *txn_gtid, *txn_gtid_before, *txn_sid;
    PyObject *domains; /* MariaDB: ReadState._mariadb_domains itself (the same dict) */
    PyObject *gset;    /* MySQL: ReadState._mysql_set (None until Python's first commit) */
    long long fidx, boundary_pos, txn_pos, txn_ts, events, progress, txn_gno;
    long long low[4];
    int in_txn, explicit_;
    /* the GTID set's next GTID (GtidSet.fast_next): its source, the last number, the
     * text around the next one; ``advanced``: the loop added numbers GtidSet must learn */
    PyObject *fast_sid, *fast_head, *fast_tail, *fast_text;
    long long fast_last;
    int advanced;
} State;

/* What records are made of, fixed for a stream. */
typedef struct {
    PyObject *record_type, *offset_type, *flavor;
    PyObject *ops[3];      /* by mode: insert, delete, update */
    PyObject *slots[7];    /* ChangeRecord's member descriptors (NULL: call the type) */
    PyObject *oslots[7];   /* BinlogOffset's (NULL: set by name in its __dict__) */
} Makers;

int ft_in(State *st, PyObject *rs, int mysql);
int ft_out(State *st, PyObject *rs);
void ft_clear(State *st);
int ft_makers(Makers *m, PyObject *record_type, PyObject *offset_type, PyObject *flavor,
              PyObject *ops);
void ft_makers_clear(Makers *m);
/* ReadState.begin (``gtid``: a new reference, or NULL for None) */
void ft_begin(State *st, long long pos, PyObject *gtid, long long ts, int explicit_);
/* ReadState.commit when the loop can grow the GTID state itself: 1 done, 0 left to Python
 * (nothing changed), -1 an error */
int ft_commit(State *st, int mysql, long long end_pos);
/* The records of one decoded rows event at (fidx, txn_pos, ev, 0), as event_records.py
 * makes them, appended to ``out``: 1 when ``end`` (or NULL) cut the event short, 0 when
 * not, -1 on an error. */
int ft_records(State *st, Makers *m, PyObject *out, PyObject *decoded, int mode,
               PyObject *table_id, long long ev, const long long *end);
/* ``a`` + the numbers ``nums`` (``sep`` between them) + ``b`` (a, b: ASCII str or NULL)
 * as one str, without a format string; NULL without an error when a or b is not ASCII. */
PyObject *ft_text(PyObject *a, const unsigned long long *nums, int count, char sep, PyObject *b);
int ft_init(void);

#endif
