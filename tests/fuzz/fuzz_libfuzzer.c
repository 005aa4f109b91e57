/* fuzz_libfuzzer.c: fuzz_fail for the targets linked with libFuzzer (-DSPARSEJIT_LIBFUZZER=ON),
 * which keeps the failing input itself (crash-<sha1> in the current folder) once we abort. */
#include "tests/fuzz/fuzz.h"

#include <stdio.h>
#include <stdlib.h>

void fuzz_fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz: check failed: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}
