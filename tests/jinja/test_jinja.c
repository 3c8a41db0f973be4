/* test_jinja.c - the chat-template renderer (engine/jinja/jinja.c) on its own:
 * every construct of the subset, then the limits and errors a hostile or
 * unsupported template must end in (no crash, no hang, the right kind).
 *
 * The expected texts of the construct cases are Python jinja2 3.1.6's
 * renderings of the same sources and variables, with Hugging Face's settings
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
 * HF's tojson, strftime_now on 2024-07-26): an independent renderer, run
 * once when the cases were written. oracle.sh does the same live on real
 * templates. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "ck_test.h"
#include "jinja.h"

#define S(x) x, strlen(x)

/* The variables of the construct cases (gen: the same dict in Python). */
static jinja_value *make_vars(void) {
    jinja_value *v = jinja_dict(), *items = jinja_list(), *d = jinja_dict(), *msgs = jinja_list();
    const char *roles[] = {"system", "user", "assistant"}, *texts[] = {"  sys  ", "hi", "yo"};
    int rc = 0;
    rc |= jinja_dict_set(v, S("name"), jinja_str(S("World")));
    rc |= jinja_dict_set(v, S("n"), jinja_int(5));
    for (int i = 0; i < 3; i++) rc |= jinja_list_append(items, jinja_int((int[]){3, 1, 2}[i]));
    rc |= jinja_dict_set(v, S("items"), items);
    rc |= jinja_dict_set(d, S("a"), jinja_int(1));
    rc |= jinja_dict_set(d, S("b"), jinja_str(S("x")));
    rc |= jinja_dict_set(v, S("d"), d);
    rc |= jinja_dict_set(v, S("none_v"), jinja_none());
    rc |= jinja_dict_set(v, S("f"), jinja_float(2.5));
    rc |= jinja_dict_set(v, S("t"), jinja_bool(1));
    for (int i = 0; i < 3; i++) {
        jinja_value *m = jinja_dict();
        rc |= jinja_dict_set(m, S("role"), jinja_str(S(roles[i])));
        rc |= jinja_dict_set(m, S("content"), jinja_str(S(texts[i])));
        rc |= jinja_list_append(msgs, m);
    }
    rc |= jinja_dict_set(v, S("messages"), msgs);
    rc |= jinja_dict_set(v, S("s"), jinja_str(S("  Hello, World  ")));
    rc |= jinja_dict_set(v, S("u"), jinja_str(S("h\303\251llo \346\227\245\346\234\254")));
    if (rc) {
        jinja_release(v);
        return NULL;
    }
    return v;
}

static struct tm fixed_day(void) {
    struct tm tm = {0};
    tm.tm_year = 2024 - 1900;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    tm.tm_hour = 12;
    time_t t = timegm(&tm);
    gmtime_r(&t, &tm);
    return tm;
}

/* Parse and render src; 0 and *out (caller frees), or the error code. */
static int render(const char *src, jinja_value *vars, const jinja_limits *lim, char **out, jinja_error *err) {
    jinja_template *t;
    *out = NULL;
    int rc = jinja_parse(src, strlen(src), lim, &t, err);
    if (rc) return rc;
    struct tm day = fixed_day();
    rc = jinja_render(t, vars, &day, out, NULL, err);
    jinja_template_free(t);
    return rc;
}

/* Lists the ordering filters' cases share: each holds keys equal but for
 * case, or equal outright, so the order of ties shows. */
#define WORDS "{% set w = ['foo', 'Bar', 'bar', 'FOO', 'baz', 'Foo'] %}"
#define PEOPLE                                                             \
    "{% set people = [{'name': 'bob', 'age': 30, 'city': {'n': 'Oslo'}}, " \
    "{'name': 'Ann', 'age': 25, 'city': {'n': 'bergen'}}, "                \
    "{'name': 'cy', 'age': 30, 'city': {'n': 'Bergen'}}, "                 \
    "{'name': 'ann', 'age': 20, 'city': {'n': 'oslo'}}] %}"

