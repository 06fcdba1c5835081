/* A PARTIAL_UPDATE_ROWS event's JSON diffs (binlog_row_value_options=PARTIAL_JSON) applied to
 * the column's stored value before them, in C, and the document after them printed as MySQL
 * prints it.
 *
 * The reference is json_diff.py (its docstring has the diff vector's format and the server's
 * rules: exact paths, REPLACE and REMOVE need the value, INSERT a member that is not there or
 * an array position). This file gives the same text for the same bytes
 * (tests/mysql/binlog/test_json_diff.py runs both on generated documents and diffs), and
 * leaves to json_diff whatever it does not read the same way for sure: a diff the server would
 * reject, malformed bytes, a path with what json.loads or Python's regular expressions read in
 * ways this file does not copy (a lone surrogate, a non-ASCII digit), an object whose keys are
 * not in MySQL's order. Then fjd_apply answers FJD_NOT_HERE and the caller hands the column to
 * json_diff, which applies it or names the problem.
 *
 * The document is read lazily: a value stays in its stored bytes (RAW) until a path goes
 * through it, and only the objects and arrays on a diff's path become nodes, whose untouched
 * members are still RAW and printed straight from their bytes (_fastjsontext.c). A RAW value
 * a diff replaces or removes is read to its end once, so a malformed value fails as it fails
 * json_diff, which parses the whole document first. */
#include "_fastjsondiff.h"
#include "_fastvalues.h"

#include <string.h>

enum { REPLACE = 0, INSERT = 1, REMOVE = 2 }; /* json_diff's operations */
enum { RAW, OBJ, ARR };                       /* a node's kind */
#define NOT_HERE FJD_NOT_HERE

/* -- an arena: every node of one call, freed at once ---------------------------------------- */

typedef struct Block {
    struct Block *next;
    size_t used, cap;
} Block;
#define HDR ((sizeof(Block) + 15) & ~(size_t)15)

typedef struct {
    Block *head;
    size_t used;
    _Alignas(16) unsigned char first[4096]; /* most documents need no more */
} Arena;

