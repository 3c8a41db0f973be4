/* svc_jv.h - JSON (a cJSON tree) as the values a chat template sees
 * (engine/jinja/jinja.h), as Hugging Face's apply_chat_template sees the
 * JSON a client sent after Python's json.loads: objects become dicts with
 * their keys in order, arrays lists, strings str, true/false bool, null
 * None, numbers int or float.
 *
 * Every string and key is the caller's data (jinja_str; jinja_dict keys are
 * data): a tool's description cannot pass for template text.
 *
 * Numbers: cJSON keeps a number's value, not its text, so an integral
 * number is an int ("5.0" and "1e2" too, where json.loads gives a float);
 * an integral number past +-2^53 (where a double no longer holds every
 * integer, so Python's int and ours could differ) is refused, as is one
 * that is not finite. Other numbers are floats.
 *
 * Ownership: *out holds one reference, the caller's (jinja_release). The
 * tree j is only read. */
#ifndef CK_SVC_JV_H
#define CK_SVC_JV_H
#include <cjson/cJSON.h>
#include <stddef.h>

#include "jinja.h"

/* j as jinja values, nested at most max_depth containers deep (j itself
 * counts one when it is an array or object). 0; CK_ERANGE (too deep, or a
 * number refused above) with a sentence in err naming the path; CK_ENOMEM. */
int svc_jv_from_json(const cJSON *j, int max_depth, jinja_value **out, char *err, size_t errlen);

#endif
