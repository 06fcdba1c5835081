/* _fastjsontext.c: MySQL's binary JSON value printed as text, the part _fastjson.c's entry
 * points and its tree are built on. */
#ifndef SPARKCDC_FASTJSONTEXT_H
#define SPARKCDC_FASTJSONTEXT_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

enum {
    SMALL_OBJECT = 0, LARGE_OBJECT = 1, SMALL_ARRAY = 2, LARGE_ARRAY = 3, LITERAL = 4,
    INT16 = 5, UINT16 = 6, INT32 = 7, UINT32 = 8, INT64 = 9, UINT64 = 10, DOUBLE = 11,
    STRING = 12, OPAQUE = 15,
};
/* field types an opaque value names (enum_field_types) */
enum { F_DECIMAL = 0, F_TIMESTAMP = 7, F_DATE = 10, F_TIME = 11, F_DATETIME = 12,
       F_NEWDECIMAL = 246, F_VAR_STRING = 253 };

#define MAX_DEPTH 1000 /* MySQL allows 100 */
#define UNSORTED (-2)  /* an object's keys out of MySQL's order: print through the tree */

/* an output buffer, growing from its small array */
typedef struct {
    char *b;
    Py_ssize_t n, cap;
    char small[512];
} Buf;

/* a stored JSON value's bytes */
typedef struct {
    const unsigned char *d;
    Py_ssize_t len;
} Doc;

void fjt_buf_init(Buf *o);
void fjt_buf_free(Buf *o);
PyObject *fjt_buf_str(Buf *o);            /* the buffer's UTF-8 as str (surrogateescape) */
int fjt_bad(const char *why);             /* -1 with ValueError naming a malformed value */
int fjt_put(Buf *o, const char *s, Py_ssize_t n);              /* bytes appended */
int fjt_quote(Buf *o, const unsigned char *s, Py_ssize_t n);   /* a JSON string, quoted */
/* whether a value of type vt is in its entry (literals and 16-bit numbers; 32-bit ones too in
 * a large container), not at an offset */
static inline int fjt_inlined(int vt, int large) {
    return vt == LITERAL || vt == INT16 || vt == UINT16 || (large && (vt == INT32 || vt == UINT32));
}
/* The value of type ``t`` whose data starts at ``p`` (json_binary._value), as text into
 * ``o``: 0, -1 with an error, or UNSORTED (an object's keys out of MySQL's order). */
int fjt_value(const Doc *doc, int t, Py_ssize_t p, Py_ssize_t end, int depth, Buf *o);

#endif
