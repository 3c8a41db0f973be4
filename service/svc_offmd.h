/* svc_offmd.h - the commit metadata confkvd writes with each committed
 * offset (svc_kafka.h, "Redelivery marks" and "Finished offsets"): the
 * dispatch mark and the set of offsets above the committed one whose jobs
 * are finished. Pure functions over bytes; the reader distrusts every byte
 * (the metadata comes from the broker, and other tools of the group may
 * write their own).
 *
 * Format (printable ASCII, no NUL):
 *
 *   confkv.mark=<N>[;done.v1=<B>]
 *
 * N: the mark, decimal, no sign, 1 to 19 digits, no overflow.
 * B: the finished set, base64url (RFC 4648 section 5: A-Z a-z 0-9 - _)
 * without padding, of a bitmap: bit i (byte i / 8, bit i % 8, least
 * significant first) set when offset committed + i is finished. Trailing
 * zero bytes are not written; the unused bits of the last character are 0.
 * At most SVC_OFFMD_DONE_MAX bitmap bytes (SVC_OFFMD_DONE_MAX * 8 offsets):
 * with the mark the whole string stays under SVC_OFFMD_MAX bytes, well
 * under Kafka's offset.metadata.max.bytes (4096 by default). A set that
 * does not fit is cut to the offsets that do (the writer says how many
 * finished offsets it left out). "v1" is the version: a reader refuses a
 * version it does not know, and a later writer can add one beside it. */
#ifndef CK_SVC_OFFMD_H
#define CK_SVC_OFFMD_H
#include <stddef.h>
#include <stdint.h>

#define SVC_OFFMD_MARK_PREFIX "confkv.mark="
#define SVC_OFFMD_DONE_PREFIX ";done.v1="
#define SVC_OFFMD_DONE_MAX 1536 /* bitmap bytes: 12,288 offsets, 2,048 base64 characters */
#define SVC_OFFMD_MAX 2112      /* the whole string, NUL included */

/* The metadata into buf (cap >= SVC_OFFMD_MAX always suffices): mark, then
 * done[0..nbytes) (nbytes <= SVC_OFFMD_DONE_MAX; trailing zero bytes are
 * trimmed, and no set is written when none is left). Returns the length
 * (a NUL follows), or CK_ETOOLONG / CK_EINVAL (mark < 0, nbytes out of
 * range). */
int svc_offmd_format(char *buf, size_t cap, int64_t mark, const uint8_t *done, int nbytes);

/* What svc_offmd_parse read. */
typedef struct svc_offmd {
    int64_t mark;                     /* -1: none */
    int done_bytes;                   /* bitmap bytes read (0: no finished set) */
    uint8_t done[SVC_OFFMD_DONE_MAX]; /* bit i: offset committed + i finished */
} svc_offmd;

/* Parse n bytes of commit metadata (md may be NULL when n is 0). Returns 0
 * with *out filled: metadata without the "confkv.mark=" prefix (another
 * tool's, or none) is no mark and no set. CK_EINVAL when the prefix is
 * there but the rest is malformed: *why names the fault (a static string),
 * and *out holds the mark when its part was well formed (else -1) and no
 * finished set. */
int svc_offmd_parse(const void *md, size_t n, svc_offmd *out, const char **why);

#endif