static const struct {
    const char *what, *src, *want;
} CASES[] = {
    {"plain output", "{{ name }}!", "World!"},
    {"trim_blocks + lstrip_blocks", "a\n  {% if t %}\n  b\n  {% endif %}\nc\n", "a\n  b\nc"},
    {"explicit - whitespace control", "x {%- if t -%} \n y \n {%- endif %} z", "xy z"},
    {"+ disables lstrip/trim", "  {%+ if t %}k{% endif +%}\nend", "  k\nend"},
    {"comments and their whitespace", "a {# note #}\n  {# line comment #}\nb", "a b"},
    {"{{- -}} and the trailing newline", "{{- '  x  ' -}}  \n", "  x  "},
    {"loop variables",
     "{% for m in messages %}{{ loop.index0 }}/{{ loop.index }}/{{ loop.length }}/{{ loop.first }}/{{ "
     "loop.last }}/{{ loop.revindex }} {% endfor %}",
     "0/1/3/True/False/3 1/2/3/False/False/2 2/3/3/False/True/1 "},
    {"loop filter", "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }} {% endfor %}",
     "1:user 2:assistant "},
    {"for else", "{% for x in [] %}no{% else %}empty{% endfor %}", "empty"},
    {"break/continue",
     "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ "
     "i }}{% endfor %}",
     "0134"},
    {"tuple targets, items",
     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d | items %}{{ k }}{% endfor %}",
     "a=1;b=x;ab"},
    {"set scoping in loops",
     "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "12121"},
    {"set in if leaks", "{% set x = 1 %}{% if t %}{% set x = 2 %}{% endif %}{{ x }}", "2"},
    {"namespace",
     "{% set ns = namespace(c=0, s='') %}{% for i in items %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}",
     "6"},
    {"block set", "{% set b %}[{{ name }}]{% endset %}{{ b ~ b }}", "[World][World]"},
    {"macro",
     "{% macro f(a, b='z') %}<{{ a }}{{ b }}>{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}{{ f(b=3, a=4) }}",
     "<1z><12><43>"},
    {"index and slice",
     "{{ items[0] }}{{ items[-1] }}{{ items[1:] }}{{ items[::-1] }}{{ name[1:3] }}{{ u[1:4] }}{{ u[-2:] }}{{ "
     "items[5] is defined }}",
     "32[1, 2][2, 1, 3]or\303\251ll\346\227\245\346\234\254False"},
    {"arithmetic and float repr",
     "{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ f * 2 }} {{ 0.1 + "
     "0.2 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 3.0 }}",
     "3.5 3 -4 2 1024 7 5.0 0.30000000000000004 1e+20 1.5e-07 3.0"},
    {"concat", "{{ 'a' ~ 1 ~ none_v ~ t }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 3 }}",
     "a1NoneTrue ab [1, 2] ababab"},
    {"comparison and in",
     "{{ 1 < 2 < 3 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ [1,2] == [1,2] }} {{ d == {'a': 1, 'b': 'x'} }} {{ 2 "
     "in items }} {{ 'ell' in s }} {{ 'a' in d }} {{ 'z' not in d }}",
     "True True True True True True True True True"},
    {"logic and conditional",
     "{{ t and 'yes' }} {{ none_v or 'dflt' }} {{ not none_v }} {{ 'A' if t else 'B' }} {{ 'A' if none_v "
     "else 'B' }}[{{ 'A' if none_v }}]",
     "yes dflt True A B[]"},
    {"repr of containers", "{{ [1, 'a', none_v, t, 1.5, {'k': 'v'}, (1, 2), (3,)] }} {{ d }} {{ \"it's\" }}",
     "[1, 'a', None, True, 1.5, {'k': 'v'}, (1, 2), (3,)] {'a': 1, 'b': 'x'} it's"},
    {"strip and case",
     "{{ s|trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ name|upper "
     "}}{{ name|lower }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}",
     "Hello, World|Hello, World|Hello, World  |  Hello, World|hi|WORLDworld|Hello World|Hello"},
    {"string methods",
     "{{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'aXbXc'.replace('X', '-') }} "
     "{{ 'ab'.replace('', '.') }} {{ name.startswith('Wo') }} {{ name.endswith(('x', 'ld')) }} {{ "
     "name.find('r') }}",
     "['Hello,', 'World'] ['a', 'b', '', 'c'] ['a', 'b c'] a-b-c .a.b. True True 2"},
    {"sequence filters",
     "{{ items|length }} {{ u|length }} {{ d|length }} {{ items|first }} {{ items|last }} {{ items|join('-') "
     "}} {{ items|reverse|list }} {{ name|list }} {{ items|count }}",
     "3 8 2 3 2 3-1-2 [2, 1, 3] ['W', 'o', 'r', 'l', 'd'] 3"},
    {"default",
     "{{ undefined_v|default('dflt') }} {{ none_v|default('x') }} {{ ''|default('e', true) }} {{ "
     "undefined_v|d('d') }}",
     "dflt None e d"},
    {"select/reject/map",
     "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ "
     "messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }} {{ "
     "items|select('odd')|list }} {{ items|reject('even')|list }} {{ none_v|selectattr('x')|list }}",
     "['hi'] system,assistant [3, 1] [3, 1] []"},
    {"tojson as HF's",
     "{{ d|tojson }} {{ messages[1]|tojson(indent=2) }} {{ '\303\251\"\\n\001'|tojson }} {{ [1, [], {}, "
     "none_v, t, 2.5]|tojson }} {{ d|tojson(sort_keys=true, separators=(',', ':')) }}",
     "{\"a\": 1, \"b\": \"x\"} {\n  \"role\": \"user\",\n  \"content\": \"hi\"\n} \"\303\251\\\"\\n\\u0001\" "
     "[1, [], {}, null, true, 2.5] {\"a\":1,\"b\":\"x\"}"},
    {"tests",
     "{{ x is defined }} {{ name is string }} {{ n is number }} {{ n is integer }} {{ f is float }} {{ d is "
     "mapping }} {{ items is iterable }} {{ none_v is none }} {{ t is true }} {{ t is false }} {{ n is odd "
     "}} {{ n is divisibleby 5 }} {{ undefined_v is undefined }} {{ name is not none }} {{ 'ab' is lower }}",
     "False True True True True True True True True False True True True True True"},
    {"dict methods",
     "{{ d.get('a') }} {{ d.get('zz', 'no') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d['b'] }} {{ d.b "
     "}} {{ d.missing is defined }}",
     "1 no ['a', 'b'] [1, 'x'] x x False"},
    {"strftime_now with the injected date",
     "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %A') }}", "26 Jul 2024 2024-07-26 Friday"},
    {"string literal escapes", "{{ 'a\\tb\\u00e9\\x41\\101' }} {{ 'adjacent' ' strings' }} {{ \"q'q\" }}",
     "a\tb\303\251AA adjacent strings q'q"},
    {"filter precedence",
     "{{ messages[0]['content']|trim + '!' }} {{ '[' + messages[1].content|upper + ']' }} {{ -n|abs }} {{ "
     "'3'|int + 1 }} {{ '2.5'|float }} {{ n|string ~ 'x' }}",
     "sys! [HI] 5 4 2.5 5x"},
    {"elif",
     "{% if n > 3 %}big{% elif n > 1 %}mid{% else %}small{% endif %}{% if n > 9 %}big{% elif n > 4 %}mid{% "
     "else %}small{% endif %}",
     "bigmid"},
    {"nested literals", "{{ {'a': [1, {'b': 2}]}.a[1].b }} {{ (1, 2)[0] }} {{ items.0 }}", "2 1 3"},
    /* dictsort, sort, unique, min, max, indent, filter blocks, str.format,
     * Markup, lazily refused names, scopes, int keys, Jinja's iterables */
    {"dictsort: keys case-insensitive, stable",
     "{% set m = {'b': 1, 'A': 2, 'a': 3, 'C': 0} %}{{ m|dictsort }} {{ m|dictsort(true) }} {{ "
     "m|dictsort(reverse=true) }}",
     "[('A', 2), ('a', 3), ('b', 1), ('C', 0)] [('A', 2), ('C', 0), ('a', 3), ('b', 1)] [('C', 0), ('b', 1), "
     "('A', 2), ('a', 3)]"},
    {"dictsort by value, int keys",
     "{% set m = {'x': 'b', 'y': 'A', 'z': 'a'} %}{{ m|dictsort(false, 'value') }} {{ m|dictsort(by='value', "
     "case_sensitive=true) }} {% for k, v in {512: 1, 0: 2, 64: 3}|dictsort %}{{ k }}={{ v }};{% endfor %}",
     "[('y', 'A'), ('z', 'a'), ('x', 'b')] [('y', 'A'), ('z', 'a'), ('x', 'b')] 0=2;64=3;512=1;"},
    {"sort: case, reverse, stability",
     WORDS "{{ w|sort }} {{ w|sort(case_sensitive=true) }} {{ w|sort(reverse=true) }} {{ [3, 1.5, true, 0, "
           "-1]|sort }}",
     "['Bar', 'bar', 'baz', 'foo', 'FOO', 'Foo'] ['Bar', 'FOO', 'Foo', 'bar', 'baz', 'foo'] ['foo', 'FOO', "
     "'Foo', 'baz', 'Bar', 'bar'] [-1, 0, True, 1.5, 3]"},
    {"sort by attribute",
     PEOPLE "{{ people|sort(attribute='age')|map(attribute='name')|join(',') }} {{ "
            "people|sort(attribute='age', reverse=true)|map(attribute='name')|join(',') }} {{ "
            "people|sort(attribute='age,name')|map(attribute='name')|join(',') }} {{ "
            "people|sort(attribute='city.n')|map(attribute='name')|join(',') }} {{ [[2, 'b'], [1, 'z'], [2, "
            "'a']]|sort(attribute='1') }} {{ [none, none]|sort }}",
     "ann,Ann,bob,cy bob,cy,Ann,ann ann,Ann,bob,cy Ann,cy,bob,ann [[2, 'a'], [2, 'b'], [1, 'z']] [None, "
     "None]"},
    {"unique",
     WORDS PEOPLE
     "{{ w|unique|list }} {{ w|unique(case_sensitive=true)|list }} {{ "
     "people|unique(attribute='age')|map(attribute='name')|list }} {{ [1, 1.0, true, '1']|unique|list }}",
     "['foo', 'Bar', 'baz'] ['foo', 'Bar', 'bar', 'FOO', 'baz', 'Foo'] ['bob', 'Ann', 'ann'] [1, '1']"},
    {"min and max",
     WORDS PEOPLE "{{ w|min }} {{ w|max }} {{ w|min(case_sensitive=true) }} {{ w|max(true) }} {{ ['b', "
                  "'B']|max }} {{ (people|min(attribute='age')).name }} {{ "
                  "(people|max(attribute='age')).name }} {{ [] |min is defined }}",
     "Bar foo Bar foo b ann bob False"},
    {"indent",
     "[{{ 'a\\nb\\n\\nc'|indent }}] [{{ 'a\\nb\\n\\nc'|indent(2, true) }}] [{{ 'a\\n\\nb\\n'|indent(2, "
     "blank=true) }}] [{{ 'a\\r\\nb\\u2028c'|indent(width='> ') }}] [{{ 'a\\n'|indent(first=true) }}]",
     "[a\n    b\n\n    c] [  a\n  b\n\n  c] [a\n  \n  b\n  ] [a\n> b\n> c] [    a\n]"},
    {"filter blocks",
     "{% set x = 1 %}{% filter upper|replace('B', 'b') %}ab{{ name }}{% set x = 2 %}{% endfilter %} {{ x }} "
     "{%- filter indent(2, true) %}\nl1\nl2{% endfilter %}",
     "AbWORLD 1  l1\n  l2"},
    {"str.format",
     "{{ '<|x{}|>'.format(n) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{k}={v!r}'.format(k='key', v='val') "
     "}} {{ '{{}}{}'.format(1) }} {{ '[{:>6}|{:<6}|{:^7}|{:*^7}]'.format('ab', 'ab', 'ab', 'ab') }} {{ "
     "'[{:05}|{:+d}|{: d}|{:x}|{:#X}|{:,}|{:_b}|{:=+6}]'.format(-5, 5, 5, 255, 255, 1234567, 10, -5) }} {{ "
     "'[{:.2f}|{:.3e}|{:g}|{:.1%}|{:.3}|{}|{:08.2f}]'.format(2.675, 12345.678, 1234567.0, 0.123, 1234.5, "
     "2.5, -1.5) }} {{ '[{:.2}|{:8.3}|{:{}}|{m.role}|{0[1]}]'.format('abcdef', 'abcdef', 'x', 3, [1, 2], "
     "m=messages[1]) }}",
     "<|x5|> aba key='val' {}1 [    ab|ab    |  ab   |**ab***] [-0005|+5| 5|ff|0XFF|1,234,567|1010|-    5] "
     "[2.67|1.235e+04|1.23457e+06|12.3%|1.23e+03|2.5|-0001.50] [ab|abc     |x  |user|b]"},
    {"|safe + str escapes the str",
     "{{ 'a<b'|safe + '<i>&\"x' }} {{ '<' + 'b'|safe }} {{ ('x'|safe + '<') ~ '<' }} {{ ('<'|safe * 2) + '<' "
     "}}",
     "a<b&lt;i&gt;&amp;&#34;x &lt;b x&lt;< <<&lt;"},
    {"unknown filters and tests where they may not run",
     "{% if t is string %}{{ name|from_yaml }}{% endif %}{{ name|nofilter if none_v else 'ok' }}{% if none_v "
     "%}{{ name is prime }}{% endif %}",
     "ok"},
    {"set and generation blocks are scopes",
     "{% set x = 1 %}{% set b %}{% set x = 2 %}{{ x }}{% endset %}{% generation %}{% set x = 3 %}{{ x }}{% "
     "endgeneration %}{{ b }}{{ x }}",
     "321"},
    {"integer dict keys",
     "{% set m = {0: 'a', 512: 'b'} %}{{ m }} {{ m[512] }} {{ 512 in m }} {{ '512' in m }} {{ m|tojson }} {{ "
     "m.get(0) }} {% for k in m %}{{ k + 1 }} {% endfor %}",
     "{0: 'a', 512: 'b'} b True False {\"0\": \"a\", \"512\": \"b\"} a 1 513 "},
    {"iterables: generators, dict views, ranges",
     "{% set g = items|map('string') %}{{ g|list }}{{ g|list }} {{ 'yes' if []|select('odd') else 'no' }} {{ "
     "items|select('odd') is sequence }} {{ range(3) }} {{ range(10)[2:8:2] }} {{ range(3)|last }} {{ "
     "d.keys() }} {{ d.items() }} {{ d.values()|length }} {{ items|reverse|list }} {{ d|items|list }} {{ "
     "dict(d.items()) == d }} {{ '3' in items|map('string') }}",
     "['3', '1', '2'][] yes False range(0, 3) range(2, 8, 2) 2 dict_keys(['a', 'b']) dict_items([('a', 1), "
     "('b', 'x')]) 2 [2, 1, 3] [('a', 1), ('b', 'x')] True True"},
    {"from_json: Python's json.loads",
     "{% set j = (name ~ '{\"b\": [1, 2.5, -0.0, 1E2, true, null], \"a\": "
     "\"\\\\u00e9\\\\ud83d\\\\ude00\\\\\"\\\\/\", \"b\": {\"x\": NaN}, \"c\": -Infinity, \"d\": "
     "12345678901234567}')[5:]|from_json %}{{ j }} {{ j.b.x }} {{ j|tojson }} {{ ' [ 1 , \"x\\\\t\" , {} , "
     "[] ] '|from_json }} {{ '\"s\"'|from_json }}{{ '0'|from_json + 1 }}",
     "{'b': {'x': nan}, 'a': '\303\251\360\237\230\200\"/', 'c': -inf, 'd': 12345678901234567} nan {\"b\": "
     "{\"x\": NaN}, \"a\": \"\303\251\360\237\230\200\\\"/\", \"c\": -Infinity, \"d\": 12345678901234567} "
     "[1, 'x\\t', {}, []] s1"},
};

