/* Safe pickle interpreter for torch state dicts (see ckpt_pickle.h).
 *
 * Values live in one pool owned by the reader and freed together, so the memo and the
 * stack can share them freely (a memoised dict set into two parents, a dict that holds
 * itself) without ownership rules. Every read is checked against the input length, every
 * pop against the stack and the last MARK, and sizes are bounded before they are used. */
#include "checkpoints/ckpt_pickle.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/base/rt_buf.h"

#define PK_MAX_MEMO (1u << 20)
#define PK_MAX_DEPTH 32
#define PK_MAX_NAME 1024

/* RT_TRY for functions without a cleanup label */
#define PK_TRY(expr)                                \
    do {                                            \
        rt_status pk_try_st_ = (expr);              \
        if (pk_try_st_ != RT_OK) return pk_try_st_; \
    } while (0)

typedef enum {
    PV_NONE,
    PV_BOOL,
    PV_INT,
    PV_FLOAT,
    PV_STR,
    PV_TUPLE,
    PV_LIST,
    PV_DICT,
    PV_GLOBAL,
    PV_STORAGE,
    PV_TENSOR
} pv_kind;
typedef enum { PG_ORDERED_DICT, PG_REBUILD_V2, PG_REBUILD, PG_REBUILD_PARAM, PG_STORAGE_TYPE, PG_NAMESPACE } pg_kind;

typedef struct pv pv;
struct pv {
    pv_kind kind;
    int64_t i;      /* INT, BOOL; STORAGE: numel */
    double f;       /* FLOAT */
    char *s;        /* STR (NUL-terminated copy); STORAGE: key */
    pv **items;     /* TUPLE, LIST; DICT: key, value, key, value, ... */
    size_t n, cap;  /* items used (a DICT holds n / 2 pairs) */
    pg_kind g;      /* GLOBAL */
    int object;     /* DICT: an argparse.Namespace, whose BUILD state becomes its items */
    rt_dtype dtype; /* GLOBAL storage type, STORAGE, TENSOR */
    /* TENSOR */
    const pv *storage;
    size_t offset, numel;
    int ndim;
    size_t shape[CKPT_MAX_DIMS];
};

typedef struct {
    const unsigned char *p;
    size_t size, pos, op_pos;
    const char *what;
    pv **pool;
    size_t n_pool, cap_pool;
    pv **stack;
    size_t n_stack, cap_stack;
    size_t *marks;
    size_t n_marks, cap_marks;
    pv **memo;
    size_t cap_memo, n_memo; /* n_memo: slots set, where MEMOIZE stores next */
    size_t flatten_budget;   /* dict items flattening may still visit */
    size_t build_budget;     /* items BUILD may still copy: a file's own items need a byte each */
} pk_reader;

static pv *pv_new(pk_reader *r, pv_kind kind) {
    pv *v = rt_xcalloc(1, sizeof *v);
    v->kind = kind;
    r->pool = rt_grow_to(r->pool, &r->cap_pool, r->n_pool + 1, sizeof *r->pool);
    r->pool[r->n_pool++] = v;
    return v;
}

static void pv_append(pv *c, pv *item) {
    c->items = rt_grow_to(c->items, &c->cap, c->n + 1, sizeof *c->items);
    c->items[c->n++] = item;
}

static rt_status pk_err(const pk_reader *r, const char *msg) {
    return rt_errorf(RT_ERR_FORMAT, "%s: %s (pickle opcode at byte %zu)", r->what, msg, r->op_pos);
}

static rt_status pk_need(const pk_reader *r, size_t n) {
    if (n > r->size - r->pos) return pk_err(r, "pickle is truncated");
    return RT_OK;
}

static uint64_t pk_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

static void pk_push(pk_reader *r, pv *v) {
    r->stack = rt_grow_to(r->stack, &r->cap_stack, r->n_stack + 1, sizeof *r->stack);
    r->stack[r->n_stack++] = v;
}

