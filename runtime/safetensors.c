/* safetensors.c: reading and writing safetensors files.
 *
 * Files are mmap'ed: a GPT-2 checkpoint is 500 MB and only the tensors the
 * program has are touched. Every header field is checked before any data is
 * read, so a corrupt or hostile file is an error message, never a crash.
 *
 * Files we write carry a checksum of their data section in __metadata__
 * ("data_checksum": "sr64:<16 hex digits>", see sr_hash below), checked when
 * such a file is opened: a bit flipped on disk or a file half overwritten by
 * a copy keeps a valid header, and would otherwise load as wrong weights.
 * Files without the key (Hugging Face's, older checkpoints) open unchecked.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sr_ckpt.h"
#include "sr_json.h"

static const struct {
    const char *name;
    int size;
} dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
    {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2}, {"U8", 1},
    {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

static int host_is_le(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

#define CHECKSUM_KEY "data_checksum"
#define CHECKSUM_TAG "sr64:"

/* sr_hash: 64 bits over a byte stream, four lanes of little-endian 8-byte words
 * (lane = (lane ^ word) * odd, then an xor-shift: both invertible, so a change
 * confined to one lane's words always changes the result), the lanes, the tail
 * and the length mixed at the end. Not cryptographic; several GB/s. */
typedef struct sr_hash {
    uint64_t lane[4];
    unsigned char buf[32];
    size_t nbuf;
    uint64_t len;
} sr_hash;

static const uint64_t HASH_MUL = 0x9fb21c651e98df25ull, HASH_MUL2 = 0xd6e8feb86659fd93ull;

static uint64_t rd64le(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8); /* one load */
    return host_is_le() ? v : __builtin_bswap64(v);
}

static uint64_t hash_mix(uint64_t x)
{
    x ^= x >> 32;
    x *= HASH_MUL2;
    x ^= x >> 29;
    x *= HASH_MUL;
    return x ^ (x >> 32);
}

static void hash_init(sr_hash *h)
{
    for (int i = 0; i < 4; i++) h->lane[i] = 0x243f6a8885a308d3ull * (uint64_t)(2 * i + 1);
    h->nbuf = 0;
    h->len = 0;
}

static void hash_block(sr_hash *h, const unsigned char *p)
{
    for (int i = 0; i < 4; i++) {
        uint64_t x = (h->lane[i] ^ rd64le(p + 8 * i)) * HASH_MUL;
        h->lane[i] = x ^ (x >> 31);
    }
}

static void hash_update(sr_hash *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (n == 0) return; /* a zero-size tensor may have no data pointer */
    h->len += n;
    if (h->nbuf) {
        size_t k = 32 - h->nbuf < n ? 32 - h->nbuf : n;
        memcpy(h->buf + h->nbuf, p, k);
        h->nbuf += k, p += k, n -= k;
        if (h->nbuf < 32) return;
        hash_block(h, h->buf);
        h->nbuf = 0;
    }
    for (; n >= 32; p += 32, n -= 32) hash_block(h, p);
    memcpy(h->buf, p, n);
    h->nbuf = n;
}

static uint64_t hash_final(const sr_hash *h)
{
    unsigned char tail[32] = {0};
    memcpy(tail, h->buf, h->nbuf);
    uint64_t r = h->len * HASH_MUL2;
    for (int i = 0; i < 4; i++) r = hash_mix(r ^ h->lane[i] ^ rd64le(tail + 8 * i));
    return r;
}


static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

char *sr_shape_str(char *buf, size_t cap, int ndim, const int64_t *dims)
{
    size_t n = 0;
    if (cap == 0) return buf;
    buf[0] = '\0';
    n += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* -------------------------------------------------------------------------- */
/* Reading                                                                     */

void sr_st_close(sr_st_file *f)
{
    for (int i = 0; i < f->n; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    if (f->map) munmap(f->map, f->map_len);
    for (int i = 0; i < f->n_shards; i++) sr_st_close(&f->shards[i]);
    free(f->shards);
    free(f->path);
    memset(f, 0, sizeof *f);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const sr_st_tensor *)a)->name, ((const sr_st_tensor *)b)->name);
}

