/* svc_log.c - structured one-line logs (svc_log.h). */
#include "svc_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int log_level = SVC_LOG_INFO;

int svc_log_set_level(const char *name) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) {
            log_level = i;
            return 0;
        }
    return -1;
}

int svc_log_enabled(int level) { return level >= log_level; }

void svc_log(int level, const char *event, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < log_level || level < 0 || level > 3) return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, names[level], event);
    if (n < 0) return;
    if ((size_t)n < sizeof line - 2 && fmt && *fmt) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (m > 0) n += m;
    }
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stderr);
}

const char *svc_log_str(char *buf, size_t cap, const char *s, size_t n) {
    if (cap < 8) {
        if (cap) buf[0] = 0;
        return buf;
    }
    size_t o = 0;
    buf[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 6 >= cap) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            buf[o++] = '?';
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = 0;
    return buf;
}