/* The bottom of the current frame: nothing below the last MARK may be popped. */
static size_t pk_floor(const pk_reader *r) { return r->n_marks ? r->marks[r->n_marks - 1] : 0; }

static rt_status pk_pop(pk_reader *r, pv **out) {
    if (r->n_stack <= pk_floor(r)) return pk_err(r, "pickle pops from an empty stack");
    *out = r->stack[--r->n_stack];
    return RT_OK;
}

static rt_status pk_top(pk_reader *r, pv **out) {
    if (r->n_stack <= pk_floor(r)) return pk_err(r, "pickle reads an empty stack");
    *out = r->stack[r->n_stack - 1];
    return RT_OK;
}

/* Pops everything above the last MARK into a new container of the given kind. */
static rt_status pk_pop_mark(pk_reader *r, pv_kind kind, pv **out) {
    if (!r->n_marks) return pk_err(r, "pickle uses a MARK that was never set");
    size_t m = r->marks[--r->n_marks];
    pv *c = pv_new(r, kind);
    for (size_t k = m; k < r->n_stack; k++) pv_append(c, r->stack[k]);
    r->n_stack = m;
    *out = c;
    return RT_OK;
}

/* For messages: at most 80 printable characters of an untrusted string. */
static void pk_printable(char *dst, size_t size, const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < size && i < 80; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    dst[k] = '\0';
}

static const struct {
    const char *name;
    rt_dtype dtype;
} pk_storages[] = {
    {"FloatStorage", RT_F32}, {"HalfStorage", RT_F16}, {"BFloat16Storage", RT_BF16}, {"DoubleStorage", RT_F64},
    {"LongStorage", RT_I64},  {"IntStorage", RT_I32},  {"ByteStorage", RT_U8},       {"BoolStorage", RT_BOOL},
};

static int pk_is_torch_dtype(const char *n) {
    static const char *const dtypes[] = {"float32", "float16", "bfloat16", "float64", "int64",
                                         "int32",   "int16",   "int8",     "uint8",   "bool"};
    for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++)
        if (!strcmp(n, dtypes[k])) return 1;
    return 0;
}

/* The allowlist. Everything else is refused here, before any REDUCE could use it. */
static rt_status pk_global(pk_reader *r, const char *mod, size_t mlen, const char *name, size_t nlen) {
    char m[96], n[96], msg[320];
    pk_printable(m, sizeof m, mod, mlen);
    pk_printable(n, sizeof n, name, nlen);
    pv *g = pv_new(r, PV_GLOBAL);
    int ok = 1;
    if (strlen(m) != mlen || strlen(n) != nlen)
        ok = 0; /* NULs or odd bytes: never a match below */
    else if (!strcmp(m, "collections") && !strcmp(n, "OrderedDict"))
        g->g = PG_ORDERED_DICT;
    else if (!strcmp(m, "torch._utils") && !strcmp(n, "_rebuild_tensor_v2"))
        g->g = PG_REBUILD_V2;
    else if (!strcmp(m, "torch._utils") && !strcmp(n, "_rebuild_tensor"))
        g->g = PG_REBUILD;
    else if (!strcmp(m, "torch._utils") &&
             (!strcmp(n, "_rebuild_parameter") || !strcmp(n, "_rebuild_parameter_with_state")))
        g->g = PG_REBUILD_PARAM;
    else if (!strcmp(m, "argparse") && !strcmp(n, "Namespace"))
        g->g = PG_NAMESPACE; /* Megatron's 'args' */
    else if (!strcmp(m, "torch") && pk_is_torch_dtype(n)) {
        pk_push(r, pv_new(r, PV_NONE)); /* a dtype value (Megatron's args.params_dtype): inert, skipped */
        return RT_OK;
    } else if (!strcmp(m, "torch")) {
        ok = 0;
        for (size_t k = 0; k < sizeof pk_storages / sizeof *pk_storages; k++) {
            if (!strcmp(n, pk_storages[k].name)) {
                g->g = PG_STORAGE_TYPE;
                g->dtype = pk_storages[k].dtype;
                ok = 1;
            }
        }
        if (!ok && strlen(n) > 7 && !strcmp(n + strlen(n) - 7, "Storage")) {
            snprintf(msg, sizeof msg,
                     "tensor storage 'torch.%s' has a dtype we do not read (F32, F16, BF16, F64, "
                     "I64, I32, U8, BOOL)",
                     n);
            return rt_errorf(RT_ERR_UNSUPPORTED, "%s: %s", r->what, msg);
        }
    } else
        ok = 0;
    if (!ok)
        return rt_errorf(RT_ERR_FORMAT,
                         "%s: refusing pickle GLOBAL '%s.%s': only torch tensor rebuilds and "
                         "OrderedDict are allowed (this file may try to run code)",
                         r->what, m, n);
    pk_push(r, g);
    return RT_OK;
}