static int cmp_begin(const void *a, const void *b)
{
    const sr_st_tensor *x = *(const sr_st_tensor *const *)a, *y = *(const sr_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static sr_status bad(const char *path, const char *what, const char *name)
{
    return sr_seterr(SR_ERR_FORMAT, "%s: corrupt safetensors file: %s%s%s%s", path, what,
                     name ? " (tensor '" : "", name ? name : "", name ? "')" : "");
}

static sr_status read_metadata(sr_st_file *f, const sr_json *m)
{
    if (m->type != SR_JSON_OBJECT) return bad(f->path, "__metadata__ is not an object", NULL);
    f->meta_keys = calloc((size_t)m->n + 1, sizeof(char *));
    f->meta_values = calloc((size_t)m->n + 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_values) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n; i++) {
        const sr_json *v = &m->items[i];
        if (v->type != SR_JSON_STRING)
            return sr_seterr(SR_ERR_FORMAT,
                             "%s: corrupt safetensors file: __metadata__ value '%s' is a %s, "
                             "not a string",
                             f->path, v->key, sr_json_type_name(v->type));
        f->meta_keys[f->n_meta] = strdup(v->key);
        f->meta_values[f->n_meta] = strdup(v->str);
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1])
            return sr_seterr(SR_ERR_NOMEM, "out of memory");
    }
    return SR_OK;
}

/* Fills t from one header member, checking types, ranges and sizes. */
static sr_status read_tensor(sr_st_file *f, const sr_json *m, sr_st_tensor *t)
{
    const char *nm = m->key;
    if (m->type != SR_JSON_OBJECT) return bad(f->path, "entry is not an object", nm);
    const char *dt = sr_json_string(sr_json_get(m, "dtype"));
    const sr_json *shape = sr_json_get(m, "shape");
    const sr_json *offs = sr_json_get(m, "data_offsets");
    if (!dt) return bad(f->path, "missing or non-string \"dtype\"", nm);
    if (!shape || shape->type != SR_JSON_ARRAY) return bad(f->path, "missing \"shape\" array", nm);
    if (!offs || offs->type != SR_JSON_ARRAY || offs->n != 2)
        return bad(f->path, "\"data_offsets\" is not an array of two numbers", nm);
    t->elem_size = 0;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dt, dtypes[i].name) == 0) {
            t->elem_size = dtypes[i].size;
            snprintf(t->dtype, sizeof t->dtype, "%s", dtypes[i].name);
        }
    if (!t->elem_size)
        return sr_seterr(SR_ERR_FORMAT, "%s: tensor '%s' has unknown dtype \"%.32s\"", f->path,
                         nm, dt);
    if (shape->n > SR_ST_MAX_DIMS)
        return sr_seterr(SR_ERR_FORMAT, "%s: tensor '%s' has %d dimensions, more than %d",
                         f->path, nm, shape->n, SR_ST_MAX_DIMS);
    t->ndim = shape->n;
    uint64_t numel = 1;
    int overflow = 0, zero = 0;
    for (int i = 0; i < shape->n; i++) {
        int64_t d;
        if (!sr_json_int64(&shape->items[i], &d) || d < 0)
            return bad(f->path, "shape entries must be non-negative integers", nm);
        t->dims[i] = d;
        /* bound numel so that numel * elem_size cannot wrap */
        if (d == 0) zero = 1;
        else if (numel > (UINT64_MAX / 16) / (uint64_t)d) overflow = 1;
        else numel *= (uint64_t)d;
    }
    if (zero) numel = 0;
    else if (overflow) return bad(f->path, "shape is too large", nm);
    t->numel = (int64_t)numel;
    uint64_t b, e;
    if (!sr_json_uint64(&offs->items[0], &b) || !sr_json_uint64(&offs->items[1], &e))
        return bad(f->path, "data_offsets must be non-negative integers", nm);
    if (b > e || e > f->data_len)
        return sr_seterr(SR_ERR_FORMAT,
                         "%s: tensor '%s' has data_offsets [%llu, %llu] outside the %llu-byte "
                         "data section; the file is truncated or corrupt",
                         f->path, nm, (unsigned long long)b, (unsigned long long)e,
                         (unsigned long long)f->data_len);
    if (e - b != numel * (uint64_t)t->elem_size)
        return sr_seterr(SR_ERR_FORMAT,
                         "%s: tensor '%s' is %s with %llu elements (%llu bytes) but its "
                         "data_offsets span %llu bytes",
                         f->path, nm, t->dtype, (unsigned long long)numel,
                         (unsigned long long)(numel * (uint64_t)t->elem_size),
                         (unsigned long long)(e - b));
    t->begin = b;
    t->end = e;
    return SR_OK;
}

