/* abi.c: what a binding that reaches the library through its C ABI (python/sparsejit, ctypes)
 * checks at load time: the ABI version the library was built with and the size of each public
 * struct, so a binding whose layouts differ from the library's refuses to load instead of
 * passing it misread memory. */
#include "core/error.h"

#include <string.h>

int sj_abi_version(void) { return SJ_ABI_VERSION; }

#define STRUCTS(X)                                                                                    \
    X(sj_problem) X(sj_context_options) X(sj_device_info) X(sj_stats) X(sj_generated) X(sj_kernel_info) \
    X(sj_vnm_layout) X(sj_vnm_host) X(sj_vnm_device) X(sj_twell_layout) X(sj_twell_host)                \
    X(sj_twell_device) X(sj_tune_progress) X(sj_tune_options) X(sj_tune_trial) X(sj_tune_result)        \
    X(sj_bench_result) X(sj_gmp_schedule) X(sj_gmp_target) X(sj_hybrid_layout) X(sj_hybrid_report)      \
    X(sj_hybrid_host) X(sj_hybrid_ffn_step) X(sj_hybrid_device)

sj_status sj_struct_size(const char *name, size_t *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_struct_size: out is NULL");
    if (!name) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_struct_size: name is NULL");
#define MATCH(s)                    \
    if (!strcmp(name, #s)) {        \
        *out = sizeof(s);           \
        return SJ_OK;               \
    }
    STRUCTS(MATCH)
#undef MATCH
#define NAME(s) " " #s
    return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_struct_size: \"%s\" is not a public struct; known:%s", name,
                     STRUCTS(NAME));
#undef NAME
}
