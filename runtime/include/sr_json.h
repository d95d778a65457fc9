/* sr_json.h: a small JSON reader (enough for safetensors headers, Hugging Face
 * config.json and our own state.json) and a growable text buffer with safe
 * JSON string/number writers.
 *
 * The reader builds a tree; every node owns its children and strings, so one
 * sr_json_free of the root releases everything.
 */
#ifndef SR_JSON_H
#define SR_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shardrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Node kinds, value by value. */
typedef enum sr_json_type {
    SR_JSON_NULL = 0,   /* null */
    SR_JSON_BOOL = 1,   /* true / false: see .boolean */
    SR_JSON_NUMBER = 2, /* .number (double) and .str (the literal as written) */
    SR_JSON_STRING = 3, /* .str decoded to UTF-8, NUL-terminated, .len bytes */
    SR_JSON_ARRAY = 4,  /* .items[0 .. n) */
    SR_JSON_OBJECT = 5  /* .items[0 .. n), each with .key set, in file order */
} sr_json_type;

typedef struct sr_json sr_json;
struct sr_json {
    sr_json_type type;
    char *key;        /* member name inside an object (decoded), else NULL */
    int boolean;
    double number;
    char *str;        /* STRING: decoded text; NUMBER: literal text */
    size_t len;       /* bytes in str (a STRING may contain \u0000) */
    sr_json *items;   /* ARRAY / OBJECT children */
    int n;
};

/* Parses exactly one JSON value (surrounding whitespace allowed) from
 * text[0 .. len). `what` names the source (a file name) for error messages:
 * "WHAT: invalid JSON at byte N: reason". Returns SR_ERR_FORMAT on bad input,
 * SR_ERR_NOMEM on allocation failure. Nesting is limited to 256 levels. */
sr_status sr_json_parse(const char *text, size_t len, const char *what, sr_json **out);
/* Reads and parses a whole file (SR_ERR_IO if it cannot be read). */
sr_status sr_json_parse_file(const char *path, sr_json **out);
void sr_json_free(sr_json *j);

/* First member named key of an object; NULL if j is not an object or lacks it. */
const sr_json *sr_json_get(const sr_json *j, const char *key);
/* Name of a node kind for messages ("object", "string", ...). */
const char *sr_json_type_name(sr_json_type t);
/* 1 and *out set if j is an integral number literal that fits, else 0. */
int sr_json_int64(const sr_json *j, int64_t *out);
int sr_json_uint64(const sr_json *j, uint64_t *out);
/* The string of a STRING node, or NULL. */
const char *sr_json_string(const sr_json *j);

/* Growable, always NUL-terminated text buffer. Allocation failures are
 * sticky: later appends do nothing and sr_buf_status reports SR_ERR_NOMEM. */
typedef struct sr_buf {
    char *data;
    size_t len, cap;
    int failed;
} sr_buf;

void sr_buf_init(sr_buf *b);
/* The whole file into a fresh buffer (initialized here; freed on failure):
 * SR_ERR_IO naming the file, or SR_ERR_NOMEM. */
sr_status sr_buf_read_file(sr_buf *b, const char *path);
void sr_buf_free(sr_buf *b);
void sr_buf_append(sr_buf *b, const char *s, size_t n);
void sr_buf_puts(sr_buf *b, const char *s);
void sr_buf_printf(sr_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Appends s as a quoted JSON string: quotes, backslashes and control
 * characters escaped; invalid UTF-8 bytes become \ufffd so the output is
 * always valid JSON. NULL is written as null. */
void sr_buf_json_string(sr_buf *b, const char *s);
/* Numbers: %.17g for doubles, %.9g for floats (both round-trip exactly);
 * NaN and infinities are not JSON and are written as null. */
void sr_buf_json_double(sr_buf *b, double x);
void sr_buf_json_float(sr_buf *b, float x);
sr_status sr_buf_status(const sr_buf *b);

/* Writes s as a quoted JSON string to f (same escaping as sr_buf_json_string). */
void sr_json_write_string(FILE *f, const char *s);

#ifdef __cplusplus
}
#endif
#endif /* SR_JSON_H */