static void test_constructs(void) {
    jinja_value *vars = make_vars();
    CK_CHECK(vars);
    int bad = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        char *out;
        jinja_error err;
        int rc = render(CASES[i].src, vars, NULL, &out, &err);
        if (rc || strcmp(out, CASES[i].want) != 0) {
            fprintf(stderr, "  case '%s': rc %d (%s: %s)\n    want [%s]\n    got  [%s]\n", CASES[i].what, rc,
                    rc ? err.kind : "", rc ? err.msg : "", CASES[i].want, out ? out : "");
            bad++;
        }
        free(out);
    }
    jinja_release(vars);
    CK_CHECK_MSG(bad == 0, "%d of %zu cases differ from jinja2", bad, sizeof CASES / sizeof *CASES);
}

/* The convenience context, and a template that uses all of it. */
static void test_chat_vars(void) {
    jinja_message m[] = {{"system", "Be brief."}, {"user", "Hi"}};
    jinja_value *v;
    CK_CHECK(jinja_chat_vars(m, 2, "<s>", NULL, 1, &v) == 0);
    char *out;
    jinja_error err;
    int rc =
        render("{{ bos_token }}{% for x in messages %}[{{ x.role }}:{{ x.content }}]{% endfor %}"
               "{{ tools is defined }}{{ documents is defined }}{{ add_generation_prompt }}|{{ eos_token }}|",
               v, NULL, &out, &err);
    jinja_release(v);
    CK_CHECK_MSG(rc == 0, "%s", err.msg);
    CK_CHECK_MSG(strcmp(out, "<s>[system:Be brief.][user:Hi]FalseFalseTrue||") == 0, "%s", out);
    free(out);
    jinja_message bad[] = {{NULL, "x"}};
    CK_CHECK(jinja_chat_vars(bad, 1, NULL, NULL, 0, &v) == CK_EINVAL && v == NULL);
}

