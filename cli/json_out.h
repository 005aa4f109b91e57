/* json_out.h: the CLI's one JSON writer: strings escaped as RFC 8259 requires, numbers that are
 * never inf or nan (null instead), and key/value helpers for flat objects. */
#ifndef SJ_CLI_JSON_OUT_H
#define SJ_CLI_JSON_OUT_H

#include <stdio.h>

/* s as a JSON string: quotes, backslashes and control characters escaped. */
void json_string(FILE *f, const char *s);
/* v with `digits` significant digits, or null where JSON has no number for it (inf, nan). */
void json_number(FILE *f, double v, int digits);
/* ,"key":"value" (no comma before the first: first != 0). */
void json_kv_string(FILE *f, int first, const char *key, const char *value);
/* ,"key":number */
void json_kv_number(FILE *f, int first, const char *key, double value, int digits);
/* ,"key":integer */
void json_kv_int(FILE *f, int first, const char *key, long long value);
/* ,"key":true|false */
void json_kv_bool(FILE *f, int first, const char *key, int value);

#endif
