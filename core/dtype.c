/* dtype.c: the element types' names, sizes and parsing. */
#include "core/error.h"

#include <string.h>

const char *sj_dtype_name(sj_dtype d)
{
    switch (d) {
    case SJ_DTYPE_F16: return "f16";
    case SJ_DTYPE_BF16: return "bf16";
    case SJ_DTYPE_F32: return "f32";
    }
    return NULL;
}

size_t sj_dtype_size(sj_dtype d)
{
    switch (d) {
    case SJ_DTYPE_F16: case SJ_DTYPE_BF16: return 2;
    case SJ_DTYPE_F32: return 4;
    }
    return 0;
}

sj_status sj_dtype_parse(const char *name, sj_dtype *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_dtype_parse: out is NULL");
    if (!name) return error_set(SJ_ERR_INVALID_ARGUMENT, "dtype is NULL; expected f16, bf16 or f32");
    static const struct { const char *name; sj_dtype d; } names[] = {
        { "f16", SJ_DTYPE_F16 }, { "fp16", SJ_DTYPE_F16 }, { "half", SJ_DTYPE_F16 },
        { "bf16", SJ_DTYPE_BF16 }, { "bfloat16", SJ_DTYPE_BF16 },
        { "f32", SJ_DTYPE_F32 }, { "fp32", SJ_DTYPE_F32 }, { "float", SJ_DTYPE_F32 },
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(name, names[i].name)) { *out = names[i].d; return SJ_OK; }
    return error_set(SJ_ERR_INVALID_ARGUMENT, "unknown dtype '%s'; expected f16, bf16 or f32", name);
}