static void *alloc(Arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (a->head == NULL && sizeof(a->first) - a->used >= n) {
        void *p = a->first + a->used;
        a->used += n;
        return p;
    }
    Block *b = a->head;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        if ((b = PyMem_Malloc(HDR + cap)) == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = (unsigned char *)b + HDR + b->used;
    b->used += n;
    return p;
}

static void arena_free(Arena *a) {
    while (a->head != NULL) {
        Block *b = a->head;
        a->head = b->next;
        PyMem_Free(b);
    }
}

/* -- the document --------------------------------------------------------------------------- */

typedef struct Node Node;
typedef struct {
    const unsigned char *k; /* an object member's name (UTF-8, as stored) */
    Py_ssize_t kn;
    Node *v;
} Item;

struct Node {
    int kind;
    int t, depth;       /* RAW: the value's type and fjt_value's depth for it */
    const Doc *doc;     /* RAW: its bytes, from p to end (json_binary._value's) */
    Py_ssize_t p, end;
    Py_ssize_t n, cap;  /* OBJ, ARR: the members, objects' in MySQL's key order */
    Item *items;
};

static const unsigned char NULL_LITERAL[1] = {0};
static const Doc NULL_DOC = {NULL_LITERAL, 1};

/* A stored value (type byte first) as a RAW node; an empty one is JSON null, as the server
 * reads it (json_binary.parse). */
static Node *raw_node(Arena *a, const unsigned char *d, Py_ssize_t n) {
    Node *x = alloc(a, sizeof(Node));
    Doc *doc = alloc(a, sizeof(Doc));
    if (x == NULL || doc == NULL) return NULL;
    memset(x, 0, sizeof(Node));
    x->kind = RAW;
    if (n == 0) {
        x->doc = &NULL_DOC;
        x->t = LITERAL;
        x->end = 1;
        return x;
    }
    doc->d = d;
    doc->len = n;
    x->doc = doc;
    x->t = d[0];
    x->p = 1;
    x->end = n;
    return x;
}

/* An error fjt_value raised about the bytes: json_diff's to name (memory stays an error). */
static int soft(void) {
    if (PyErr_ExceptionMatches(PyExc_MemoryError)) return -1;
    PyErr_Clear();
    return NOT_HERE;
}

static int key_cmp(const unsigned char *a, Py_ssize_t an, const unsigned char *b,
                   Py_ssize_t bn) { /* json_binary.sort_key: shorter first, then bytewise */
    if (an != bn) return an < bn ? -1 : 1;
    return memcmp(a, b, (size_t)an);
}

/* A RAW object or array made a node, its members RAW (json_binary._container's reads and
 * checks); NOT_HERE when malformed or when an object's keys are out of MySQL's order. */
static int expand(Arena *a, Node *x) {
    const Doc *doc = x->doc;
    const unsigned char *d = doc->d;
    int t = x->t, depth = x->depth + 1, large = t & 1, osz = large ? 4 : 2;
    int is_object = t <= LARGE_OBJECT;
    Py_ssize_t p = x->p;
    if (depth > MAX_DEPTH || p + 2 * osz > doc->len) return NOT_HERE;
    uint64_t count = fd_le24(d + p, large), size = fd_le24(d + p + osz, large);
    if ((uint64_t)p + size > (uint64_t)x->end) return NOT_HERE;
    Py_ssize_t entries = p + 2 * osz;
    uint64_t per = (uint64_t)(1 + osz) + (is_object ? (uint64_t)(osz + 2) : 0);
    if (count * per > (uint64_t)(doc->len - entries)) return NOT_HERE; /* entries past it */
    Py_ssize_t values = is_object ? entries + (Py_ssize_t)count * (osz + 2) : entries;
    Item *items = alloc(a, (size_t)(count + 1) * sizeof(Item));
    Node *kids = alloc(a, (size_t)(count + 1) * sizeof(Node));
    if (items == NULL || kids == NULL) return -1;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        Node *v = &kids[i];
        memset(v, 0, sizeof(Node));
        v->kind = RAW;
        v->doc = doc;
        v->depth = depth;
        Py_ssize_t e = values + i * (1 + osz);
        v->t = d[e];
        if (fjt_inlined(v->t, large)) {
            v->p = e + 1;
            v->end = e + 1 + osz;
        } else {
            uint64_t off = fd_le24(d + e + 1, large);
            if (off >= size) return NOT_HERE;
            v->p = p + (Py_ssize_t)off;
            v->end = p + (Py_ssize_t)size;
        }
        items[i].v = v;
        items[i].k = NULL;
        items[i].kn = 0;
        if (is_object) {
            Py_ssize_t k = entries + i * (osz + 2);
            uint64_t koff = fd_le24(d + k, large), kn = fd_le(d + k + osz, 2);
            if (koff + kn > size) return NOT_HERE;
            items[i].k = d + p + koff;
            items[i].kn = (Py_ssize_t)kn;
            if (i && key_cmp(items[i - 1].k, items[i - 1].kn, items[i].k, items[i].kn) >= 0)
                return NOT_HERE; /* not MySQL's order (or a key twice): json_diff's dict */
        }
    }
    x->kind = is_object ? OBJ : ARR;
    x->items = items;
    x->n = (Py_ssize_t)count;
    x->cap = (Py_ssize_t)count + 1;
    return 0;
}

/* ``x`` as an object (``want`` OBJ) or an array (ARR): NOT_HERE when it is something else
 * (json_diff: "not an object", "not an array") or malformed. */
static int as_container(Arena *a, Node *x, int want) {
    if (x->kind == RAW) {
        if (x->t > LARGE_ARRAY || (x->t <= LARGE_OBJECT) != (want == OBJ)) return NOT_HERE;
        return expand(a, x);
    }
    return x->kind == want ? 0 : NOT_HERE;
}

