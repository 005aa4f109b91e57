/* number.c: strict integer parsing (number.h). strtoll alone accepts leading blanks, a '+',
 * trailing text when its end pointer is not checked, and clamps on overflow with only errno to
 * say so; every caller used to get one of those wrong, so they all come here. */
#include "core/number.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

number_result number_parse(const char *s, size_t len, long long lo, long long hi, long long *out)
{
    size_t i = s && len && s[0] == '-' ? 1 : 0;
    if (!s || i == len) return NUMBER_NOT_INTEGER;
    for (size_t j = i; j < len; j++)
        if (s[j] < '0' || s[j] > '9') return NUMBER_NOT_INTEGER;
    /* More digits than any long long has (19, leading zeros aside) cannot be in range; the copy
     * below is bounded, so count significant digits first. */
    while (i + 1 < len && s[i] == '0') i++;
    if (len - i > 19) return NUMBER_OUT_OF_RANGE;
    char buf[24];
    size_t n = 0;
    if (s[0] == '-') buf[n++] = '-';
    for (; i < len; i++) buf[n++] = s[i];
    buf[n] = 0;
    errno = 0;
    char *end;
    long long v = strtoll(buf, &end, 10);
    if (errno == ERANGE || v < lo || v > hi) return NUMBER_OUT_OF_RANGE;
    *out = v;
    return NUMBER_OK;
}

const char *number_problem(number_result r)
{
    return r == NUMBER_OUT_OF_RANGE ? "out of range" : r == NUMBER_NOT_INTEGER ? "not an integer" : "an integer";
}