/* The data section must be covered exactly: sorted by offset, each tensor
 * starts where the previous one ended and the last ends at the file's end. */
static sr_status check_coverage(sr_st_file *f)
{
    if (f->n == 0) {
        if (f->data_len != 0) return bad(f->path, "data after the header but no tensors", NULL);
        return SR_OK;
    }
    const sr_st_tensor **order = malloc((size_t)f->n * sizeof *order);
    if (!order) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < f->n; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    uint64_t expect = 0;
    sr_status s = SR_OK;
    for (int i = 0; i < f->n && s == SR_OK; i++) {
        if (order[i]->begin != expect)
            s = sr_seterr(SR_ERR_FORMAT,
                          "%s: corrupt safetensors file: tensor '%s' starts at byte %llu of "
                          "the data, expected %llu (overlap or hole)",
                          f->path, order[i]->name, (unsigned long long)order[i]->begin,
                          (unsigned long long)expect);
        expect = order[i]->end;
    }
    if (s == SR_OK && expect != f->data_len)
        s = sr_seterr(SR_ERR_FORMAT,
                      "%s: corrupt safetensors file: tensors end at byte %llu but the data "
                      "section has %llu bytes",
                      f->path, (unsigned long long)expect, (unsigned long long)f->data_len);
    free(order);
    return s;
}

static sr_status parse_header(sr_st_file *f, const unsigned char *hdr, uint64_t hlen)
{
    sr_json *root = NULL;
    SR_CHECK(sr_json_parse((const char *)hdr, (size_t)hlen, f->path, &root));
    sr_status s = SR_OK;
    if (root->type != SR_JSON_OBJECT) {
        s = bad(f->path, "the header is not a JSON object", NULL);
        goto out;
    }
    f->tensors = calloc((size_t)root->n + 1, sizeof *f->tensors);
    if (!f->tensors) {
        s = sr_seterr(SR_ERR_NOMEM, "out of memory");
        goto out;
    }
    int seen_meta = 0;
    for (int i = 0; i < root->n && s == SR_OK; i++) {
        const sr_json *m = &root->items[i];
        if (strcmp(m->key, "__metadata__") == 0) {
            if (seen_meta++) s = bad(f->path, "two __metadata__ entries", NULL);
            else s = read_metadata(f, m);
            continue;
        }
        sr_st_tensor *t = &f->tensors[f->n];
        t->name = strdup(m->key);
        if (!t->name) {
            s = sr_seterr(SR_ERR_NOMEM, "out of memory");
            break;
        }
        f->n++;
        s = read_tensor(f, m, t);
    }
    if (s == SR_OK) {
        qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_name);
        for (int i = 1; i < f->n && s == SR_OK; i++)
            if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
                s = bad(f->path, "duplicate tensor name", f->tensors[i].name);
    }
    if (s == SR_OK) s = check_coverage(f);
out:
    sr_json_free(root);
    return s;
}

/* the data section against the checksum written with it, if the file has one
 * of ours (another tag, from a later version, is left alone) */
