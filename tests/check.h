// The C test programs' shared tally. check() prints one PASS/FAIL line per check; CHECK() is
// silent on success and names the file and line on failure (for checks run in loops); both
// count, and tests_summary() prints the "N passed, M failed" line ctest logs are read by.
#ifndef MT_TEST_CHECK_H
#define MT_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int passed, failed;

static inline void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    ok ? passed++ : failed++;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            putchar('\n');                                                                         \
            failed++;                                                                              \
        }                                                                                          \
    } while (0)

// Prints the closing line; returns the process exit status.
static inline int tests_summary(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

#endif
