/* json_out.c: the CLI's one JSON writer (info, bench, tune and cache all print through it), so a
 * GPU name, a config or an error text holding a quote or a control character still makes valid
 * JSON. */
#include "cli/json_out.h"

#include <math.h>

void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void json_number(FILE *f, double v, int digits)
{
    if (isfinite(v)) fprintf(f, "%.*g", digits, v);
    else fputs("null", f);
}

static void key(FILE *f, int first, const char *k)
{
    if (!first) fputc(',', f);
    json_string(f, k);
    fputc(':', f);
}

void json_kv_string(FILE *f, int first, const char *k, const char *value)
{
    key(f, first, k);
    json_string(f, value);
}

void json_kv_number(FILE *f, int first, const char *k, double value, int digits)
{
    key(f, first, k);
    json_number(f, value, digits);
}

void json_kv_int(FILE *f, int first, const char *k, long long value)
{
    key(f, first, k);
    fprintf(f, "%lld", value);
}

void json_kv_bool(FILE *f, int first, const char *k, int value)
{
    key(f, first, k);
    fputs(value ? "true" : "false", f);
}