static sr_status check_checksum(const sr_st_file *f)
{
    const char *want = sr_st_meta(f, CHECKSUM_KEY);
    if (!want || strncmp(want, CHECKSUM_TAG, strlen(CHECKSUM_TAG)) != 0) return SR_OK;
    sr_hash h;
    hash_init(&h);
    hash_update(&h, f->data, (size_t)f->data_len);
    char got[40];
    snprintf(got, sizeof got, CHECKSUM_TAG "%016llx", (unsigned long long)hash_final(&h));
    if (strcmp(got, want) == 0) return SR_OK;
    return sr_seterr(SR_ERR_FORMAT,
                     "%s: corrupt safetensors file: its %llu bytes of tensor data do not match the checksum "
                     "written with them (%s, now %s): the file changed after it was saved; restore it, or load "
                     "another checkpoint (changed on purpose: drop data_checksum from its metadata)",
                     f->path, (unsigned long long)f->data_len, want, got);
}

sr_status sr_st_open(sr_st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    sr_status s = SR_OK;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        s = sr_seterr(SR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        s = sr_seterr(SR_ERR_IO, "%s is not a regular file", path);
        goto fail;
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        s = sr_seterr(SR_ERR_FORMAT, "%s is not a safetensors file: only %zu bytes", path, size);
        goto fail;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        s = sr_seterr(SR_ERR_IO, "cannot map %s: %s", path, strerror(e));
        goto fail;
    }
    f->map = map;
    f->map_len = size;
    const unsigned char *b = map;
    uint64_t hlen = le64(b);
    if (hlen > size - 8 || hlen > SR_ST_MAX_HEADER) {
        s = sr_seterr(SR_ERR_FORMAT,
                      "%s: corrupt safetensors file: header length %llu does not fit in the "
                      "%zu-byte file",
                      path, (unsigned long long)hlen, size);
        goto fail;
    }
    if (hlen < 2 || b[8] != '{') {
        s = bad(path, "the header does not start with '{'", NULL);
        goto fail;
    }
    f->data = b + 8 + hlen;
    f->data_len = size - 8 - hlen;
    s = parse_header(f, b + 8, hlen);
    if (s == SR_OK) s = check_checksum(f);
    for (int i = 0; s == SR_OK && i < f->n; i++) f->tensors[i].bytes = f->data + f->tensors[i].begin;
    if (s == SR_OK) return SR_OK;
fail:
    sr_st_close(f);
    return s;
}

/* index.json's directory joined with a shard's name */
static char *beside(const char *index_path, const char *name)
{
    const char *slash = strrchr(index_path, '/');
    size_t d = slash ? (size_t)(slash - index_path) + 1 : 0, n = strlen(name);
    char *p = malloc(d + n + 1);
    if (!p) return NULL;
    memcpy(p, index_path, d);
    memcpy(p + d, name, n + 1);
    return p;
}

