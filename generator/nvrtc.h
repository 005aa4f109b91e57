/* nvrtc.h: compiles generated CUDA C straight to a cubin for one arch with NVRTC. */
#ifndef SJ_NVRTC_H
#define SJ_NVRTC_H

#include <stddef.h>
#include "sparsejit.h"

/* arch: "sm_80", "sm_90a", ... On failure *log holds NVRTC's log (free() it). */
sj_status nvrtc_compile(const char *source, const char *name, const char *arch, void **cubin,
                        size_t *cubin_size, char **log, double *seconds);
/* major*1000 + minor*10, e.g. 13000; 0 if NVRTC cannot say. */
int nvrtc_version_number(void);

#endif