static int pv_is_uint(const pv *v) { return v->kind == PV_INT && v->i >= 0; }

/* (dims) tuple of non-negative ints into shape; numel with overflow checks. */
static rt_status pk_shape(const pk_reader *r, const pv *t, const char *field, size_t *shape, int *ndim,
                          int64_t *stride) {
    char msg[128];
    if (t->kind != PV_TUPLE) {
        snprintf(msg, sizeof msg, "tensor rebuild: %s is not a tuple", field);
        return pk_err(r, msg);
    }
    if (t->n > CKPT_MAX_DIMS) {
        snprintf(msg, sizeof msg, "tensor rebuild: %s has %zu dimensions (at most %d)", field, t->n, CKPT_MAX_DIMS);
        return pk_err(r, msg);
    }
    for (size_t k = 0; k < t->n; k++) {
        if (t->items[k]->kind != PV_INT || (shape && t->items[k]->i < 0)) {
            snprintf(msg, sizeof msg, "tensor rebuild: %s[%zu] is not a %sinteger", field, k,
                     shape ? "non-negative " : "");
            return pk_err(r, msg);
        }
        if (shape) shape[k] = (size_t)t->items[k]->i;
        if (stride) stride[k] = t->items[k]->i;
    }
    *ndim = (int)t->n;
    return RT_OK;
}

static rt_status pk_rebuild_tensor(pk_reader *r, const pv *args, pv **out) {
    if (args->n < 4) return pk_err(r, "tensor rebuild takes (storage, offset, size, stride, ...)");
    const pv *storage = args->items[0], *off = args->items[1];
    if (storage->kind != PV_STORAGE) return pk_err(r, "tensor rebuild: first argument is not a storage persistent id");
    if (!pv_is_uint(off)) return pk_err(r, "tensor rebuild: storage offset is not a non-negative integer");
    pv *t = pv_new(r, PV_TENSOR);
    int nd_stride = 0;
    int64_t stride[CKPT_MAX_DIMS];
    PK_TRY(pk_shape(r, args->items[2], "size", t->shape, &t->ndim, NULL));
    PK_TRY(pk_shape(r, args->items[3], "stride", NULL, &nd_stride, stride));
    if (nd_stride != t->ndim) return pk_err(r, "tensor rebuild: size and stride differ in length");
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] && t->numel > SIZE_MAX / 16 / t->shape[d]) return pk_err(r, "tensor rebuild: shape overflows");
        t->numel *= t->shape[d];
    }
    /* contiguous row-major: each stride is the product of the sizes after it (size-1 dims
     * may carry any stride, an empty tensor any strides) */
    if (t->numel) {
        int64_t want = 1;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (t->shape[d] != 1 && stride[d] != want)
                return rt_errorf(RT_ERR_UNSUPPORTED,
                                 "%s: tensor with non-contiguous strides (torch.save of a state dict "
                                 "writes contiguous tensors; save with t.contiguous())",
                                 r->what);
            want *= (int64_t)t->shape[d];
        }
    }
    t->storage = storage;
    t->dtype = storage->dtype;
    t->offset = (size_t)off->i;
    if (t->numel && (t->offset > (size_t)storage->i || t->numel > (size_t)storage->i - t->offset))
        return pk_err(r, "tensor rebuild: offset + size runs past its storage");
    *out = t;
    return RT_OK;
}

