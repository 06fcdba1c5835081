/* _fastcols.c: one column's value of a row image, by its compiled spec, for the row images
 * of _fastrows.c. The plan (a table's specs) and the cursor over an event's bytes live here,
 * below every file that walks row images. */
#ifndef SPARKCDC_FASTCOLS_H
#define SPARKCDC_FASTCOLS_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

enum {
    OP_INT = 1,       /* a: bytes (1, 2, 3, 4, 8), little-endian, signed */
    OP_UINT = 2,      /* a: bytes (1, 2, 3, 4), unsigned */
    OP_UINT64 = 3,    /* 8 bytes unsigned -> Decimal */
    OP_FLOAT = 4,
    OP_DOUBLE = 5,
    OP_YEAR = 6,
    OP_DECIMAL = 7,   /* a: precision, b: scale, c: 1 -> text, 0 -> Decimal */
    OP_TEXT = 8,      /* a: length bytes; b: 0 utf-8, 1 codec named by obj, 2 call obj(bytes) */
    OP_BYTES = 9,     /* a: length bytes; b: pad with zero bytes to this length (BINARY(n)) */
    OP_ENUM = 10,     /* a: 1 or 2 bytes; obj: tuple of members */
    OP_SET = 11,      /* a: bytes of the mask; obj: tuple of members */
    OP_GEOMETRY = 12, /* a: length bytes; the value without its 4-byte SRID */
    OP_CALL = 13,     /* a: length bytes; obj(bytes) -> value */
    OP_BIT1 = 14,     /* a: bytes; any bit set -> True */
    OP_BITS = 15,     /* a: bytes in the binlog; b: bytes of the canonical value */
    OP_DATE = 16,
    OP_TIME2 = 17,    /* a: fsp */
    OP_DATETIME2 = 18,
    OP_TIMESTAMP2 = 19,
    OP_TIME = 20,     /* the old formats */
    OP_DATETIME = 21,
    OP_TIMESTAMP = 22,
    OP_JSON = 23,     /* a: length bytes; MySQL's binary JSON as its text (_fastjson.c); obj:
                         None, or apply(before bytes | None, diff bytes, column) -> text for
                         the partial updates of a PARTIAL_UPDATE_ROWS event; c: 1 when those
                         are applied in C first (_fastjsondiff.c), obj taking what it leaves */
};

typedef struct {
    int op, a, b, c;
    PyObject *obj; /* borrowed from the plan's specs tuple */
    const char *encoding;
} ColSpec;

typedef struct {
    PyObject_HEAD
    Py_ssize_t ncols;
    ColSpec *cols;
    PyObject *names;  /* tuple of str */
    PyObject *specs;  /* keeps the objects of the specs alive */
    PyObject *decimal; /* decimal.Decimal */
    /* per column, 1 for a row key column; NULL unless the plan was given keys: then an
       update's before image holds its key columns only (the reader drops update
       preimages), the whole image when the update changes the key */
    unsigned char *key;
    Py_ssize_t nkeys;
} PlanObject;

typedef struct {
    const unsigned char *d;
    Py_ssize_t pos, end;
} Cursor;

/* -1 with ValueError when fewer than ``n`` bytes are left. */
int fc_need(Cursor *c, Py_ssize_t n);
/* A length-prefixed value: the length (in ``nbytes`` bytes) and a pointer to the bytes. */
int fc_read_prefixed(Cursor *c, int nbytes, const unsigned char **p, Py_ssize_t *n);
/* The canonical value of one column at the cursor (sparkcdc.mysql.types). */
PyObject *fc_value(PlanObject *plan, ColSpec *s, Cursor *c);
int fc_skip(ColSpec *s, Cursor *c);
int fc_init(void);

#endif
