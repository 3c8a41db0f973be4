/* svc_log.h - structured logs: one line per event, logfmt (key=value).
 *
 *   ts=2024-05-01T12:00:00.123Z level=info event=job_done id=job-7 ms=12.5
 *
 * Lines go to stderr, written with one fwrite each so concurrent threads
 * never interleave inside a line. Values with spaces, quotes or '=' are
 * quoted by svc_log_str. The level threshold is process-wide state set once
 * at start-up (the only global of the service: logging is cross-cutting). */
#ifndef CK_SVC_LOG_H
#define CK_SVC_LOG_H
#include <stddef.h>

enum { SVC_LOG_DEBUG = 0, SVC_LOG_INFO = 1, SVC_LOG_WARN = 2, SVC_LOG_ERROR = 3 };

/* "debug", "info", "warn", "error"; returns 0 or -1 for an unknown name. */
int svc_log_set_level(const char *name);
int svc_log_enabled(int level);
/* One line: ts, level, event, then `fmt` (already key=value pairs). */
void svc_log(int level, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Quote s (at most n bytes) as a logfmt value into buf (always terminated;
 * truncated values end with "..."). Returns buf. */
const char *svc_log_str(char *buf, size_t cap, const char *s, size_t n);

#endif
