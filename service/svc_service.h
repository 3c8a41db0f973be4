/* svc_service.h - confkvd: wires the modules together on one libuv loop.
 *
 *   Kafka consumer --on_message--> svc_job_decode --+--> dead letter (undecodable)
 *                                                   +--> error result (invalid)
 *                                                   +--> engine thread --done--> result
 *   result/dead letter --produce--> delivery report --> svc_kafka_done (offset store)
 *
 * Every consumed message is a record in the in-flight list until the
 * delivery report of what it produced; only then is its offset released for
 * commit. More than max_inflight records pause consumption; half of that
 * resumes it. SIGTERM/SIGINT drain: pause, let in-flight jobs finish within
 * drain_timeout_s, flush, commit, leave the group, exit 0; jobs not finished
 * are left uncommitted and will be redelivered. A second signal stops at once.
 *
 * svc_service_run returns the process exit code. */
#ifndef CK_SVC_SERVICE_H
#define CK_SVC_SERVICE_H
#include "svc_config.h"

int svc_service_run(svc_config *cfg);

#endif
