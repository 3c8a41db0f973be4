/* cli_redis.h - a blocking Redis connection for the CLI (`confkv templates`):
 * hiredis's synchronous API, with the handshake confkvd's cold tier does
 * (svc_redis.c): AUTH (with the user for an ACL user) when the URL has a
 * password, SELECT when it names a database other than 0.
 *
 * This is CLI code: every call blocks, for at most timeout_ms per reply
 * (never use it inside confkvd's loop).
 *
 * Replies are distrusted like any outside bytes: cli_redis_cmd turns a
 * missing reply and an error reply into a failure, and the callers check
 * the type and size of everything else before reading it. Messages never
 * contain the URL's password. */
#ifndef CK_CLI_REDIS_H
#define CK_CLI_REDIS_H
#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cli_redis {
    redisContext *c;
    char where[300]; /* "host:port" or the socket path, for messages */
} cli_redis;

/* Parse url (svc_redis_parse_url's forms), connect and do the handshake.
 * Returns 0; CK_EINVAL for a bad URL (err says why: a usage error); CK_EIO
 * when Redis cannot be reached or refuses the handshake; CK_ENOMEM. On
 * failure *r is left closed (cli_redis_close is still safe). */
int cli_redis_open(cli_redis *r, const char *url, int timeout_ms, char *err, size_t errlen);
/* Safe on a closed or never opened connection. */
void cli_redis_close(cli_redis *r);

/* Run one command (binary-safe argv). Returns 0 and *out (the caller frees
 * it with freeReplyObject); CK_EIO with err filled when the connection
 * fails or Redis answers with an error (the reply is then freed). */
int cli_redis_cmd(cli_redis *r, int argc, const char **argv, const size_t *lens, redisReply **out, char *err,
                  size_t errlen);

/* Read an integer from a reply that must be REDIS_REPLY_INTEGER: 0 or
 * CK_EFORMAT. */
int cli_redis_int(const redisReply *rep, long long *out);
/* A sorted-set score (RESP2: a bulk string) that must be a whole number in
 * [0, 2^53]; nil gives 0 (*present = 0). 0 or CK_EFORMAT. */
int cli_redis_score(const redisReply *rep, int64_t *out, int *present);

#endif
