/* number.h: the one strict integer parser behind every number a user types (CLI options, config
 * strings, the Lua module's "V:N:M" texts): decimal digits only, checked against a range before
 * anything narrows it, so that no value is truncated, wrapped or silently defaulted. */
#ifndef SJ_CORE_NUMBER_H
#define SJ_CORE_NUMBER_H

#include <stddef.h>

typedef enum number_result {
    NUMBER_OK,
    NUMBER_NOT_INTEGER,  /* empty, a sign alone, or any byte other than a leading '-' and digits */
    NUMBER_OUT_OF_RANGE  /* an integer, but outside lo..hi (or outside long long) */
} number_result;

/* Parses the len bytes at s (not NUL-terminated: a field of a larger text) as an integer in
 * lo..hi into *out; *out is left alone unless NUMBER_OK. */
number_result number_parse(const char *s, size_t len, long long lo, long long hi, long long *out);

/* What was wrong, for messages that go on to name the range: "not an integer", "out of range". */
const char *number_problem(number_result r);

#endif
