/* jw.h - a small streaming JSON writer for the CLI's --json output.
 *
 * Commas are placed by a nesting stack, strings are escaped (control bytes as
 * \u00XX; invalid UTF-8 bytes as U+FFFD so the output is always valid JSON),
 * and non-finite numbers are written as null. */
#ifndef CK_JSON_OUT_H
#define CK_JSON_OUT_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JW_MAX_DEPTH 32

typedef struct jw {
    FILE *f;
    int depth;
    int first[JW_MAX_DEPTH]; /* no element written yet at this level */
    int after_key;
} jw;

void jw_init(jw *w, FILE *f);
void jw_obj(jw *w);     /* { */
void jw_obj_end(jw *w); /* } */
void jw_arr(jw *w);     /* [ */
void jw_arr_end(jw *w); /* ] */
void jw_key(jw *w, const char *k);
void jw_strn(jw *w, const char *s, size_t n);
void jw_str(jw *w, const char *s);
void jw_int(jw *w, int64_t v);
void jw_num(jw *w, double v);
void jw_bool(jw *w, int v);
void jw_null(jw *w);
/* Escape s into the stream as a JSON string (no comma handling). */
void jw_escape(FILE *f, const char *s, size_t n);

#endif
