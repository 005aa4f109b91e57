/* error.h: the thread-local last-error string behind sj_last_error(). */
#ifndef SJ_ERROR_H
#define SJ_ERROR_H

#include "sparsejit.h"

/* Sets the thread's last error to the formatted message and returns status, so that error
 * paths read `return sj_fail(SJ_ERR_INVALID_ARGUMENT, "m must be > 0, got %lld", m);`. */
sj_status sj_fail(sj_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message: "while loading kernel: <old message>". Returns status. */
sj_status sj_fail_context(sj_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sj_clear_error(void);

#endif
