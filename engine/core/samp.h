/* samp.h - the per-token policy: confidence signals and next-token choice.
 *
 * samp_confidence is a pure function of the logits (entropy, top-1
 * probability, top-1 minus top-2), computed in one pass; it runs on every
 * generated token. A sampler picks the next token: greedy, or
 * repetition penalty -> temperature -> top-k -> softmax -> min-p -> top-p ->
 * draw, with its own RNG so that the same seed gives the same text.
 *
 * Logits must be finite or -inf (a masked token); NaN is not supported (it
 * is read as -inf by samp_sample, and gives unspecified confidence values).
 * Logits with no finite maximum (all NaN or -inf, or a +inf: what a model
 * with a corrupt scale in its file computes) are refused with CK_ENONFINITE,
 * so a job on such a model fails with a message that says so. */
#ifndef CK_SAMPLER_H
#define CK_SAMPLER_H
#include <stdint.h>

#include "eng_types.h" /* samp_params, samp_conf */

/* samp_params_default: eng_types.h */
/* 0 when every field is in its range (see above), CK_EINVAL otherwise. */
int samp_params_check(const samp_params *p);

/* One streaming pass over n >= 2 logits: per lane a running max m,
 * S = sum e^(x - m) and U = sum (m - x) e^(x - m), both kept relative to the
 * max, and the top two logits (entropy = log S + U / S: two non-negative
 * terms, so a peaked distribution loses no precision, where m + log S - T/S
 * would cancel). Lanes are vectors (GCC/Clang vector extensions, AVX-512,
 * AVX or SSE width) with a polynomial exp; relative error about 1e-6.
 * NaN logits are skipped. *argmax (if not NULL) gets the index of the
 * largest logit, the lowest on ties: samp_argmax's answer. Pure: no
 * allocation, no state, thread-safe. Returns 0; CK_EINVAL when n < 2 or a
 * pointer is NULL; CK_ENONFINITE when the largest logit is not finite (all
 * -inf or NaN, or +inf). */
int samp_confidence(const float *logits, int n, samp_conf *out, int *argmax);

/* Index of the largest logit, the lowest on ties; CK_EINVAL when n < 1,
 * CK_ENONFINITE when no logit is above -inf. */
int samp_argmax(const float *logits, int n);

/* A sampler owns its RNG state and vocab_size-sized scratch. One per
 * sequence; not thread-safe (distinct samplers may run on distinct threads). */
typedef struct sampler sampler;

/* Create a sampler for vocab_size logits with params p (copied; NULL:
 * defaults), RNG seeded with p->seed. Returns 0 and *out (free with
 * samp_free); CK_EINVAL for bad params (see samp_params_check); CK_ENOMEM. */
int samp_new(int vocab_size, const samp_params *p, sampler **out);
/* Free a sampler; NULL is a no-op. */
void samp_free(sampler *s);
/* Restart the RNG as if the sampler had been created with this seed. */
void samp_reset(sampler *s, uint64_t seed);

/* 1 when samp_sample's pick is the argmax of the logits as they are:
 * greedy (temperature 0) with no repetition penalty. The engine then takes
 * the argmax that samp_confidence found in its pass instead of reading the
 * logits again. */
int samp_plain_greedy(const sampler *s);

/* Pick the next token. logits (vocab_size floats) may be modified in place
 * (the penalty is applied there). history: the sequence's tokens so far,
 * oldest first (for the repetition penalty; may be NULL when n_history is 0).
 * Greedy when temperature == 0 (after the penalty; ties -> lowest id), and then
 * no random number is drawn. Otherwise: penalty, temperature, top-k, softmax,
 * min-p, top-p (renormalised over what min-p kept), one draw. Allocates
 * nothing. Deterministic for a seed and the same sequence of calls (the
 * stream differs between builds with different vector widths only through
 * float rounding). Tokens whose weight is below e^-87 of the best are never
 * drawn. Cost on 32k logits: tens of microseconds; top-p partitions instead
 * of sorting (a few hundred microseconds at worst, for a flat distribution).
 * Returns the token id (>= 0); CK_EINVAL for NULL pointers or a history id
 * out of [0, vocab_size); CK_ENONFINITE for logits that are all -inf or NaN
 * (or, when sampling, have a +inf). */
int samp_sample(sampler *s, float *logits, const int32_t *history, int n_history);

#endif
