/* confkvd_main.c - confkvd: the Kafka-driven generation service.
 *
 * Reads the configuration (svc_config.h), then runs the service
 * (svc_service.h) until SIGTERM/SIGINT. Exit codes: 0 clean stop, 1 runtime
 * failure (model or Kafka setup), 2 usage error. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "svc_config.h"
#include "svc_log.h"
#include "svc_service.h"
#include "svc_proc.h"

int main(int argc, char **argv) {
    svc_prefer_passive_wait(argv);
    signal(SIGPIPE, SIG_IGN);
    svc_config cfg;
    char err[1024] = "";
    int rc = svc_config_load(&cfg, argc, argv, err, sizeof err);
    if (rc == 1) {
        svc_config_free(&cfg);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "confkvd: %s\n", err);
        svc_config_free(&cfg);
        return 2;
    }
    if (svc_log_set_level(cfg.log_level)) {
        fprintf(stderr, "confkvd: log_level: '%s' is not debug, info, warn or error\n", cfg.log_level);
        svc_config_free(&cfg);
        return 2;
    }
    if (cfg.print_config) {
        svc_config_print(&cfg, stdout);
        svc_config_free(&cfg);
        return 0;
    }
    rc = svc_service_run(&cfg);
    svc_config_free(&cfg);
    return rc;
}
