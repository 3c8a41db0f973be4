/* test_tb.c - growing text and stop strings (tb.h). */
#include <stdlib.h>

#include "ck_test.h"
#include "tb.h"

static void test_append(void) {
    char *t = NULL;
    size_t len = 0, cap = 0;
    CK_CHECK(tb_append(&t, &len, &cap, "", 0) == 0 && t && len == 0 && t[0] == 0);
    for (int i = 0; i < 1000; i++) CK_CHECK(tb_append(&t, &len, &cap, "ab\0", 3) == 0);
    CK_CHECK(len == 3000 && cap >= 3001 && t[len] == 0 && t[2] == 0 && t[2999] == 0 && t[2998] == 'b');
    free(t);
}

static void test_cut_stop(void) {
    char t[64] = "Hello world. Bye";
    size_t len = strlen(t);
    const char *stops[2] = {"", ". B"};
    /* only tails the bytes from `before` on could complete are searched */
    CK_CHECK(tb_cut_stop(t, &len, stops, 2, len) == 0);
    CK_CHECK(tb_cut_stop(t, &len, stops, 2, 13) == 1 && len == 11 && !strcmp(t, "Hello world"));
    len = strlen(strcpy(t, "ab"));
    CK_CHECK(tb_cut_stop(t, &len, stops + 1, 1, 0) == 0 && len == 2); /* stop longer than text */
}

static void test_holdback(void) {
    const char *stops[2] = {"STOP", "xy"};
    CK_CHECK(tb_stop_holdback("abc", 3, stops, 2) == 0);
    CK_CHECK(tb_stop_holdback("abcS", 4, stops, 2) == 1);
    CK_CHECK(tb_stop_holdback("abcSTO", 6, stops, 2) == 3);
    CK_CHECK(tb_stop_holdback("abcx", 4, stops, 2) == 1);
    CK_CHECK(tb_stop_holdback("ST", 2, stops, 2) == 2);
    CK_CHECK(tb_stop_holdback("abc", 3, stops, 0) == 0);
    CK_CHECK(tb_stop_holdback("STOP", 4, stops, 1) == 0); /* a whole stop is cut, not held */
}

int main(void) {
    CK_RUN(test_append);
    CK_RUN(test_cut_stop);
    CK_RUN(test_holdback);
    return ck_test_summary();
}