/* argparse.Namespace() as an empty dict; its BUILD state fills it. */
static rt_status pk_new_namespace(pk_reader *r, const pv *args, pv **out) {
    if (args->kind != PV_TUPLE || args->n != 0) return pk_err(r, "argparse.Namespace(...) with arguments");
    *out = pv_new(r, PV_DICT);
    (*out)->object = 1;
    return RT_OK;
}

/* NEWOBJ: cls.__new__(cls, *args), allowed for argparse.Namespace only. */
static rt_status pk_newobj(pk_reader *r) {
    pv *args = NULL, *cls = NULL, *res = NULL;
    PK_TRY(pk_pop(r, &args));
    PK_TRY(pk_pop(r, &cls));
    if (cls->kind != PV_GLOBAL || cls->g != PG_NAMESPACE)
        return pk_err(r, "NEWOBJ of a class other than argparse.Namespace");
    PK_TRY(pk_new_namespace(r, args, &res));
    pk_push(r, res);
    return RT_OK;
}

static rt_status pk_reduce(pk_reader *r) {
    pv *args = NULL, *fn = NULL, *res = NULL;
    PK_TRY(pk_pop(r, &args));
    PK_TRY(pk_pop(r, &fn));
    if (fn->kind != PV_GLOBAL) return pk_err(r, "REDUCE of something that is not an allowed GLOBAL");
    if (args->kind != PV_TUPLE) return pk_err(r, "REDUCE arguments are not a tuple");
    switch (fn->g) {
    case PG_ORDERED_DICT:
        if (args->n != 0) return pk_err(r, "OrderedDict(...) with arguments is not supported");
        res = pv_new(r, PV_DICT);
        break;
    case PG_REBUILD_V2:
    case PG_REBUILD: PK_TRY(pk_rebuild_tensor(r, args, &res)); break;
    case PG_REBUILD_PARAM:
        if (args->n < 1 || args->items[0]->kind != PV_TENSOR) return pk_err(r, "_rebuild_parameter of a non-tensor");
        res = args->items[0];
        break;
    case PG_STORAGE_TYPE: return pk_err(r, "refusing to call a torch storage type");
    case PG_NAMESPACE: PK_TRY(pk_new_namespace(r, args, &res)); break;
    }
    pk_push(r, res);
    return RT_OK;
}

/* ('storage', torch.XStorage, key, location, numel) */
static rt_status pk_persid(pk_reader *r) {
    pv *pid = NULL;
    PK_TRY(pk_pop(r, &pid));
    if (pid->kind != PV_TUPLE || pid->n != 5 || pid->items[0]->kind != PV_STR || strcmp(pid->items[0]->s, "storage") ||
        pid->items[1]->kind != PV_GLOBAL || pid->items[1]->g != PG_STORAGE_TYPE || pid->items[2]->kind != PV_STR ||
        !pv_is_uint(pid->items[4]))
        return pk_err(r, "persistent id is not ('storage', torch.<T>Storage, key, location, numel)");
    const char *key = pid->items[2]->s;
    if (!key[0] || strlen(key) > 200) return pk_err(r, "storage key is empty or too long");
    size_t es = rt_dtype_size(pid->items[1]->dtype);
    if ((uint64_t)pid->items[4]->i > SIZE_MAX / es) return pk_err(r, "storage size overflows");
    pv *s = pv_new(r, PV_STORAGE);
    s->dtype = pid->items[1]->dtype;
    s->s = rt_xstrdup(key);
    s->i = pid->items[4]->i;
    pk_push(r, s);
    return RT_OK;
}