/* Where the member ``k`` is in the object ``x`` or would go (``*found``: whether it is). */
static Py_ssize_t find(const Node *x, const unsigned char *k, Py_ssize_t kn, int *found) {
    Py_ssize_t lo = 0, hi = x->n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (key_cmp(x->items[mid].k, x->items[mid].kn, k, kn) < 0) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < x->n && key_cmp(x->items[lo].k, x->items[lo].kn, k, kn) == 0;
    return lo;
}

static int insert_at(Arena *a, Node *x, Py_ssize_t i, const unsigned char *k, Py_ssize_t kn,
                     Node *v) {
    if (x->n == x->cap) {
        Py_ssize_t cap = 2 * x->cap + 4;
        Item *items = alloc(a, (size_t)cap * sizeof(Item));
        if (items == NULL) return -1;
        memcpy(items, x->items, (size_t)x->n * sizeof(Item));
        x->items = items;
        x->cap = cap;
    }
    memmove(x->items + i + 1, x->items + i, (size_t)(x->n - i) * sizeof(Item));
    x->items[i] = (Item){k, kn, v};
    x->n++;
    return 0;
}

/* A value a diff replaces or removes, read to its end as json_diff's parse reads it: 0, or
 * NOT_HERE when malformed. */
static int check(const Node *x, Buf *scratch) {
    if (x->kind != RAW) {
        for (Py_ssize_t i = 0; i < x->n; i++) {
            int rc = check(x->items[i].v, scratch);
            if (rc != 0) return rc;
        }
        return 0;
    }
    scratch->n = 0;
    int rc = fjt_value(x->doc, x->t, x->p, x->end, x->depth, scratch);
    return rc == 0 ? 0 : rc == UNSORTED ? NOT_HERE : soft();
}

/* -- paths (json_diff.parse_path) ----------------------------------------------------------- */

typedef struct {
    const unsigned char *name; /* a member (UTF-8), or NULL for an array index */
    Py_ssize_t nn;
    int64_t index;
    int from_end;              /* [last-index] */
} Leg;

/* The code point at s[i] of strict UTF-8 (bytes.decode("utf-8")): its length, 0 if invalid. */
static int utf8_at(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, uint32_t *cp) {
    unsigned c = s[i];
    if (c < 0x80) { *cp = c; return 1; }
    int len = c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
    if (len == 0 || n - i < len) return 0;
    uint32_t v = c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i + k] & 0x3F);
    }
    if ((len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) ||
        (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
        return 0;
    *cp = v;
    return len;
}

/* str.isspace (and \s of a str pattern): Python's whitespace code points */
static int is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static Py_ssize_t skip_spaces(const unsigned char *s, Py_ssize_t i, Py_ssize_t e) {
    uint32_t c;
    int n;
    while (i < e && (n = utf8_at(s, e, i, &c)) > 0 && is_space(c)) i += n;
    return i;
}

static int hex4(const unsigned char *s, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = s[k];
        int h = c >= '0' && c <= '9' ? (int)c - '0' : c >= 'a' && c <= 'f' ? (int)c - 'a' + 10
              : c >= 'A' && c <= 'F' ? (int)c - 'A' + 10 : -1;
        if (h < 0) return -1;
        *v = *v << 4 | (uint32_t)h;
    }
    return 0;
}

/* A quoted member name, s[i] its opening quote (json_diff._quoted: json.loads of it): its
 * UTF-8 into ``leg``, ``*next`` after its closing quote; NOT_HERE for what json.loads would
 * refuse or read as a lone surrogate. */