sr_status sr_st_open_index(sr_st_file *f, const char *index_path)
{
    memset(f, 0, sizeof *f);
    sr_json *root = NULL;
    f->path = strdup(index_path);
    sr_status s = f->path ? sr_json_parse_file(index_path, &root) : sr_seterr(SR_ERR_NOMEM, "out of memory");
    const sr_json *map = s == SR_OK ? sr_json_get(root, "weight_map") : NULL;
    if (s == SR_OK && (!map || map->type != SR_JSON_OBJECT || map->n == 0))
        s = sr_seterr(SR_ERR_FORMAT, "%s has no \"weight_map\" of tensor names to files; it is not a "
                      "safetensors index", index_path);
    /* the shards, each opened once, in the order the map first names them */
    int *shard_of = s == SR_OK ? calloc((size_t)map->n, sizeof *shard_of) : NULL, total = 0;
    const char **names = s == SR_OK ? calloc((size_t)map->n, sizeof *names) : NULL; /* the shards' */
    f->shards = s == SR_OK ? calloc((size_t)map->n, sizeof *f->shards) : NULL;
    if (s == SR_OK && (!shard_of || !names || !f->shards)) s = sr_seterr(SR_ERR_NOMEM, "out of memory");
    for (int i = 0; s == SR_OK && i < map->n; i++) {
        const char *file = sr_json_string(&map->items[i]);
        if (!file || !*file || strchr(file, '/')) {
            s = sr_seterr(SR_ERR_FORMAT, "%s: tensor '%s' maps to %s, not the name of a file beside it",
                          index_path, map->items[i].key, file ? file : "no string");
            break;
        }
        int k = 0;
        while (k < f->n_shards && strcmp(names[k], file) != 0) k++;
        if (k == f->n_shards) {
            char *path = beside(index_path, file);
            s = path ? sr_st_open(&f->shards[k], path) : sr_seterr(SR_ERR_NOMEM, "out of memory");
            free(path);
            if (s != SR_OK) break;
            names[f->n_shards++] = file;
            total += f->shards[k].n;
        }
        shard_of[i] = k;
    }
    /* every tensor a map entry names is in its shard */
    for (int i = 0; s == SR_OK && i < map->n; i++)
        if (!sr_st_find(&f->shards[shard_of[i]], map->items[i].key))
            s = sr_seterr(SR_ERR_FORMAT, "%s maps tensor '%s' to %s, which has no such tensor; the "
                          "download is incomplete or from another revision", index_path, map->items[i].key,
                          f->shards[shard_of[i]].path);
    free(shard_of);
    free(names);
    sr_json_free(root);
    /* one table of every shard's tensors, sorted by name, each name once */
    f->tensors = s == SR_OK ? calloc((size_t)total + 1, sizeof *f->tensors) : NULL;
    if (s == SR_OK && !f->tensors) s = sr_seterr(SR_ERR_NOMEM, "out of memory");
    if (f->tensors) f->n = total; /* names NULL until copied: sr_st_close frees what there is */
    int n = 0;
    for (int k = 0; s == SR_OK && k < f->n_shards; k++)
        for (int i = 0; i < f->shards[k].n; i++) {
            f->tensors[n] = f->shards[k].tensors[i];
            f->tensors[n].name = strdup(f->shards[k].tensors[i].name);
            if (!f->tensors[n++].name) {
                s = sr_seterr(SR_ERR_NOMEM, "out of memory");
                break;
            }
        }
    if (s == SR_OK) qsort(f->tensors, (size_t)n, sizeof *f->tensors, cmp_name);
    for (int i = 1; s == SR_OK && i < n; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            s = sr_seterr(SR_ERR_FORMAT, "%s: two of its shards hold tensor '%s'", index_path, f->tensors[i].name);
    if (s == SR_OK) return SR_OK;
    sr_st_close(f);
    return s;
}

const sr_st_tensor *sr_st_find(const sr_st_file *f, const char *name)
{
    sr_st_tensor key;
    memset(&key, 0, sizeof key);
    key.name = (char *)name;
    if (f->n == 0) return NULL;
    return bsearch(&key, f->tensors, (size_t)f->n, sizeof key, cmp_name);
}

const sr_st_tensor *sr_st_find_alias(const sr_st_file *f, const char *name, const char *prefixes)
{
    const sr_st_tensor *t = sr_st_find(f, name);
    for (const char *p = prefixes; !t && p && *p;) {
        const char *end = strchr(p, ',');
        size_t pl = end ? (size_t)(end - p) : strlen(p), nl = strlen(name);
        if (pl && nl > pl && strncmp(name, p, pl) == 0) {
            t = sr_st_find(f, name + pl);
        } else if (pl) {
            char *full = malloc(pl + nl + 1);
            if (!full) return NULL;
            memcpy(full, p, pl);
            memcpy(full + pl, name, nl + 1);
            t = sr_st_find(f, full);
            free(full);
        }
        p = end ? end + 1 : p + pl;
    }
    return t;
}

const char *sr_st_meta(const sr_st_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

/* IEEE half to float, including subnormals, infinities and NaN. */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    int exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13);
    } else if (exp == 0) {
        float v = ldexpf((float)man, -24); /* subnormal (or zero): exact */
        return sign ? -v : v;
    } else {
        bits = sign | (uint32_t)(exp - 15 + 127) << 23 | (man << 13);
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

sr_status sr_st_read_f32(const sr_st_file *f, const sr_st_tensor *t, float *out)
{
    const unsigned char *p = t->bytes;
    int64_t n = t->numel;
    int le = host_is_le();
    if (strcmp(t->dtype, "F32") == 0) {
        if (n == 0) return SR_OK;
        if (le) {
            memcpy(out, p, (size_t)n * 4);
        } else {
            for (int64_t i = 0; i < n; i++) {
                uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                             (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
                memcpy(&out[i], &u, 4);
            }
        }
    } else if (strcmp(t->dtype, "F16") == 0) {
        for (int64_t i = 0; i < n; i++)
            out[i] = half_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    } else if (strcmp(t->dtype, "BF16") == 0) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
            memcpy(&out[i], &u, 4);
        }
    } else if (strcmp(t->dtype, "F64") == 0) {
        for (int64_t i = 0; i < n; i++) {
            uint64_t u = le64(p + 8 * i);
            double d;
            memcpy(&d, &u, 8);
            out[i] = (float)d;
        }
    } else {
        return sr_seterr(SR_ERR_FORMAT,
                         "%s: tensor '%s' has dtype %s; only F32, F16, BF16 and F64 can be "
                         "loaded as parameters",
                         f->path, t->name, t->dtype);
    }
    return SR_OK;
}

