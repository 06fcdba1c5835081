/* The compiled decoder's module, sparkcdc.mysql.binlog._fastdecode: what each of its files
 * offers Python, in one method table. The files, each under the ones that use it:
 * _fastloop.c (the reader's event loop) over _faststep.c (one event) and _faststate.c (the
 * reader's place, its records), _fastrows.c (row images, the plan type) over
 * _fastcols.c (one column's value) and _fastjsondiff.c (partial JSON updates),
 * _faststream.c (packets to events, CRC32), _fastpayload.c (TRANSACTION_PAYLOAD, zstd),
 * _fastjson.c (MySQL's binary JSON: its tree, the entry points) over _fastjsontext.c (a value
 * as text, which _fastjsondiff.c prints with too; its doubles' digits from _fastdouble.c),
 * _fastvalues.c (integers and DECIMALs).
 * fastdecode.py is the Python side. */
#include "_fastcols.h"
#include "_fastjson.h"
#include "_fastjsondiff.h"
#include "_fastloop.h"
#include "_fastpayload.h"
#include "_fastrows.h"
#include "_faststream.h"

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))fr_py_decode, METH_VARARGS,
     "decode(plan, data, mode) -> list of (before, after); mode 0 insert, 1 delete, 2 update"},
    {"decode_event", (PyCFunction)(void (*)(void))fr_py_decode_event, METH_VARARGS,
     "decode_event(plan, data, start, end, table_id_len, version, mode) -> list of "
     "(before, after), or None when a columns-present bitmap lacks a column"},
    {"split_events", (PyCFunction)(void (*)(void))fs_py_split_events, METH_VARARGS,
     "split_events(buf, pos, seq) -> (events, pos, seq, status): the whole binlog events "
     "of a replication stream's bytes"},
    {"fold_begins", (PyCFunction)(void (*)(void))fs_py_fold_begins, METH_VARARGS,
     "fold_begins(data, events, csum, query_post, lead=0) -> events: a MySQL GTID event and the "
     "BEGIN after it as one event of type 256 + the GTID's"},
    {"json_text", (PyCFunction)fj_py_text, METH_O,
     "json_text(stored JSON bytes) -> str: MySQL's text (json_binary.to_text)"},
    {"json_tree", (PyCFunction)fj_py_tree, METH_O,
     "json_tree(stored JSON bytes) -> dict | list | str (json_binary.parse)"},
    {"json_render", (PyCFunction)fj_py_render, METH_O,
     "json_render(tree) -> str (json_binary.render)"},
    {"json_apply_diffs", (PyCFunction)(void (*)(void))fjd_py_apply, METH_VARARGS,
     "json_apply_diffs(stored JSON bytes, diff vector bytes) -> str, or None where json_diff "
     "is to decide (json_diff.apply)"},
    {"payload_header", (PyCFunction)(void (*)(void))fp_payload_header, METH_VARARGS,
     "payload_header(data, start, end) -> (compression, size, uncompressed | None, payload "
     "start) of a TRANSACTION_PAYLOAD body (transaction_payload.read_header)"},
    {"zstd_in_c", (PyCFunction)fp_py_zstd_ready, METH_NOARGS,
     "zstd_in_c() -> bool: whether the system's libzstd decompresses payloads in C"},
    {"unzstd", (PyCFunction)(void (*)(void))fp_py_unzstd, METH_VARARGS,
     "unzstd(data, size) -> bytes: zstd frames of exactly size bytes, by libzstd"},
    {"payload_events", (PyCFunction)(void (*)(void))fp_payload_events, METH_VARARGS,
     "payload_events(events, size, log_pos, csum) -> (data, events) "
     "(transaction_payload.inner_events, after decompression)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_fastdecode", .m_size = -1,
                                    .m_methods = methods};
PyMODINIT_FUNC PyInit__fastdecode(void) {
    if (fs_init() < 0 || fc_init() < 0 || fj_init() < 0 || fl_init() < 0) return NULL;
    if (PyType_Ready(&FR_PlanType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Plan", (PyObject *)&FR_PlanType) < 0 ||
        PyModule_AddObjectRef(m, "Loop", (PyObject *)&FL_LoopType) < 0 ||
        /* decode/decode_event take mode 3 (PARTIAL_UPDATE_ROWS) */
        PyModule_AddIntConstant(m, "PARTIAL_UPDATES", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