static int quoted(Arena *a, const unsigned char *s, Py_ssize_t i, Py_ssize_t e, Leg *leg,
                  Py_ssize_t *next) {
    Py_ssize_t q = i + 1;
    while (q < e && s[q] != '"') q += s[q] == '\\' ? 2 : 1;
    if (q >= e) return NOT_HERE;
    unsigned char *out = alloc(a, (size_t)(q - i) + 4);
    if (out == NULL) return -1;
    Py_ssize_t n = 0;
    for (Py_ssize_t j = i + 1; j < q; j++) {
        unsigned c = s[j];
        if (c < 0x20) return NOT_HERE; /* json.loads is strict */
        if (c != '\\') {
            out[n++] = (unsigned char)c;
            continue;
        }
        c = s[++j];
        const char *simple = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = strchr(simple, (int)c);
        if (c != 0 && at != NULL) {
            out[n++] = (unsigned char)to[at - simple];
            continue;
        }
        uint32_t cp, lo;
        if (c != 'u' || q - j < 5 || hex4(s + j + 1, &cp) < 0) return NOT_HERE;
        j += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return NOT_HERE;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a pair, or a lone surrogate: not here */
            if (q - j < 7 || s[j + 1] != '\\' || s[j + 2] != 'u' || hex4(s + j + 3, &lo) < 0 ||
                lo < 0xDC00 || lo > 0xDFFF)
                return NOT_HERE;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            j += 6;
        }
        if (cp < 0x80) out[n++] = (unsigned char)cp;
        else if (cp < 0x800) {
            out[n++] = (unsigned char)(0xC0 | cp >> 6);
            out[n++] = (unsigned char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[n++] = (unsigned char)(0xE0 | cp >> 12);
            out[n++] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
            out[n++] = (unsigned char)(0x80 | (cp & 0x3F));
        } else {
            out[n++] = (unsigned char)(0xF0 | cp >> 18);
            out[n++] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
            out[n++] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
            out[n++] = (unsigned char)(0x80 | (cp & 0x3F));
        }
    }
    leg->name = out;
    leg->nn = n;
    *next = q + 1;
    return 0;
}

/* ASCII digits at s[*i] (json_diff's \d+, which also takes other scripts' digits: those are
 * left to it), at most 18 of them. */
static int digits(const unsigned char *s, Py_ssize_t *i, Py_ssize_t e, int64_t *v) {
    Py_ssize_t j = *i;
    *v = 0;
    while (j < e && s[j] >= '0' && s[j] <= '9') {
        if (j - *i == 18) return NOT_HERE;
        *v = *v * 10 + (s[j++] - '0');
    }
    if (j == *i) return NOT_HERE;
    *i = j;
    return 0;
}

/* An array index, s[i] its '[' (json_diff._INDEX: [n], [last], [last-n], spaces between). */
static int index_leg(const unsigned char *s, Py_ssize_t i, Py_ssize_t e, Leg *leg,
                     Py_ssize_t *next) {
    i = skip_spaces(s, i + 1, e);
    leg->name = NULL;
    leg->index = 0;
    leg->from_end = 0;
    if (i < e && s[i] >= '0' && s[i] <= '9') {
        if (digits(s, &i, e, &leg->index) != 0) return NOT_HERE;
    } else if (e - i >= 4 && memcmp(s + i, "last", 4) == 0) {
        leg->from_end = 1;
        i += 4;
        Py_ssize_t j = skip_spaces(s, i, e);
        if (j < e && s[j] == '-') {
            j = skip_spaces(s, j + 1, e);
            if (digits(s, &j, e, &leg->index) != 0) return NOT_HERE;
            i = j;
        }
    } else
        return NOT_HERE;
    i = skip_spaces(s, i, e);
    if (i >= e || s[i] != ']') return NOT_HERE;
    *next = i + 1;
    return 0;
}