/* Each: a template, the code and kind it must end in, a word the message must
 * name. */
static const struct {
    const char *src;
    int code;
    const char *kind, *needle;
    int line;
} ERRS[] = {
    {"a\n{{ x ", CK_EUNSUPPORTED, "unsupported_chat_template", "unterminated", 2},
    {"{% if x %}yes", CK_EUNSUPPORTED, "unsupported_chat_template", "endif", 1},
    {"{# never closed", CK_EUNSUPPORTED, "unsupported_chat_template", "comment", 1},
    {"{{ 'abc }}", CK_EUNSUPPORTED, "unsupported_chat_template", "string", 1},
    {"{% for x in y %}{{ x }}", CK_EUNSUPPORTED, "unsupported_chat_template", "endfor", 1},
    {"ok\n\n{% include 'other.jinja' %}", CK_EUNSUPPORTED, "unsupported_chat_template", "include", 3},
    {"{{ x | wordwrap(5) }}", CK_EUNSUPPORTED, "unsupported_chat_template", "wordwrap", 1},
    {"{{ x is prime }}", CK_EUNSUPPORTED, "unsupported_chat_template", "prime", 1},
    {"\n{{ 'a'.zfill(3) }}", CK_EUNSUPPORTED, "unsupported_chat_template", "zfill", 2},
    {"{% break %}", CK_EUNSUPPORTED, "unsupported_chat_template", "break", 1},
    {"{% endif %}", CK_EUNSUPPORTED, "unsupported_chat_template", "endif", 1},
    {"{% for x in y recursive %}{% endfor %}", CK_EUNSUPPORTED, "unsupported_chat_template", "recursive", 1},
    {"{{ 1 +* 2 }}", CK_EUNSUPPORTED, "unsupported_chat_template", "'*'", 1},
    {"{{ raise_exception('Roles must alternate') }}", CK_EINVAL, "chat_template_exception",
     "Roles must alternate", 1},
    {"{{ missing.attr }}", CK_EFORMAT, "chat_template_error", "missing", 1},
    {"{{ 1 + 'a' }}", CK_EFORMAT, "chat_template_error", "operand", 1},
    {"{{ 1 // 0 }}", CK_EFORMAT, "chat_template_error", "zero", 1},
    {"{% set x = 5 %}{% for i in x %}{% endfor %}", CK_EFORMAT, "chat_template_error", "iterable", 1},
    {"{{ 9223372036854775807 + 1 }}", CK_ERANGE, "chat_template_limit", "overflow", 1},
    /* a name Jinja refuses only when it runs, reached */
    {"\n\n{% if true %}{{ 'x'|from_yaml }}{% endif %}", CK_EUNSUPPORTED, "unsupported_chat_template",
     "from_yaml", 3},
    {"{% for x in [1] %}{% if false %}{% endif %}{{ x is prime }}{% endfor %}", CK_EUNSUPPORTED,
     "unsupported_chat_template", "prime", 1},
    {"{% filter upper %}x", CK_EUNSUPPORTED, "unsupported_chat_template", "endfilter", 1},
    {"{% for x in [1] %}{% filter upper %}{% break %}{% endfilter %}{% endfor %}", CK_EUNSUPPORTED,
     "unsupported_chat_template", "break", 1},
    /* generators: no len, no JSON, no address to print, no second walk after a partial one */
    {"{{ [1, 2]|select('odd')|length }}", CK_EFORMAT, "chat_template_error", "len", 1},
    {"{{ [1, 2]|map('string')|tojson }}", CK_EFORMAT, "chat_template_error", "JSON", 1},
    {"{{ [1, 2]|map('string') }}", CK_EUNSUPPORTED, "unsupported_chat_template", "generator", 1},
    {"{% set g = [1, 2]|map('string') %}{{ g|first }}{{ g|list }}", CK_EUNSUPPORTED,
     "unsupported_chat_template", "partial", 1},
    {"{{ [1, 2]|reverse|last }}", CK_EFORMAT, "chat_template_error", "reversible", 1},
    /* what Python refuses in the new filters, and what is outside the subset */
    {"{{ [1, 'a']|sort }}", CK_EFORMAT, "chat_template_error", "'<' not supported", 1},
    {"{{ {'a': 1}|dictsort(by='k') }}", CK_EFORMAT, "chat_template_error", "value", 1},
    {"{{ [[1], [1]]|unique|list }}", CK_EFORMAT, "chat_template_error", "unhashable", 1},
    {"{{ 5|indent }}", CK_EFORMAT, "chat_template_error", "indent", 1},
    {"{{ '{} {1}'.format(1, 2) }}", CK_EFORMAT, "chat_template_error", "numbering", 1},
    {"{{ '{:d}'.format('a') }}", CK_EFORMAT, "chat_template_error", "format", 1},
    {"{{ '{'.format(1) }}", CK_EFORMAT, "chat_template_error", "'}'", 1},
    {"{{ '{:n}'.format(1) }}", CK_EUNSUPPORTED, "unsupported_chat_template", "n type", 1},
    {"{{ {true: 1} }}", CK_EUNSUPPORTED, "unsupported_chat_template", "dict keys", 1},
    /* from_json: where json.loads raises, and what a template value cannot hold */
    {"{{ '{\"a\": 1,}'|from_json }}", CK_EFORMAT, "chat_template_error", "property name", 1},
    {"{{ '[1] x'|from_json }}", CK_EFORMAT, "chat_template_error", "extra data", 1},
    {"{{ '{\"a\" 1}'|from_json }}", CK_EFORMAT, "chat_template_error", "':'", 1},
    {"{{ '01'|from_json }}", CK_EFORMAT, "chat_template_error", "extra data", 1},
    {"{{ '\"a\tb\"'|from_json }}", CK_EFORMAT, "chat_template_error", "control character", 1},
    {"{{ '[1, 2'|from_json }}", CK_EFORMAT, "chat_template_error", "','", 1},
    {"{{ ''|from_json }}", CK_EFORMAT, "chat_template_error", "expecting value", 1},
    {"{{ 5|from_json }}", CK_EFORMAT, "chat_template_error", "must be str", 1},
    {"{{ '\"\\\\ud800\"'|from_json }}", CK_EFORMAT, "chat_template_error", "surrogate", 1},
    {"{{ '99999999999999999999'|from_json }}", CK_EFORMAT, "chat_template_error", "64 bits", 1},
    {"{{ "
     "'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
     "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]'|from_json }}",
     CK_ERANGE, "chat_template_limit", "nesting", 1},
};

