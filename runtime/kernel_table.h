/* kernel_table.h: the in-process table of loaded kernels, keyed by problem and config. A hit
 * is the whole hot path: no SQLite, Lua or NVRTC. Open addressing, FNV-1a over the key bytes. */
#ifndef SJ_KERNEL_TABLE_H
#define SJ_KERNEL_TABLE_H

#include "sparsejit.h"
#include "runtime/cuda_driver.h"

typedef struct loaded_kernel {
    sj_problem problem;
    char config[256];          /* canonical config it was built with */
    char template_name[64];
    CUmodule module;
    CUfunction function;
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    unsigned n_params;         /* the kernel's parameter count, from the driver */
    sj_kernel_source source;
    sj_config_origin origin;
} loaded_kernel;

typedef struct kernel_table_slot {
    sj_problem problem;        /* zero-padded, compared bytewise */
    char config[256];          /* "" = the resolved choice for the problem */
    loaded_kernel *kernel;     /* NULL = empty slot */
} kernel_table_slot;

typedef struct kernel_table {
    kernel_table_slot *slots;
    size_t cap, count;
} kernel_table;

void kernel_table_init(kernel_table *t);
/* Frees the slots only: kernels are owned by the context (several slots may share one). */
void kernel_table_free(kernel_table *t);
loaded_kernel *kernel_table_get(const kernel_table *t, const sj_problem *p, const char *config);
sj_status kernel_table_put(kernel_table *t, const sj_problem *p, const char *config, loaded_kernel *k);
/* Drops the resolved ("" config) slot of problem p, e.g. after a new tuned winner. */
void kernel_table_forget(kernel_table *t, const sj_problem *p);

#endif