static rt_status pk_string(pk_reader *r, size_t len_bytes) {
    PK_TRY(pk_need(r, len_bytes));
    uint64_t n = pk_le(r->p + r->pos, (int)len_bytes);
    r->pos += len_bytes;
    if (n > r->size - r->pos) return pk_err(r, "string runs past the end of the pickle");
    pv *v = pv_new(r, PV_STR);
    v->s = rt_xmalloc((size_t)n + 1);
    memcpy(v->s, r->p + r->pos, (size_t)n);
    v->s[n] = '\0';
    v->n = (size_t)n; /* length (may hold NULs) */
    r->pos += (size_t)n;
    pk_push(r, v);
    return RT_OK;
}

static rt_status pk_int(pk_reader *r, int bytes, int is_signed) {
    PK_TRY(pk_need(r, (size_t)bytes));
    uint64_t u = pk_le(r->p + r->pos, bytes);
    r->pos += (size_t)bytes;
    pv *v = pv_new(r, PV_INT);
    if (is_signed && bytes < 8 && (u >> (8 * bytes - 1)) & 1) u |= ~(uint64_t)0 << (8 * bytes);
    v->i = (int64_t)u;
    pk_push(r, v);
    return RT_OK;
}

static rt_status pk_memo_put(pk_reader *r, uint64_t idx) {
    pv *v = NULL;
    PK_TRY(pk_top(r, &v));
    if (idx >= PK_MAX_MEMO) return pk_err(r, "memo index too large");
    if (idx >= r->cap_memo) {
        size_t old = r->cap_memo;
        r->memo = rt_grow_to(r->memo, &r->cap_memo, (size_t)idx + 1, sizeof *r->memo);
        memset(r->memo + old, 0, (r->cap_memo - old) * sizeof *r->memo);
    }
    if (!r->memo[idx]) r->n_memo++;
    r->memo[idx] = v;
    return RT_OK;
}

static rt_status pk_memo_get(pk_reader *r, uint64_t idx) {
    if (idx >= r->cap_memo || !r->memo[idx]) return pk_err(r, "memo lookup of an index never stored");
    pk_push(r, r->memo[idx]);
    return RT_OK;
}

static rt_status pk_setitems(pk_reader *r, int many) {
    pv *items = NULL, *d = NULL;
    if (many) {
        PK_TRY(pk_pop_mark(r, PV_TUPLE, &items));
        if (items->n % 2) return pk_err(r, "SETITEMS with an odd number of items");
    } else {
        pv *k = NULL, *v = NULL;
        PK_TRY(pk_pop(r, &v));
        PK_TRY(pk_pop(r, &k));
        items = pv_new(r, PV_TUPLE);
        pv_append(items, k);
        pv_append(items, v);
    }
    PK_TRY(pk_top(r, &d));
    if (d->kind != PV_DICT) return pk_err(r, "SETITEM on something that is not a dict");
    for (size_t k = 0; k < items->n; k++) pv_append(d, items->items[k]);
    return RT_OK;
}

static rt_status pk_appends(pk_reader *r, int many) {
    pv *items = NULL, *l = NULL;
    if (many) {
        PK_TRY(pk_pop_mark(r, PV_TUPLE, &items));
    } else {
        pv *v = NULL;
        PK_TRY(pk_pop(r, &v));
        items = pv_new(r, PV_TUPLE);
        pv_append(items, v);
    }
    PK_TRY(pk_top(r, &l));
    if (l->kind != PV_LIST) return pk_err(r, "APPEND to something that is not a list");
    for (size_t k = 0; k < items->n; k++) pv_append(l, items->items[k]);
    return RT_OK;
}

/* GLOBAL's argument: "module\nname\n". */
static rt_status pk_line(pk_reader *r, const char **s, size_t *n) {
    const unsigned char *nl = memchr(r->p + r->pos, '\n', r->size - r->pos);
    if (!nl) return pk_err(r, "GLOBAL is truncated");
    *s = (const char *)r->p + r->pos;
    *n = (size_t)(nl - (r->p + r->pos));
    r->pos += *n + 1;
    return RT_OK;
}