/* The legs of a path (json_diff.parse_path): their number, or NOT_HERE / -1. */
static int parse_path(Arena *a, const unsigned char *s, Py_ssize_t n, Leg **legs,
                      Py_ssize_t *nlegs) {
    uint32_t c;
    int w;
    for (Py_ssize_t i = 0; i < n; i += w)
        if ((w = utf8_at(s, n, i, &c)) == 0) return NOT_HERE; /* bytes.decode("utf-8") */
    Py_ssize_t i = skip_spaces(s, 0, n), e = n; /* path.strip() */
    while (e > i) {
        Py_ssize_t b = e - 1;
        while (b > i && (s[b] & 0xC0) == 0x80) b--;
        if (utf8_at(s, n, b, &c) == 0 || !is_space(c)) break;
        e = b;
    }
    if (i >= e || s[i] != '$') return NOT_HERE;
    i++;
    *legs = alloc(a, (size_t)(e - i + 1) * sizeof(Leg));
    if (*legs == NULL) return -1;
    Py_ssize_t k = 0;
    while (i < e) {
        w = utf8_at(s, e, i, &c);
        if (is_space(c)) {
            i += w;
            continue;
        }
        Leg *leg = &(*legs)[k++];
        int rc;
        if (c == '.') {
            i = skip_spaces(s, i + 1, e);
            if (i < e && s[i] == '"') {
                if ((rc = quoted(a, s, i, e, leg, &i)) != 0) return rc;
            } else { /* a bare name: up to . [ ] " * or a space */
                Py_ssize_t j = i;
                while (j < e && (w = utf8_at(s, e, j, &c)) > 0 && !is_space(c) &&
                       c != '.' && c != '[' && c != ']' && c != '"' && c != '*')
                    j += w;
                if (j == i) return NOT_HERE;
                leg->name = s + i;
                leg->nn = j - i;
                i = j;
            }
        } else if (c == '[') {
            if ((rc = index_leg(s, i, e, leg, &i)) != 0) return rc;
        } else
            return NOT_HERE;
    }
    *nlegs = k;
    return 0;
}

/* -- a diff (json_diff._apply_one) ------------------------------------------------------------ */

static Py_ssize_t position(const Leg *leg, Py_ssize_t size) {
    return leg->from_end ? size - 1 - (Py_ssize_t)leg->index : (Py_ssize_t)leg->index;
}

static int apply_one(Arena *a, Node *root, int op, const Leg *legs, Py_ssize_t nlegs,
                     Node *value, Buf *scratch) {
    Node *x = root;
    int rc, found;
    for (Py_ssize_t k = 0; k + 1 < nlegs; k++) { /* the parent of the last leg */
        const Leg *leg = &legs[k];
        if ((rc = as_container(a, x, leg->name != NULL ? OBJ : ARR)) != 0) return rc;
        Py_ssize_t i = leg->name != NULL ? find(x, leg->name, leg->nn, &found)
                                         : position(leg, x->n);
        if (leg->name != NULL ? !found : i < 0 || i >= x->n) return NOT_HERE;
        x = x->items[i].v;
    }
    const Leg *last = &legs[nlegs - 1];
    if ((rc = as_container(a, x, last->name != NULL ? OBJ : ARR)) != 0) return rc;
    Py_ssize_t i;
    if (last->name != NULL) {
        i = find(x, last->name, last->nn, &found);
        if (op == INSERT) return found ? NOT_HERE : insert_at(a, x, i, last->name, last->nn, value);
        if (!found) return NOT_HERE;
    } else {
        i = position(last, x->n);
        if (op == INSERT)
            return insert_at(a, x, i < 0 ? 0 : i > x->n ? x->n : i, NULL, 0, value);
        if (i < 0 || i >= x->n) return NOT_HERE;
    }
    if ((rc = check(x->items[i].v, scratch)) != 0) return rc; /* what goes: read as parsed */
    if (op == REPLACE) {
        x->items[i].v = value;
        return 0;
    }
    memmove(x->items + i, x->items + i + 1, (size_t)(x->n - i - 1) * sizeof(Item));
    x->n--;
    return 0;
}

/* -- the document's text ------------------------------------------------------------------------ */

