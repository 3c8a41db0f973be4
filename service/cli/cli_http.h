/* cli_http.h - a blocking HTTP/1.1 client for the CLI: one request on one
 * connection (confkvd's HTTP server answers one request per connection), the
 * reply parsed by http-parser (the library confkvd's server uses).
 *
 * This is CLI code: it blocks, for at most timeout_ms per connect, send and
 * receive (never use it inside confkvd's loop). */
#ifndef CK_CLI_HTTP_H
#define CK_CLI_HTTP_H
#include <stddef.h>

/* POST body (len bytes, Content-Type ctype) to http://hostport/path.
 * hostport: "host:port" or "[ipv6]:port". On success returns 0 with
 * *status (the HTTP status, whatever it is) and *reply, a malloc'd,
 * NUL-terminated copy of the body (*reply_len bytes, at most max_reply: a
 * longer body is a failure); the caller frees *reply. Returns CK_EINVAL (bad
 * hostport or path), CK_EIO (cannot connect, send or receive, or the
 * connection closed early), CK_EFORMAT (not an HTTP reply), CK_ETOOLONG (a
 * body over max_reply), CK_ENOMEM; err then says what and where. */
int cli_http_post(const char *hostport, const char *path, const char *ctype, const char *body, size_t len,
                  int timeout_ms, size_t max_reply, int *status, char **reply, size_t *reply_len, char *err,
                  size_t errlen);

/* GET http://hostport/path: as cli_http_post, without a body. */
int cli_http_get(const char *hostport, const char *path, int timeout_ms, size_t max_reply, int *status,
                 char **reply, size_t *reply_len, char *err, size_t errlen);

/* The reading half of cli_http_post: receive one HTTP reply from fd (a
 * connected stream socket, left open) until it is complete, parse it, and
 * return it as cli_http_post does; `who` names the peer in err. The only
 * place reply bytes are parsed, so tests/fuzz/fuzz_http.c feeds it
 * from a socketpair. */
int cli_http_read_reply(int fd, const char *who, size_t max_reply, int *status, char **reply,
                        size_t *reply_len, char *err, size_t errlen);

#endif