static rt_status pk_run(pk_reader *r, pv **result) {
    for (;;) {
        r->op_pos = r->pos;
        PK_TRY(pk_need(r, 1));
        unsigned char op = r->p[r->pos++];
        pv *v = NULL, *a = NULL, *b = NULL;
        switch (op) {
        case 0x80: /* PROTO */
            PK_TRY(pk_need(r, 1));
            if (r->p[r->pos] > 5) return pk_err(r, "pickle protocol above 5");
            r->pos++;
            break;
        case 0x95:
            PK_TRY(pk_need(r, 8));
            r->pos += 8;
            break; /* FRAME: a hint only */
        case '.':  /* STOP */
            if (r->n_stack != 1 || r->n_marks) return pk_err(r, "STOP with other than one value on the stack");
            *result = r->stack[0];
            return RT_OK;
        case '(':
            r->marks = rt_grow_to(r->marks, &r->cap_marks, r->n_marks + 1, sizeof *r->marks);
            r->marks[r->n_marks++] = r->n_stack;
            break;
        case '}': pk_push(r, pv_new(r, PV_DICT)); break;
        case ']': pk_push(r, pv_new(r, PV_LIST)); break;
        case ')': pk_push(r, pv_new(r, PV_TUPLE)); break;
        case 'N': pk_push(r, pv_new(r, PV_NONE)); break;
        case 0x88:
        case 0x89:
            v = pv_new(r, PV_BOOL);
            v->i = op == 0x88;
            pk_push(r, v);
            break;
        case 't':
            PK_TRY(pk_pop_mark(r, PV_TUPLE, &v));
            pk_push(r, v);
            break;
        case 'l':
            PK_TRY(pk_pop_mark(r, PV_LIST, &v));
            pk_push(r, v);
            break;
        case 'd':
            PK_TRY(pk_pop_mark(r, PV_DICT, &v));
            if (v->n % 2) return pk_err(r, "DICT with an odd number of items");
            pk_push(r, v);
            break;
        case 0x85:
        case 0x86:
        case 0x87: {
            int n = op - 0x84;
            pv *it[3] = {NULL, NULL, NULL};
            for (int k = n - 1; k >= 0; k--) PK_TRY(pk_pop(r, &it[k]));
            v = pv_new(r, PV_TUPLE);
            for (int k = 0; k < n; k++) pv_append(v, it[k]);
            pk_push(r, v);
            break;
        }
        case 'X': PK_TRY(pk_string(r, 4)); break;
        case 0x8c: PK_TRY(pk_string(r, 1)); break;
        case 0x8d: PK_TRY(pk_string(r, 8)); break;
        case 'B': PK_TRY(pk_string(r, 4)); break;
        case 'C': PK_TRY(pk_string(r, 1)); break;
        case 'T': PK_TRY(pk_string(r, 4)); break;
        case 'U': PK_TRY(pk_string(r, 1)); break;
        case 'J': PK_TRY(pk_int(r, 4, 1)); break;
        case 'K': PK_TRY(pk_int(r, 1, 0)); break;
        case 'M': PK_TRY(pk_int(r, 2, 0)); break;
        case 0x8a: { /* LONG1 */
            PK_TRY(pk_need(r, 1));
            int n = r->p[r->pos++];
            if (n > 8) return pk_err(r, "integer wider than 64 bits");
            if (n == 0) {
                pk_push(r, pv_new(r, PV_INT));
                break;
            }
            PK_TRY(pk_int(r, n, 1));
            break;
        }
        case 'G': {
            PK_TRY(pk_need(r, 8));
            uint64_t u = 0;
            for (int k = 0; k < 8; k++) u = (u << 8) | r->p[r->pos + (size_t)k];
            r->pos += 8;
            v = pv_new(r, PV_FLOAT);
            memcpy(&v->f, &u, sizeof v->f);
            pk_push(r, v);
            break;
        }
        case 's': PK_TRY(pk_setitems(r, 0)); break;
        case 'u': PK_TRY(pk_setitems(r, 1)); break;
        case 'a': PK_TRY(pk_appends(r, 0)); break;
        case 'e': PK_TRY(pk_appends(r, 1)); break;
        case 'q':
            PK_TRY(pk_need(r, 1));
            PK_TRY(pk_memo_put(r, r->p[r->pos++]));
            break;
        case 'r':
            PK_TRY(pk_need(r, 4));
            r->pos += 4;
            PK_TRY(pk_memo_put(r, pk_le(r->p + r->pos - 4, 4)));
            break;
        case 0x94: PK_TRY(pk_memo_put(r, r->n_memo)); break; /* MEMOIZE: at len(memo) */
        case 'h':
            PK_TRY(pk_need(r, 1));
            PK_TRY(pk_memo_get(r, r->p[r->pos++]));
            break;
        case 'j':
            PK_TRY(pk_need(r, 4));
            r->pos += 4;
            PK_TRY(pk_memo_get(r, pk_le(r->p + r->pos - 4, 4)));
            break;
        case 'c': {
            const char *m = NULL, *n = NULL;
            size_t ml = 0, nl = 0;
            PK_TRY(pk_line(r, &m, &ml));
            PK_TRY(pk_line(r, &n, &nl));
            PK_TRY(pk_global(r, m, ml, n, nl));
            break;
        }
        case 0x93: /* STACK_GLOBAL */
            PK_TRY(pk_pop(r, &b));
            PK_TRY(pk_pop(r, &a));
            if (a->kind != PV_STR || b->kind != PV_STR) return pk_err(r, "STACK_GLOBAL of non-strings");
            PK_TRY(pk_global(r, a->s, a->n, b->s, b->n));
            break;
        case 'R': PK_TRY(pk_reduce(r)); break;
        case 0x81: PK_TRY(pk_newobj(r)); break;
        case 'b': /* BUILD: a Namespace's fields; else the state of an OrderedDict (_metadata) or a tensor, not needed */
            PK_TRY(pk_pop(r, &a));
            PK_TRY(pk_top(r, &v));
            if (v->kind != PV_DICT && v->kind != PV_TENSOR)
                return pk_err(r, "BUILD of something other than a dict or tensor");
            if (v->object && a->kind == PV_DICT) {
                /* a BUILD of an object with itself doubles it: copies are bounded by the file */
                const size_t n = a->n;
                if (n > r->build_budget)
                    return pk_err(r, "BUILD copies more items than the file holds (a pickle bomb?)");
                r->build_budget -= n;
                for (size_t k = 0; k < n; k++) pv_append(v, a->items[k]);
            }
            break;
        case 'Q': PK_TRY(pk_persid(r)); break;
        case '0': PK_TRY(pk_pop(r, &v)); break;
        case '1': PK_TRY(pk_pop_mark(r, PV_TUPLE, &v)); break;
        case '2':
            PK_TRY(pk_top(r, &v));
            pk_push(r, v);
            break;
        default: {
            char msg[96];
            snprintf(msg, sizeof msg, "unsupported pickle opcode 0x%02x (not one a state dict uses)", op);
            return pk_err(r, msg);
        }
        }
    }
}

