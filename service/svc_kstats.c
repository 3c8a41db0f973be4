/* svc_kstats.c - librdkafka's statistics JSON (svc_kstats.h). */
#include "svc_kstats.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

void svc_kstats_parse(const char *json, size_t len, const char *topic, svc_kafka_stats *st) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return;
    cJSON *brokers = cJSON_GetObjectItemCaseSensitive(root, "brokers"), *b;
    int up = 0;
    cJSON_ArrayForEach(b, brokers) {
        cJSON *state = cJSON_GetObjectItemCaseSensitive(b, "state");
        cJSON *nodeid = cJSON_GetObjectItemCaseSensitive(b, "nodeid");
        if (cJSON_IsString(state) && !strcmp(state->valuestring, "UP") && cJSON_IsNumber(nodeid) &&
            nodeid->valuedouble >= 0)
            up = 1;
    }
    st->up = up;
    cJSON *topics = cJSON_GetObjectItemCaseSensitive(root, "topics");
    cJSON *t = cJSON_GetObjectItemCaseSensitive(topics, topic);
    cJSON *parts = cJSON_GetObjectItemCaseSensitive(t, "partitions"), *p;
    int n = 0;
    cJSON_ArrayForEach(p, parts) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(p, "partition");
        cJSON *lag = cJSON_GetObjectItemCaseSensitive(p, "consumer_lag");
        /* in range before the casts */
        if (!cJSON_IsNumber(id) || !(id->valuedouble >= 0 && id->valuedouble <= INT32_MAX) ||
            !cJSON_IsNumber(lag) || !(lag->valuedouble >= 0 && lag->valuedouble < 9.2e18))
            continue;
        if (n == SVC_KAFKA_MAX_LAG_PARTS) break;
        st->lag_partition[n] = (int32_t)id->valuedouble;
        st->lag[n] = (int64_t)lag->valuedouble;
        n++;
    }
    st->n_lag = n;
    cJSON_Delete(root);
}
