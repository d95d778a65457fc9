/* sr_ckpt.h: safetensors files (the checkpoint format).
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON header
 *   {"__metadata__": {"format": "pt", ...string values},
 *    NAME: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8, then the little-endian tensor data
 * (offsets relative to the end of the header, contiguous, no holes).
 *
 * Reading validates everything the official implementation validates and
 * reports SR_ERR_FORMAT naming the file; F32 loads as is, F16/BF16/F64 are
 * converted to float. Writing produces F32 only.
 */
#ifndef SR_CKPT_H
#define SR_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "shardrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SR_ST_MAX_DIMS 8
/* Headers above this size are rejected as corrupt (as safetensors does). */
#define SR_ST_MAX_HEADER (100u * 1024u * 1024u)

typedef struct sr_st_tensor {
    char *name;
    char dtype[12];                 /* as in the file: "F32", "BF16", ... */
    int elem_size;                  /* bytes per element */
    int ndim;
    int64_t dims[SR_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;            /* byte range in the data section */
    const unsigned char *bytes;     /* its data, in whichever file holds it */
} sr_st_tensor;

typedef struct sr_st_file {
    char *path;
    int n;                          /* tensors, sorted by name */
    sr_st_tensor *tensors;
    int n_meta;                     /* __metadata__ entries, in file order */
    char **meta_keys, **meta_values;
    const unsigned char *data;      /* data section */
    uint64_t data_len;
    void *map;                      /* whole file, mmap'ed */
    size_t map_len;
    int n_shards;                   /* sr_st_open_index: the shard files the tensors are in */
    struct sr_st_file *shards;
} sr_st_file;

/* Opens and validates a safetensors file; a file with our checksum in its
 * __metadata__ (sr_st_write's "data_checksum") has its data checked against
 * it (SR_ERR_FORMAT naming both values). On failure *f is closed. */
sr_status sr_st_open(sr_st_file *f, const char *path);
void sr_st_close(sr_st_file *f);
/* Opens a Hugging Face sharded checkpoint by its index
 * (model.safetensors.index.json: "weight_map" from tensor name to shard file,
 * the files beside it) as one file: every shard's tensors, each where its
 * shard holds it. SR_ERR_FORMAT if the index is not one, a tensor it maps is
 * not in its shard, or two shards hold one name; a shard's own errors as
 * sr_st_open's. On failure *f is closed. */
sr_status sr_st_open_index(sr_st_file *f, const char *index_path);

/* Tensor by exact name, or NULL. */
const sr_st_tensor *sr_st_find(const sr_st_file *f, const char *name);
/* Tensor by name, else by the name with each prefix of the comma-separated
 * list `prefixes` removed (if name starts with it) or added (if not), in
 * order: Hugging Face files store "h.0.attn..." or "transformer.h.0.attn..."
 * (GPT-2) and "model.layers.0..." next to "lm_head.weight" (Llama) depending
 * on the model and on who saved them. */
const sr_st_tensor *sr_st_find_alias(const sr_st_file *f, const char *name, const char *prefixes);
/* __metadata__ value by key, or NULL. */
const char *sr_st_meta(const sr_st_file *f, const char *key);

/* Converts tensor t to float32 into out (t->numel floats). SR_ERR_FORMAT if
 * its dtype is not F32, F16, BF16 or F64. */
sr_status sr_st_read_f32(const sr_st_file *f, const sr_st_tensor *t, float *out);
/* Finds `name` (with sr_st_find_alias when prefix != NULL), checks that its
 * shape is exactly dims[0..ndim) and loads it as float32. Errors name the
 * file, the tensor and both shapes (SR_ERR_STATE: the file does not fit the
 * program). */
sr_status sr_st_load(const sr_st_file *f, const char *name, const char *prefix, int ndim,
                     const int64_t *dims, float *out);
/* sr_st_load, and where rows > 0 the file may hold only `rows` of dims[0]
 * (a padded vocabulary's real rows, the rest of dims the same): they are
 * loaded and the padding rows set to zero (*padded = 1). */
sr_status sr_st_load_rows(const sr_st_file *f, const char *name, const char *prefix, int ndim,
                          const int64_t *dims, int64_t rows, float *out, int *padded);

/* "[768, 2304]" into buf (always NUL-terminated); returns buf. */
char *sr_shape_str(char *buf, size_t cap, int ndim, const int64_t *dims);

typedef struct sr_st_entry {
    const char *name;
    int ndim;
    const int64_t *dims;
    const float *data;              /* numel floats */
} sr_st_entry;

/* Writes n F32 tensors (in the given order) to path and fsyncs it. meta holds
 * n_meta key/value string pairs (meta[2i], meta[2i+1]) added to __metadata__
 * after "format": "pt" and "data_checksum": "sr64:<hex>" (a 64-bit hash of the
 * data section, which sr_st_open checks). A failed write removes the partial
 * file. */
sr_status sr_st_write(const char *path, const sr_st_entry *t, int n, const char *const *meta,
                      int n_meta);

#ifdef __cplusplus
}
#endif
#endif /* SR_CKPT_H */