sr_status sr_st_load(const sr_st_file *f, const char *name, const char *prefix, int ndim,
                     const int64_t *dims, float *out)
{
    return sr_st_load_rows(f, name, prefix, ndim, dims, 0, out, NULL);
}

sr_status sr_st_load_rows(const sr_st_file *f, const char *name, const char *prefix, int ndim,
                          const int64_t *dims, int64_t rows, float *out, int *padded)
{
    if (padded) *padded = 0;
    const sr_st_tensor *t = prefix ? sr_st_find_alias(f, name, prefix) : sr_st_find(f, name);
    if (!t) {
        if (prefix)
            return sr_seterr(SR_ERR_STATE,
                             "%s has no tensor '%s' (also looked for it with a prefix of '%s' "
                             "removed or added); it was saved from a different model",
                             f->path, name, prefix);
        return sr_seterr(SR_ERR_STATE, "%s has no tensor '%s'; it was saved from a different "
                         "model", f->path, name);
    }
    int same = t->ndim == ndim, short_rows = 0;
    for (int i = 0; same && i < ndim; i++) same = t->dims[i] == dims[i];
    if (!same && rows > 0 && ndim >= 1 && t->ndim == ndim && t->dims[0] == rows && rows < dims[0]) {
        short_rows = 1; /* the vocabulary's rows without its padding */
        for (int i = 1; i < ndim; i++) short_rows &= t->dims[i] == dims[i];
    }
    if (short_rows) {
        /* row-major: the file's rows are a prefix; the padding rows are zero */
        int64_t n = 1;
        for (int i = 0; i < ndim; i++) n *= dims[i];
        memset(out + t->numel, 0, sizeof(float) * (size_t)(n - t->numel));
        if (padded) *padded = 1;
        return sr_st_read_f32(f, t, out);
    }
    if (!same) {
        char a[160], b[160];
        return sr_seterr(SR_ERR_STATE, "%s: tensor '%s' has shape %s, the program expects %s",
                         f->path, t->name, sr_shape_str(a, sizeof a, t->ndim, t->dims),
                         sr_shape_str(b, sizeof b, ndim, dims));
    }
    return sr_st_read_f32(f, t, out);
}

/* -------------------------------------------------------------------------- */
/* Writing                                                                     */

static int write_all(FILE *fp, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, fp) == n; /* zero-size tensors may have NULL data */
}

/* n floats little-endian to fp and into the hash h: as they are on a
 * little-endian host, else swapped; a chunk at a time, written while the
 * hash's read left it in cache */