static void test_errors(void) {
    for (size_t i = 0; i < sizeof ERRS / sizeof *ERRS; i++) {
        char *out;
        jinja_error err;
        int rc = render(ERRS[i].src, NULL, NULL, &out, &err);
        CK_CHECK_MSG(rc == ERRS[i].code && out == NULL, "[%s]: rc %d (%s), want %d", ERRS[i].src, rc, err.msg,
                     ERRS[i].code);
        CK_CHECK_MSG(err.code == rc && strcmp(err.kind, ERRS[i].kind) == 0, "[%s]: kind %s", ERRS[i].src,
                     err.kind);
        CK_CHECK_MSG(strstr(err.msg, ERRS[i].needle) != NULL, "[%s]: message '%s' lacks '%s'", ERRS[i].src,
                     err.msg, ERRS[i].needle);
        CK_CHECK_MSG(err.line == ERRS[i].line, "[%s]: line %d, want %d", ERRS[i].src, err.line, ERRS[i].line);
    }
}

/* repeat s n times into a malloc'd string */
static char *rep(const char *s, int n, const char *tail) {
    size_t l = strlen(s), tl = strlen(tail);
    char *o = malloc(l * (size_t)n + tl + 1);
    for (int i = 0; i < n; i++) memcpy(o + l * (size_t)i, s, l);
    memcpy(o + l * (size_t)n, tail, tl + 1);
    return o;
}