/* ---- flattening ---- */

static rt_status pk_flatten(pk_reader *r, const pv *d, const char *prefix, int depth, ckpt_pickle_state *out,
                            size_t *cap_t, size_t *cap_s) {
    if (depth > PK_MAX_DEPTH)
        return rt_errorf(RT_ERR_FORMAT, "%s: dicts nest deeper than %d levels (a cycle?)", r->what, PK_MAX_DEPTH);
    /* memoised dicts can be shared: a dict holding the same dict twice, 32 levels deep,
     * would be visited 2^32 times. A state dict visits each item once; allow twice that. */
    if (d->n / 2 > r->flatten_budget)
        return rt_errorf(RT_ERR_FORMAT,
                         "%s: its dicts share each other more than a state dict does (refusing to "
                         "expand them)",
                         r->what);
    r->flatten_budget -= d->n / 2;
    for (size_t k = 0; k + 1 < d->n; k += 2) {
        const pv *key = d->items[k], *val = d->items[k + 1];
        char kbuf[32], name[PK_MAX_NAME];
        const char *ks;
        if (key->kind == PV_STR)
            ks = key->s;
        else if (key->kind == PV_INT) {
            snprintf(kbuf, sizeof kbuf, "%lld", (long long)key->i);
            ks = kbuf;
        } else
            continue; /* not a name */
        if ((size_t)snprintf(name, sizeof name, "%s%s%s", prefix, prefix[0] ? "." : "", ks) >= sizeof name)
            return rt_errorf(RT_ERR_FORMAT, "%s: a tensor name is longer than %d bytes", r->what, PK_MAX_NAME);
        if (val->kind == PV_DICT) {
            PK_TRY(pk_flatten(r, val, name, depth + 1, out, cap_t, cap_s));
        } else if (val->kind == PV_TENSOR) {
            out->tensors = rt_grow_to(out->tensors, cap_t, out->n_tensors + 1, sizeof *out->tensors);
            ckpt_pickle_tensor *t = &out->tensors[out->n_tensors++];
            memset(t, 0, sizeof *t);
            t->name = rt_xstrdup(name);
            t->dtype = val->dtype;
            t->ndim = val->ndim;
            memcpy(t->shape, val->shape, sizeof t->shape);
            t->numel = val->numel;
            t->storage_key = rt_xstrdup(val->storage->s);
            t->storage_numel = (size_t)val->storage->i;
            t->storage_offset = val->offset;
        } else if (val->kind == PV_INT || val->kind == PV_BOOL || val->kind == PV_FLOAT) {
            out->scalars = rt_grow_to(out->scalars, cap_s, out->n_scalars + 1, sizeof *out->scalars);
            ckpt_pickle_scalar *s = &out->scalars[out->n_scalars++];
            s->name = rt_xstrdup(name);
            s->value = val->kind == PV_FLOAT ? val->f : (double)val->i;
        }
    }
    return RT_OK;
}

