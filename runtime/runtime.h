/* runtime.h: the context and the request path shared by every op family (ops/) and the
 * tuner: kernel key -> in-process table -> SQLite cache -> template + NVRTC -> load. */
#ifndef SJ_RUNTIME_H
#define SJ_RUNTIME_H

#include "sparsejit.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_table.h"
#include "cache/cache.h"
#include "generator/generator.h"

/* How many read-only shared caches $SPARSEJIT_CACHE_RO may list. */
#define RT_MAX_SHARED_CACHES 8

struct sj_context {
    sj_context_options opts;
    char arch[16];
    char cache_path[1024];
    char template_dir[1024];
    int has_gpu;
    char no_gpu_reason[256];
    CUdevice device;
    CUcontext cu_ctx;          /* the device's primary context (shared with cuBLAS/PyTorch) */
    sj_device_info info;
    gen_state *gen;            /* opened on first need */
    cache_db *cache;           /* NULL when disabled or when it could not be opened */
    cache_db *shared[RT_MAX_SHARED_CACHES]; /* $SPARSEJIT_CACHE_RO, read-only, looked up after cache */
    int n_shared;
    kernel_table table;
    loaded_kernel **kernels;   /* every loaded kernel, owned here; the table points into it */
    int n_kernels, cap_kernels;
    sj_stats stats;
    sj_kernel_info last;
    sj_devptr scratch;         /* rt_scratch: workspaces of kernels that need one */
    size_t scratch_bytes;
    /* per-problem forced configs (sj_set_config), a small list */
    struct forced_config { sj_problem problem; char config[256]; } *forced;
    int n_forced, cap_forced;
    /* SJ_TUNE_ON_MISS: tunes p and writes the winner's config. The tuner installs it when it
     * creates the context (tuner/context.c), so the runtime never calls up into the tuner. */
    sj_status (*tune_on_miss)(sj_context *ctx, const sj_problem *p, char *config, size_t len);
};

/* Creates a context (sj_context_create without the tuner's hook; see tuner/context.c). */
sj_status rt_context_create(const sj_context_options *opts, sj_context **out);

/* The loaded kernel for problem: forced config, else the tuned winner, else the default (or tune
 * on miss, per policy). Hot path: one table lookup. */
sj_status rt_kernel_for(sj_context *ctx, const sj_problem *p, const loaded_kernel **out);
/* The loaded kernel of template tname (NULL: the op's) for an explicit config ("": the
 * template's default), owned by the context: the tuner's reference kernels, bench, forced configs. */
sj_status rt_kernel_with_config(sj_context *ctx, const sj_problem *p, const char *tname, const char *config,
                                const loaded_kernel **out);
/* Launches with the kernel's geometry. args: the op's ABI (templates/README.md), n_args of them.
 * Fewer than the kernel's parameters are refused (cuLaunchKernel would read past args and crash
 * the process); more are fine: a variant may take a prefix of its op's ABI (twell-ffn's ALGO=0
 * reads no workspace or tensor maps). Pass an array as RT_ARGS(array). */
sj_status rt_launch(sj_context *ctx, const loaded_kernel *k, void **args, size_t n_args, void *stream);
#define RT_ARGS(array) (array), (sizeof(array) / sizeof *(array))

/* Makes ctx's (primary) context current for the calling thread; SJ_ERR_NO_GPU with the reason
 * when the context has no GPU. */
sj_status rt_require_gpu(sj_context *ctx, const char *what);

/* The bracket around every public function that takes an sj_context: RT_USE_CONTEXT(ctx) makes
 * ctx's device's primary context current for the call (when ctx has a GPU) and puts the calling
 * thread's own current context (or none) back on return, so a caller with a context of its own
 * (cuCtxCreate, a green context) finds it current afterwards. Making ctx's current at entry, not
 * only where a driver call needs it, keeps nested public calls safe: an inner one puts back what
 * it found, ctx's, so the outer one's driver calls after it still run on ctx's. The cleanup
 * attribute (GCC, Clang) runs the restore on every return path, after the status is computed.
 * tests/context_scope.sh checks every such function starts with it. Costs two cuCtxGetCurrent
 * calls, and a cuCtxSetCurrent each way only when the caller's context differs. */