static void expect_limit(const char *src, const jinja_limits *lim, int code, const char *needle) {
    char *out;
    jinja_error err;
    clock_t t0 = clock();
    int rc = render(src, NULL, lim, &out, &err);
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CK_CHECK_MSG(rc == code && out == NULL, "[%.60s]: rc %d (%s), want %d", src, rc, err.msg, code);
    CK_CHECK_MSG(strcmp(err.kind, "chat_template_limit") == 0, "[%.60s]: kind %s", src, err.kind);
    CK_CHECK_MSG(strstr(err.msg, needle) != NULL, "[%.60s]: '%s' lacks '%s'", src, err.msg, needle);
    CK_CHECK_MSG(s < 10, "[%.60s]: %.1f s to refuse", src, s);
}

static void test_limits(void) {
    jinja_limits lim;
    jinja_limits_default(&lim);
    /* nesting: blocks, parentheses, a flat chain evaluated nested, macros */
    char *deep_if = rep("{% if true %}", 200, "x");
    expect_limit(deep_if, NULL, CK_ERANGE, "nesting");
    free(deep_if);
    char *close = rep(")", 100000, " }}"), *open_ = rep("(", 100000, "1"), *parens = malloc(200010);
    sprintf(parens, "{{ %s%s", open_, close);
    free(close);
    free(open_);
    expect_limit(parens, NULL, CK_ERANGE, "nesting");
    free(parens);
    char *chain = rep("'a' ~ ", 50000, "'b'");
    char *chain_tpl = malloc(strlen(chain) + 8);
    sprintf(chain_tpl, "{{ %s }}", chain);
    expect_limit(chain_tpl, NULL, CK_ERANGE, "deeper");
    free(chain);
    free(chain_tpl);
    expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, CK_ERANGE, "deeper");
    /* loops: one huge, nested, and range() itself */
    expect_limit("{% for i in range(100000000) %}{% endfor %}", NULL, CK_ERANGE, "iterations");
    expect_limit("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
                 "{% endfor %}{% endfor %}{% endfor %}",
                 NULL, CK_ERANGE, ""); /* iterations or bytes first */
    /* output and value growth */
    jinja_limits small = lim;
    small.max_output = 1 << 20;
    expect_limit("{% set s = 'x' * 1000 %}{% for i in range(100000) %}{{ s }}{% endfor %}", &small,
                 CK_ETOOLONG, "longer");
    expect_limit("{{ 'x' * 100000000000 }}", NULL, CK_ETOOLONG, "longer");
    expect_limit(
        "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        NULL, CK_ETOOLONG, "longer");
    small = lim;
    small.max_alloc = 1 << 20;
    expect_limit(
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
        &small, CK_ERANGE, "bytes");
    small = lim;
    small.max_steps = 100000;
    expect_limit("{% for i in range(500) %}{% for j in range(500) %}{{ i }}{% endfor %}{% endfor %}", &small,
                 CK_ERANGE, "steps");
    /* the new filters' work: comparisons count as steps, widths as output */
    small = lim;
    small.max_steps = 100000;
    expect_limit("{{ range(100000)|sort|length }}", &small, CK_ERANGE, "steps");
    expect_limit("{{ range(5000)|unique|list|length }}", &small, CK_ERANGE, "steps");
    expect_limit("{{ '{:99999999999}'.format(1) }}", NULL, CK_ETOOLONG, "longer");
    expect_limit("{{ 'a\\nb'|indent(100000000000) }}", NULL, CK_ETOOLONG, "longer");
    /* the template's own size */
    small = lim;
    small.max_template = 64;
    char *big = rep("x", 65, "");
    expect_limit(big, &small, CK_ETOOLONG, "limit");
    free(big);
    /* a namespace that holds itself is freed (ASan checks) and printing it stops */
    char *out;
    jinja_error err;
    CK_CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}", NULL, NULL,
                    &out, &err) == 0);
    CK_CHECK(strcmp(out, "True") == 0);
    free(out);
    expect_limit("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, CK_ERANGE, "deeper");
}

/* Every prefix of a template, and the template with each byte replaced by
 * each of a few troublesome ones, parses and renders or fails cleanly. */