static int put_floats(FILE *fp, sr_hash *h, const float *x, int64_t n)
{
    enum { CHUNK = 1 << 18 }; /* floats: 1 MiB */
    int le = host_is_le();
    unsigned char buf[4096];
    for (int64_t i = 0; i < n;) {
        const void *p = x + i;
        int64_t k = n - i < CHUNK ? n - i : CHUNK;
        if (!le) { /* swapped into buf, 1024 at a time */
            if (k > 1024) k = 1024;
            for (int64_t j = 0; j < k; j++) {
                uint32_t u;
                memcpy(&u, &x[i + j], 4);
                for (int b = 0; b < 4; b++) buf[4 * j + b] = (unsigned char)(u >> (8 * b));
            }
            p = buf;
        }
        hash_update(h, p, (size_t)k * 4);
        if (!write_all(fp, p, (size_t)k * 4)) return 0;
        i += k;
    }
    return 1;
}

static int64_t entry_numel(const sr_st_entry *t)
{
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->dims[d];
    return numel;
}

sr_status sr_st_write(const char *path, const sr_st_entry *t, int n, const char *const *meta,
                      int n_meta)
{
    for (int i = 0; i < n; i++) {
        if (!t[i].name || strcmp(t[i].name, "__metadata__") == 0 || t[i].ndim < 0 ||
            t[i].ndim > SR_ST_MAX_DIMS)
            return sr_seterr(SR_ERR_ARG, "%s: bad tensor entry %d", path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return sr_seterr(SR_ERR_ARG, "%s: tensor '%s' given twice", path, t[i].name);
    }
    /* the data's checksum goes in the header, which comes first: its 16 digits are
     * written as zeros there, hashed with the data as it is written, and put in after */
    static const char head[] = "{\"__metadata__\":{\"format\":\"pt\",\"" CHECKSUM_KEY "\":\"" CHECKSUM_TAG;
    sr_buf h;
    sr_buf_init(&h);
    sr_buf_puts(&h, head);
    sr_buf_puts(&h, "0000000000000000\"");
    for (int i = 0; i < n_meta; i++) {
        if (strcmp(meta[2 * i], "format") == 0 || strcmp(meta[2 * i], CHECKSUM_KEY) == 0) continue;
        sr_buf_puts(&h, ",");
        sr_buf_json_string(&h, meta[2 * i]);
        sr_buf_puts(&h, ":");
        sr_buf_json_string(&h, meta[2 * i + 1]);
    }
    sr_buf_puts(&h, "}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        sr_buf_puts(&h, ",");
        sr_buf_json_string(&h, t[i].name);
        sr_buf_puts(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) {
            sr_buf_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].dims[d]);
            numel *= t[i].dims[d];
        }
        uint64_t bytes = (uint64_t)numel * 4;
        sr_buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                      (unsigned long long)(off + bytes));
        off += bytes;
    }
    sr_buf_puts(&h, "}");
    while (h.len % 8) sr_buf_puts(&h, " "); /* data section 8-byte aligned */
    sr_status s = sr_buf_status(&h);
    if (s != SR_OK) {
        sr_buf_free(&h);
        return s;
    }
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        s = sr_seterr(SR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
        sr_buf_free(&h);
        return s;
    }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    int ok = write_all(fp, lenb, 8) && write_all(fp, h.data, h.len);
    sr_buf_free(&h);
    sr_hash dh;
    hash_init(&dh);
    for (int i = 0; ok && i < n; i++) ok = put_floats(fp, &dh, t[i].data, entry_numel(&t[i]));
    if (ok) {
        char sum[17];
        snprintf(sum, sizeof sum, "%016llx", (unsigned long long)hash_final(&dh));
        ok = fseek(fp, (long)(8 + sizeof head - 1), SEEK_SET) == 0 && write_all(fp, sum, 16);
    }
    int e = errno;
    /* fsync so that a checkpoint renamed into place after this call is on disk */
    if (ok && (fflush(fp) != 0 || fsync(fileno(fp)) != 0)) {
        ok = 0;
        e = errno;
    }
    if (fclose(fp) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(path);
        return sr_seterr(SR_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return SR_OK;
}
