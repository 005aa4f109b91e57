/* error.h: the thread-local last-error text behind sj_last_error(), and the status names. */
#ifndef SJ_CORE_ERROR_H
#define SJ_CORE_ERROR_H

#include "sparsejit.h"

/* Sets the thread's last error to the formatted message and returns status, so that error
 * paths read `return error_set(SJ_ERR_INVALID_ARGUMENT, "m must be > 0, got %lld", m);`. */
sj_status error_set(sj_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message: "while loading kernel: <old message>". Returns status. */
sj_status error_prefix(sj_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void error_clear(void);

#endif