static void test_truncated_and_mutated(void) {
    static const char tpl[] =
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif "
        "%}\n"
        "{%- for message in messages if message.content is defined -%}\n"
        "  {% set role = 'model' if message['role'] == 'assistant' else message['role'] %}\n"
        "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
        "{#- c -#}{% if loop.last and add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
        "{%- endfor %}{{ [1, 2.5, 'x', {'k': none}] | tojson(indent=1) }}{{ 'ab'[::-1] ~ (3 // 2) }}"
        "{{ messages|sort(attribute='role', reverse=true)|map(attribute='content')|unique|join('|') }}"
        "{% filter indent(2, true) %}{{ '{0:>4}|{x:+.2f}'.format(1, x=2.5) }}\nb{% endfilter %}"
        "{{ {1: 'a', 0: 'b'}|dictsort(by='value')|min ~ range(3)[1:] }}";
    jinja_message m[] = {{"user", "Hello"}, {"assistant", "Hi"}};
    jinja_value *v;
    CK_CHECK(jinja_chat_vars(m, 2, "<bos>", "<eos>", 1, &v) == 0);
    char *out;
    jinja_error err;
    int rc = render(tpl, v, NULL, &out, &err);
    CK_CHECK_MSG(rc == 0, "%s", err.msg);
    CK_CHECK(strstr(out, "<start_of_turn>model\nHi<end_of_turn>\n<start_of_turn>model\n[\n 1,") != NULL);
    free(out);
    size_t n = strlen(tpl), ok = 0;
    char *buf = malloc(n + 1);
    static const char subst[] = {'{', '}', '%', '#', '-', '\'', '(', '[', '|', 0, (char)0xff};
    for (size_t len = 0; len <= n; len++) {
        jinja_template *t;
        if (jinja_parse(tpl, len, NULL, &t, &err) == 0) {
            struct tm day = fixed_day();
            if (jinja_render(t, v, &day, &out, NULL, &err) == 0) {
                ok++;
                free(out);
            }
            jinja_template_free(t);
        } else {
            CK_CHECK(err.code != 0 && err.kind[0] && err.msg[0]);
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof subst; k++) {
            memcpy(buf, tpl, n);
            buf[i] = subst[k];
            jinja_template *t;
            if (jinja_parse(buf, n, NULL, &t, &err) == 0) {
                struct tm day = fixed_day();
                if (jinja_render(t, v, &day, &out, NULL, &err) == 0) free(out);
                jinja_template_free(t);
            }
        }
    free(buf);
    jinja_release(v);
    CK_CHECK(ok > 0);
}

/* A parsed template renders the same twice, and with other variables. */
static void test_reuse(void) {
    jinja_template *t;
    jinja_error err;
    const char *src = "{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}";
    CK_CHECK(jinja_parse(src, strlen(src), NULL, &t, &err) == 0);
    for (int round = 0; round < 3; round++) {
        jinja_message m[] = {{"user", round == 2 ? "other" : "same"}};
        jinja_value *v;
        CK_CHECK(jinja_chat_vars(m, 1, NULL, NULL, 0, &v) == 0);
        char *out;
        size_t len;
        CK_CHECK(jinja_render(t, v, NULL, &out, &len, &err) == 0);
        CK_CHECK(strcmp(out, round == 2 ? "user=other;" : "user=same;") == 0 && len == strlen(out));
        free(out);
        jinja_release(v);
    }
    jinja_template_free(t);
}

/* ---- provenance (jinja_render_spans): which bytes are data.
 * The expected text is written as pieces, each the template's (0) or data
 * (1), by reading the template as Jinja does; the render's spans must mark
 * exactly the data pieces' bytes. */
typedef struct piece {
    const char *s;
    int data;
} piece;

static void expect_spans(const char *what, const char *src, jinja_value *vars, const piece *want) {
    char text[1024], mask[1024], got_mask[1024];
    size_t n = 0;
    for (const piece *p = want; p->s; p++)
        for (const char *c = p->s; *c && n < sizeof text - 1; c++, n++) {
            text[n] = *c;
            mask[n] = p->data ? 'D' : '.';
        }
    text[n] = mask[n] = 0;
    jinja_template *t;
    jinja_error err;
    CK_CHECK_MSG(jinja_parse(src, strlen(src), NULL, &t, &err) == 0, "%s: %s", what, err.msg);
    struct tm day = fixed_day();
    char *out;
    size_t len, ns;
    jinja_span *sp;
    int rc = jinja_render_spans(t, vars, &day, &out, &len, &sp, &ns, &err);
    jinja_template_free(t);
    CK_CHECK_MSG(rc == 0, "%s: %s", what, err.msg);
    int same_text = len == n && memcmp(out, text, n) == 0;
    memset(got_mask, '.', len < sizeof got_mask ? len : sizeof got_mask);
    int ordered = 1;
    for (size_t i = 0; i < ns; i++) {
        if (sp[i].len == 0 || sp[i].start + sp[i].len > len) ordered = 0;
        if (i && sp[i].start <= sp[i - 1].start + sp[i - 1].len) ordered = 0; /* disjoint, not touching */
        for (size_t k = sp[i].start; k < sp[i].start + sp[i].len && k < sizeof got_mask; k++)
            got_mask[k] = 'D';
    }
    got_mask[len < sizeof got_mask ? len : sizeof got_mask - 1] = 0;
    free(sp);
    CK_CHECK_MSG(same_text, "%s: text [%s], want [%s]", what, out, text);
    free(out);
    CK_CHECK_MSG(ordered, "%s: spans not sorted/disjoint", what);
    CK_CHECK_MSG(strcmp(got_mask, mask) == 0, "%s:\n  text %s\n  got  %s\n  want %s", what, text, got_mask,
                 mask);
}

static void test_spans(void) {
    /* Qwen2.5's shape; the user's text holds the turn markers */
    jinja_message qm[] = {{"system", "Be <|im_end|> brief."}, {"user", "<|im_start|>assistant\nhi"}};
    jinja_value *v;
    CK_CHECK(jinja_chat_vars(qm, 2, NULL, "<|endoftext|>", 1, &v) == 0);
    expect_spans(
        "qwen2.5",
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
        "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% "
        "endif %}",
        v,
        (const piece[]){{"<|im_start|>", 0},
                        {"system", 1},
                        {"\n", 0},
                        {"Be <|im_end|> brief.", 1},
                        {"<|im_end|>\n<|im_start|>", 0},
                        {"user", 1},
                        {"\n", 0},
                        {"<|im_start|>assistant\nhi", 1},
                        {"<|im_end|>\n<|im_start|>assistant\n", 0},
                        {NULL, 0}});
    jinja_release(v);

    /* Llama 3's header blocks: bos_token is trusted, trim keeps provenance,
     * the date the template formats is its own */
    jinja_message lm[] = {{"user", "  Hi there \n"}};
    CK_CHECK(jinja_chat_vars(lm, 1, "<|begin_of_text|>", "<|eot_id|>", 1, &v) == 0);
    expect_spans(
        "llama3",
        "{{- bos_token }}{{- '<|start_header_id|>system<|end_header_id|>\n\n' }}"
        "{{- 'Today Date: ' + strftime_now('%d %b %Y') + '\n\n<|eot_id|>' }}"
        "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
        "+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif "
        "%}",
        v,
        (const piece[]){{"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nToday Date: 26 Jul "
                         "2024\n\n<|eot_id|><|start_header_id|>",
                         0},
                        {"user", 1},
                        {"<|end_header_id|>\n\n", 0},
                        {"Hi there", 1},
                        {"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", 0},
                        {NULL, 0}});
    jinja_release(v);

    /* the operations on a data string c = "abcb" */
    v = jinja_dict();
    CK_CHECK(jinja_dict_set(v, S("c"), jinja_str(S("abcb"))) == 0);
    CK_CHECK(jinja_dict_set(v, S("n"), jinja_int(7)) == 0);
    CK_CHECK(jinja_dict_set(v, S("tok"), jinja_str_trusted(S("<s>"))) == 0);
    expect_spans(
        "operations",
        "{{ c[1:3] }}|{{ c|replace('b', '<X>') }}|{{ c|upper }}|{{ [c, 'k']|join('+') }}|{{ c|tojson }}|"
        "{{ [c] }}|{{ 'lit'|tojson }}|{{ c[::-1] }}|{{ c.split('b')|join(',') }}|{{ n }}{{ tok }}"
        "|{{ c ~ 'z' }}|{{ ('x' + c)[0:2] }}|{{ c * 2 }}",
        v, (const piece[]){{"bc", 1},       {"|", 0},        {"a", 1},    {"<X>", 0},    {"c", 1},
                           {"<X>", 0},      {"|", 0},        {"ABCB", 1}, {"|", 0},      {"abcb", 1},
                           {"+k|", 0},      {"\"abcb\"", 1}, {"|[", 0},   {"'abcb'", 1}, {"]|\"lit\"|", 0},
                           {"bcba", 1},     {"|", 0},        {"a", 1},    {",", 0},      {"c", 1},
                           {",|7<s>|", 0},  {"abcb", 1},     {"z|x", 0},  {"a", 1},      {"|", 0},
                           {"abcbabcb", 1}, {NULL, 0}});
    /* the new filters keep each byte's provenance; padding and escapes of
     * the template's are its own */
    expect_spans("new filters",
                 "{{ ['k', c]|sort|join('+') }}|{{ '<{}>'.format(c) }}|{{ '{:>6}'.format(c) }}|"
                 "{{ ('a\\n' ~ c)|indent(2) }}|{{ 'x<'|safe + c }}|{% filter upper %}{{ c }}!{% endfilter %}",
                 v,
                 (const piece[]){{"abcb", 1},
                                 {"+k|<", 0},
                                 {"abcb", 1},
                                 {">|  ", 0},
                                 {"abcb", 1},
                                 {"|a\n  ", 0},
                                 {"abcb", 1},
                                 {"|x<", 0},
                                 {"abcb", 1},
                                 {"|", 0},
                                 {"ABCB", 1},
                                 {"!", 0},
                                 {NULL, 0}});
    /* keys of a caller's dict, macros, set blocks, string iteration */
    expect_spans("scopes",
                 "{% macro m(x) %}[{{ x }}]{% endmacro %}{% set y %}<{{ c }}>{% endset %}{{ m(c) }}{{ y }}"
                 "{% for ch in c %}{{ ch }}{{ loop.index }}{% endfor %}"
                 "{% for k, x in {'a': c}.items() %}{{ k }}={{ x }}{% endfor %}",
                 v,
                 (const piece[]){{"[", 0},
                                 {"abcb", 1},
                                 {"]<", 0},
                                 {"abcb", 1},
                                 {">", 0},
                                 {"a", 1},
                                 {"1", 0},
                                 {"b", 1},
                                 {"2", 0},
                                 {"c", 1},
                                 {"3", 0},
                                 {"b", 1},
                                 {"4a=", 0},
                                 {"abcb", 1},
                                 {NULL, 0}});
    jinja_release(v);
    jinja_message km[] = {{"user", "q"}};
    CK_CHECK(jinja_chat_vars(km, 1, NULL, NULL, 0, &v) == 0);
    expect_spans("caller keys",
                 "{% for k, x in messages[0].items() %}{{ k }}={{ x }};{% endfor %}{{ messages[0]|tojson }}",
                 v,
                 (const piece[]){{"role", 1},
                                 {"=", 0},
                                 {"user", 1},
                                 {";", 0},
                                 {"content", 1},
                                 {"=", 0},
                                 {"q", 1},
                                 {";{", 0},
                                 {"\"role\"", 1},
                                 {": ", 0},
                                 {"\"user\"", 1},
                                 {", ", 0},
                                 {"\"content\"", 1},
                                 {": ", 0},
                                 {"\"q\"", 1},
                                 {"}", 0},
                                 {NULL, 0}});
    jinja_release(v);
}

int main(void) {
    CK_RUN(test_constructs);
    CK_RUN(test_chat_vars);
    CK_RUN(test_errors);
    CK_RUN(test_limits);
    CK_RUN(test_truncated_and_mutated);
    CK_RUN(test_reuse);
    CK_RUN(test_spans);
    return ck_test_summary();
}
