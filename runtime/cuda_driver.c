/* cuda_driver.c: loads libcuda with dlopen and resolves the driver functions the library uses.
 * The names go through cuda.h's macros (cuMemAlloc -> cuMemAlloc_v2), so each pointer is the
 * versioned entry point matching the prototype we compile against. */
#include "runtime/cuda_driver.h"
#include "core/error.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

cuda_api cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static sj_status load_status = SJ_ERR_NO_GPU;
static char load_reason[256];

#define SJ_XSTR(x) SJ_STR(x)
#define SJ_STR(x) #x

static void load_driver(void)
{
    const char *names[] = { "libcuda.so.1", "libcuda.so" };
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_reason, sizeof load_reason, "libcuda.so.1 not found (no NVIDIA driver): %s", dlerror());
        return;
    }
#define CU_RESOLVE(name)                                                              \
    cu.name = (__typeof__(cu.name))dlsym(h, SJ_XSTR(name));                         \
    if (!cu.name) {                                                                   \
        snprintf(load_reason, sizeof load_reason, "libcuda lacks %s (driver too old)", SJ_XSTR(name)); \
        return;                                                                          \
    }
    CU_FUNCTIONS(CU_RESOLVE)
#undef CU_RESOLVE
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *s = NULL;
        cu.cuGetErrorString(r, &s);
        snprintf(load_reason, sizeof load_reason, "cuInit failed: %s (error %d)", s ? s : "?", (int)r);
        return;
    }
    load_status = SJ_OK;
}

sj_status cuda_load(char *reason, size_t reason_len)
{
    pthread_once(&load_once, load_driver);
    if (load_status != SJ_OK && reason) snprintf(reason, reason_len, "%s", load_reason);
    return load_status;
}

sj_status cuda_error(CUresult r, const char *what)
{
    const char *name = NULL, *text = NULL;
    if (cu.cuGetErrorName) cu.cuGetErrorName(r, &name);
    if (cu.cuGetErrorString) cu.cuGetErrorString(r, &text);
    return error_set(r == CUDA_ERROR_OUT_OF_MEMORY ? SJ_ERR_OUT_OF_MEMORY : SJ_ERR_CUDA,
                   "%s: %s (%s)", what, name ? name : "CUDA error", text ? text : "no description");
}
