/* check.h: the PASS/FAIL line and the counters of the C and C++ test programs
 * (tests/unit/test_kernels.c, tests/cuda/test_kernels_emu.cpp,
 * tests/cuda/step_compare.cpp). Included once per program. */
#ifndef SHARDC_TESTS_CHECK_H
#define SHARDC_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int npass, nfail;

/* prints "PASS what" or "FAIL what" and counts it */
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok) npass++;
    else nfail++;
}

#endif