typedef struct rt_caller_context {
    CUcontext saved;
    int known; /* 0: no driver, or it could not say (not initialised): nothing to put back */
} rt_caller_context;
rt_caller_context rt_caller_context_enter(sj_context *ctx);
void rt_caller_context_restore(rt_caller_context *c);
#define RT_USE_CONTEXT(ctx)                                                                  \
    rt_caller_context rt_caller_context_ __attribute__((cleanup(rt_caller_context_restore))) = \
        rt_caller_context_enter(ctx)
sj_status rt_generator(sj_context *ctx, gen_state **out);
/* Lookups in the context's own cache first, then the shared read-only ones in
 * $SPARSEJIT_CACHE_RO's order: a kernel or winner of this user's overrides a shared one.
 * SJ_ERR_NOT_FOUND when none has it; *from names the cache that failed otherwise. */
sj_status rt_cached_kernel(sj_context *ctx, const cache_key *key, const char *config, cache_kernel *out,
                           const char **from);
sj_status rt_cached_winner(sj_context *ctx, const cache_key *key, cache_winner *out);
/* The cached winner's config for p (origin SJ_CONFIG_TUNED), or "" (SJ_CONFIG_DEFAULT) when the
 * policy is pinned, there is no cache or no winner, or the template rejects the winner's config
 * (said once through the log). Needs no GPU. */
sj_status rt_cached_config(sj_context *ctx, const sj_problem *p, char *config, size_t len, sj_config_origin *origin);
/* Fills the cache key of problem for the context's device and template tname (NULL: the op's). */
sj_status rt_cache_key(sj_context *ctx, const sj_problem *p, const char *tname, cache_key *key);

/* The one build path (build.c). Generates p's source from template tname with config, counting
 * the Lua time in the context's stats. */
sj_status rt_generate(sj_context *ctx, const sj_problem *p, const char *tname, const char *config, sj_generated **out);
/* Compiles generated source for arch into out (config, entry, geometry, cubin: free() it, compile
 * time). Touches no context, so the tuner's compile threads call it; log may be NULL. */
sj_status build_compile(const sj_generated *g, const char *arch, cache_kernel *out, char **log);
/* Counts one NVRTC compile of seconds in the context's stats. */
void rt_count_compile(sj_context *ctx, double seconds);
/* Generates and compiles key's template for p with config and stores the cubin under key (a cache
 * that cannot store it is logged, not an error). */
sj_status rt_build(sj_context *ctx, const sj_problem *p, const cache_key *key, const char *config, cache_kernel *out);
/* Loads a compiled kernel into out, which the caller owns (rt_module_unload): the request path
 * registers it with the context, the tuner loads and drops hundreds of candidates. */
sj_status rt_module_load(sj_context *ctx, const sj_problem *p, const cache_kernel *ck, const char *tname,
                         sj_kernel_source source, loaded_kernel *out);
void rt_module_unload(loaded_kernel *k);
/* Hands a diagnostic that is not an error to opts.log (dropped when it is NULL), so the library
 * never writes to stderr itself. */
void rt_log(sj_context *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Monotonic seconds. */
double rt_seconds(void);
/* Checks a device pointer argument: nonzero and aligned. */
sj_status rt_check_ptr(const char *name, sj_devptr p, unsigned alignment);

/* A TMA descriptor (CUtensorMap: 128 bytes, 64-byte aligned), passed by value to kernels. */
typedef struct tensor_map { _Alignas(64) unsigned long long opaque[16]; } tensor_map;
/* The box and swizzle a kernel reads a matrix with (tensor_map.c): 64 x 64 elements swizzled
 * by 128 bytes (wgmma operands), or 256 rows x 32 elements swizzled by 64 bytes (row gathers). */
typedef enum tma_shape { TMA_WGMMA, TMA_ROWS32 } tma_shape;
/* The descriptor of a row-major rows x cols 16-bit matrix at base in boxes of the given shape,
 * zero fill (tensor_map.c); zeros unless the context's arch is sm_90a. */
sj_status rt_tensor_map_rows(sj_context *ctx, tensor_map *map, sj_devptr base, int64_t rows, int64_t cols,
                             tma_shape shape, const char *what);
/* The context's device scratch, at least bytes, zero-filled when it is (re)allocated; kernels that
 * use it leave it zeroed (templates/lib/twell_pairs.lua). Launches that share it must not overlap. */
sj_status rt_scratch(sj_context *ctx, size_t bytes, sj_devptr *out);

#endif