rt_status ckpt_pickle_read(const void *data, size_t size, const char *what, ckpt_pickle_state *out) {
    rt_status st = RT_OK;
    pk_reader r = {.p = data, .size = size, .what = what, .build_budget = size};
    size_t cap_t = 0, cap_s = 0;
    pv *root = NULL;
    memset(out, 0, sizeof *out);
    RT_TRY(pk_run(&r, &root));
    if (root->kind != PV_DICT)
        RT_FAIL(RT_ERR_FORMAT, "%s: the pickle holds no dict at its top (expected a state dict)", what);
    r.flatten_budget = 2 * r.n_pool + 16;
    RT_TRY(pk_flatten(&r, root, "", 0, out, &cap_t, &cap_s));
fail:
    for (size_t k = 0; k < r.n_pool; k++) {
        free(r.pool[k]->items);
        free(r.pool[k]->s);
        free(r.pool[k]);
    }
    free(r.pool);
    free(r.stack);
    free(r.marks);
    free(r.memo);
    if (st != RT_OK) ckpt_pickle_state_free(out);
    return st;
}

void ckpt_pickle_state_free(ckpt_pickle_state *s) {
    if (!s) return;
    for (size_t k = 0; k < s->n_tensors; k++) {
        free(s->tensors[k].name);
        free(s->tensors[k].storage_key);
    }
    for (size_t k = 0; k < s->n_scalars; k++) free(s->scalars[k].name);
    free(s->tensors);
    free(s->scalars);
    memset(s, 0, sizeof *s);
}
