/* svc_jv.c - JSON as chat-template values (svc_jv.h). */
#include "svc_jv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ck_err.h"

#define EXACT_INT 9007199254740992.0 /* 2^53: every integer up to it is a double */

static int jv(const cJSON *j, int depth, jinja_value **out, char *err, size_t errlen) {
    *out = NULL;
    if (cJSON_IsNull(j)) {
        *out = jinja_none();
    } else if (cJSON_IsBool(j)) {
        *out = jinja_bool(cJSON_IsTrue(j));
    } else if (cJSON_IsString(j)) {
        *out = jinja_str(j->valuestring, strlen(j->valuestring));
    } else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (!isfinite(d) || (d == floor(d) && fabs(d) > EXACT_INT)) {
            snprintf(err, errlen, "the number %g is not finite or not an exact integer (at most 2^53)", d);
            return CK_ERANGE;
        }
        *out = d == floor(d) ? jinja_int((long long)d) : jinja_float(d);
    } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        if (depth <= 0) {
            snprintf(err, errlen, "nested too deep");
            return CK_ERANGE;
        }
        int obj = cJSON_IsObject(j);
        jinja_value *c = obj ? jinja_dict() : jinja_list();
        if (!c) return CK_ENOMEM;
        for (const cJSON *k = j->child; k; k = k->next) {
            jinja_value *v;
            int rc = jv(k, depth - 1, &v, err, errlen);
            if (rc == 0)
                rc = obj ? jinja_dict_set(c, k->string, strlen(k->string), v) : jinja_list_append(c, v);
            if (rc) {
                jinja_release(c);
                return rc;
            }
        }
        *out = c;
        return 0;
    } else {
        snprintf(err, errlen, "a value of an unknown JSON type");
        return CK_ERANGE;
    }
    return *out ? 0 : CK_ENOMEM;
}

int svc_jv_from_json(const cJSON *j, int max_depth, jinja_value **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    char tmp[1];
    if (!err || !errlen) {
        err = tmp;
        errlen = sizeof tmp;
    }
    return jv(j, max_depth, out, err, errlen);
}