static int render(const Node *x, Buf *o) {
    if (x->kind == RAW) {
        int rc = fjt_value(x->doc, x->t, x->p, x->end, x->depth, o);
        return rc == 0 ? 0 : rc == UNSORTED ? NOT_HERE : soft();
    }
    int obj = x->kind == OBJ, rc;
    if (fjt_put(o, obj ? "{" : "[", 1) < 0) return -1;
    for (Py_ssize_t i = 0; i < x->n; i++) {
        if (i && fjt_put(o, ", ", 2) < 0) return -1;
        if (obj && (fjt_quote(o, x->items[i].k, x->items[i].kn) < 0 || fjt_put(o, ": ", 2) < 0))
            return -1;
        if ((rc = render(x->items[i].v, o)) != 0) return rc;
    }
    return fjt_put(o, obj ? "}" : "]", 1);
}

/* A length-encoded integer (json_diff._packed) at d[*p]: NOT_HERE when bad or past ``n``. */
static int packed(const unsigned char *d, Py_ssize_t n, Py_ssize_t *p, uint64_t *v) {
    if (*p >= n) return NOT_HERE;
    unsigned c = d[*p];
    int k = c < 251 ? 0 : c == 252 ? 2 : c == 253 ? 3 : c == 254 ? 8 : -1;
    if (k < 0 || n - *p - 1 < k) return NOT_HERE;
    *v = k == 0 ? c : fd_le(d + *p + 1, k);
    *p += 1 + k;
    return 0;
}

static int apply_all(Arena *a, Node *root, const unsigned char *d, Py_ssize_t dn,
                     Buf *scratch) {
    Py_ssize_t p = 0;
    while (p < dn) {
        int op = d[p++], rc;
        uint64_t pn, vn;
        if (op > REMOVE) return NOT_HERE;
        if ((rc = packed(d, dn, &p, &pn)) != 0) return rc;
        if (pn > (uint64_t)(dn - p)) return NOT_HERE;
        const unsigned char *path = d + p;
        p += (Py_ssize_t)pn;
        Node *value = NULL;
        if (op != REMOVE) {
            if ((rc = packed(d, dn, &p, &vn)) != 0) return rc;
            if (vn > (uint64_t)(dn - p)) return NOT_HERE;
            if ((value = raw_node(a, d + p, (Py_ssize_t)vn)) == NULL) return -1;
            p += (Py_ssize_t)vn;
        }
        Leg *legs;
        Py_ssize_t nlegs;
        if ((rc = parse_path(a, path, (Py_ssize_t)pn, &legs, &nlegs)) != 0) return rc;
        if (nlegs == 0) return NOT_HERE; /* never the whole document */
        if ((rc = apply_one(a, root, op, legs, nlegs, value, scratch)) != 0) return rc;
    }
    return 0;
}

int fjd_apply(const unsigned char *before, Py_ssize_t bn, const unsigned char *diffs,
              Py_ssize_t dn, PyObject **out) {
    Arena arena, *a = &arena; /* on the stack: its first block is most calls' only one */
    a->head = NULL;
    a->used = 0;
    Buf o, scratch;
    fjt_buf_init(&o);
    fjt_buf_init(&scratch);
    Node *root = raw_node(a, before, bn);
    int rc = root == NULL ? -1 : apply_all(a, root, diffs, dn, &scratch);
    if (rc == 0) rc = render(root, &o);
    if (rc == 0 && (*out = fjt_buf_str(&o)) == NULL) rc = -1;
    fjt_buf_free(&scratch);
    fjt_buf_free(&o);
    arena_free(a);
    return rc;
}

PyObject *fjd_py_apply(PyObject *self, PyObject *args) {
    Py_buffer before, diffs;
    PyObject *out = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*", &before, &diffs)) return NULL;
    int rc = fjd_apply((const unsigned char *)before.buf, before.len,
                       (const unsigned char *)diffs.buf, diffs.len, &out);
    PyBuffer_Release(&before);
    PyBuffer_Release(&diffs);
    if (rc < 0) return NULL;
    if (rc == NOT_HERE) Py_RETURN_NONE;
    return out;
}
