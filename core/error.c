/* error.c: the thread-local last-error string and the status names. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[2048];

const char *sj_last_error(void) { return last_error; }

void error_clear(void) { last_error[0] = 0; }

sj_status error_set(sj_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

sj_status error_prefix(sj_status status, const char *fmt, ...)
{
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s: %s", prefix, old);
    return status;
}

const char *sj_status_name(sj_status s)
{
    switch (s) {
    case SJ_OK: return "ok";
    case SJ_ERR_INVALID_ARGUMENT: return "invalid argument";
    case SJ_ERR_UNSUPPORTED: return "unsupported";
    case SJ_ERR_NO_GPU: return "no GPU";
    case SJ_ERR_CUDA: return "CUDA error";
    case SJ_ERR_NVRTC: return "NVRTC error";
    case SJ_ERR_TEMPLATE: return "template error";
    case SJ_ERR_CACHE: return "cache error";
    case SJ_ERR_NOT_FOUND: return "not found";
    case SJ_ERR_VERIFY: return "verification failed";
    case SJ_ERR_OUT_OF_MEMORY: return "out of memory";
    case SJ_ERR_IO: return "I/O error";
    case SJ_ERR_PATTERN: return "sparsity pattern violated";
    }
    return "unknown status";
}

/* The number the library was built with, which may differ from the header a program includes. */
const char *sj_version_string(void) { return SJ_VERSION_STRING; }
