/* tb.h - completion text: a growing buffer and stop strings, shared by
 * the single-sequence driver (gen.c) and the engine (engine.c).
 *
 * A text buffer is three caller-owned fields (pointer, length, capacity);
 * the text is always NUL-terminated after the first append and may hold NUL
 * bytes (use the length). It grows by doubling, so appending a token's piece
 * allocates only O(log n) times over a completion. */
#ifndef CK_TEXTBUF_H
#define CK_TEXTBUF_H
#include <stddef.h>

/* Append n bytes of s (n may be 0: makes sure the buffer exists). Returns 0
 * or CK_ENOMEM (the text is unchanged then). Free *text with free(). */
int tb_append(char **text, size_t *len, size_t *cap, const char *s, size_t n);

/* Does one of the stop strings now occur in text[0, *len)? Only the tail
 * that bytes appended at offset `before` could have completed is searched.
 * On a hit the text is cut before the stop string (*len shrinks, a NUL is
 * written) and 1 is returned; else 0. Empty stop strings never match. */
int tb_cut_stop(char *text, size_t *len, const char *const *stops, int n_stops, size_t before);

/* Length of the longest tail of text[0, len) that is a proper prefix of a
 * stop string: bytes a streaming caller holds back, since the next piece may
 * complete a stop string that must not be shown. 0 when there are no stops. */
size_t tb_stop_holdback(const char *text, size_t len, const char *const *stops, int n_stops);

#endif
