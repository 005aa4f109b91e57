/* context.c: the sparsejit context: device discovery through the driver API (or a compile-only
 * context without a GPU), device info, counters, device memory helpers, forced configs, the log
 * and the clock the layers above time with. A context is used by one thread at a time. It calls
 * nothing else of runtime/: build.c and kernel.c build on it. */
#include "core/op.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "generator/nvrtc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Monotonic seconds, for the counters and the tuner's budgets. */
double rt_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sj_context_options_init(sj_context_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->tune_policy = SJ_TUNE_NEVER;
}

void rt_log(sj_context *ctx, const char *fmt, ...)
{
    if (!ctx->opts.log) return;
    /* room for a cache path (1024) and a last error (2048) with a sentence around them */
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->opts.log(ctx->opts.log_user, msg);
}

/* sm_90 gets the arch-specific sm_90a (wgmma, setmaxnreg); other archs their plain name. */
static void arch_of(int major, int minor, char *buf, size_t len)
{
    if (major == 9 && minor == 0) snprintf(buf, len, "sm_90a");
    else snprintf(buf, len, "sm_%d%d", major, minor);
}

static sj_status open_gpu(sj_context *ctx)
{
    char reason[256] = "";
    if (cuda_load(reason, sizeof reason) != SJ_OK) {
        snprintf(ctx->no_gpu_reason, sizeof ctx->no_gpu_reason, "%s", reason);
        return SJ_ERR_NO_GPU;
    }
    int count = 0;
    CUresult r = cu.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count == 0) {
        snprintf(ctx->no_gpu_reason, sizeof ctx->no_gpu_reason, "the NVIDIA driver reports no CUDA device");
        return SJ_ERR_NO_GPU;
    }
    if (ctx->opts.device_ordinal >= count)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "device_ordinal %d: out of range; this machine has %d GPU%s: expected 0..%d",
                       ctx->opts.device_ordinal, count, count == 1 ? "" : "s", count - 1);
    CU_CHECK(cu.cuDeviceGet(&ctx->device, ctx->opts.device_ordinal), "cuDeviceGet");
    CU_CHECK(cu.cuDevicePrimaryCtxRetain(&ctx->cu_ctx, ctx->device), "cuDevicePrimaryCtxRetain");
    CU_CHECK(cu.cuCtxSetCurrent(ctx->cu_ctx), "cuCtxSetCurrent");
    sj_device_info *d = &ctx->info;
    CU_CHECK(cu.cuDeviceGetName(d->name, sizeof d->name, ctx->device), "cuDeviceGetName");
    int v = 0;
#define ATTR(field, attr) \
    CU_CHECK(cu.cuDeviceGetAttribute(&v, attr, ctx->device), "cuDeviceGetAttribute(" #attr ")"); field = v;
    ATTR(d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    ATTR(d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    ATTR(d->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    ATTR(d->l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
    ATTR(d->max_shared_per_block_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
#undef ATTR
    CU_CHECK(cu.cuDeviceTotalMem(&d->total_memory, ctx->device), "cuDeviceTotalMem");
    CU_CHECK(cu.cuDriverGetVersion(&d->driver_version), "cuDriverGetVersion");
    arch_of(d->cc_major, d->cc_minor, d->arch, sizeof d->arch);
    if (d->cc_major < 8)
        return error_set(SJ_ERR_UNSUPPORTED, "%s has compute capability %d.%d; sparsejit needs 8.0 or newer (Sparse Tensor Cores, cp.async)",
                       d->name, d->cc_major, d->cc_minor);
    ctx->has_gpu = 1;
    d->has_gpu = 1;
    return SJ_OK;
}

/* Opens the context's cache and the shared read-only ones of $SPARSEJIT_CACHE_RO (paths
 * separated by ':'). A cache is an optimization: one that cannot be opened (unwritable $HOME, a
 * newer schema, another application's file) leaves the context without it, said once through
 * the log, and never fails the context. */
static void open_caches(sj_context *ctx)
{
    if (cache_open(ctx->cache_path, ctx->opts.log, ctx->opts.log_user, &ctx->cache) != SJ_OK) {
        rt_log(ctx, "running without a kernel cache: %s (set SPARSEJIT_CACHE or opts.cache_path to another file; "
               "\"\" disables it)", sj_last_error());
        ctx->cache = NULL;
        ctx->cache_path[0] = 0; /* sj_device_info.cache_path: "" when there is none */
    }
    const char *list = getenv("SPARSEJIT_CACHE_RO");
    for (const char *p = list; p && *p;) {
        size_t n = strcspn(p, ":");
        char path[1024];
        if (n == 0 || n >= sizeof path) {
            if (n) rt_log(ctx, "SPARSEJIT_CACHE_RO: a path of %zu bytes is too long; skipped it", n);
        } else if (ctx->n_shared == RT_MAX_SHARED_CACHES) {
            rt_log(ctx, "SPARSEJIT_CACHE_RO: more than %d shared caches; used the first %d", RT_MAX_SHARED_CACHES,
                   RT_MAX_SHARED_CACHES);
            break;
        } else {
            snprintf(path, sizeof path, "%.*s", (int)n, p);
            if (cache_open_read_only(path, &ctx->shared[ctx->n_shared]) == SJ_OK) ctx->n_shared++;
            else rt_log(ctx, "SPARSEJIT_CACHE_RO: skipped a shared cache: %s", sj_last_error());
        }
        p += n + (p[n] == ':');
    }
}

sj_status rt_context_create(const sj_context_options *opts, sj_context **out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_context_create: out is NULL");
    *out = NULL;
    sj_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return error_set(SJ_ERR_OUT_OF_MEMORY, "sj_context_create: out of memory");
    if (opts) ctx->opts = *opts;
    else sj_context_options_init(&ctx->opts);
    if (ctx->opts.tune_policy < SJ_TUNE_NEVER || ctx->opts.tune_policy > SJ_TUNE_PINNED) {
        int policy = (int)ctx->opts.tune_policy;
        free(ctx);
        return error_set(SJ_ERR_INVALID_ARGUMENT, "opts.tune_policy %d: expected SJ_TUNE_NEVER, SJ_TUNE_ON_MISS or SJ_TUNE_PINNED",
                       policy);
    }
    if (ctx->opts.device_ordinal < 0) {
        int ordinal = ctx->opts.device_ordinal;
        free(ctx);
        return error_set(SJ_ERR_INVALID_ARGUMENT, "device_ordinal %d: expected a GPU's number, 0 or more (0: the first)",
                         ordinal);
    }
    kernel_table_init(&ctx->table);

    sj_status st = open_gpu(ctx);
    if (st != SJ_OK && st != SJ_ERR_NO_GPU) goto fail;
    if (st == SJ_ERR_NO_GPU && ctx->opts.require_gpu) {
        st = error_set(SJ_ERR_NO_GPU, "no GPU: %s", ctx->no_gpu_reason);
        goto fail;
    }
    snprintf(ctx->info.no_gpu_reason, sizeof ctx->info.no_gpu_reason, "%s", ctx->no_gpu_reason);
    if (ctx->opts.arch) {
        if (strlen(ctx->opts.arch) >= sizeof ctx->arch || strncmp(ctx->opts.arch, "sm_", 3)) {
            st = error_set(SJ_ERR_INVALID_ARGUMENT, "opts.arch '%s': expected e.g. sm_80 or sm_90a", ctx->opts.arch);
            goto fail;
        }
        if (ctx->has_gpu && strcmp(ctx->opts.arch, ctx->info.arch)) {
            if (ctx->opts.require_gpu) {
                st = error_set(SJ_ERR_INVALID_ARGUMENT, "opts.arch '%s' differs from the GPU's %s (%s): kernels could not run",
                             ctx->opts.arch, ctx->info.arch, ctx->info.name);
                goto fail;
            }
            /* Another arch than the GPU's: a compile-only context, as on a machine without one. */
            snprintf(ctx->no_gpu_reason, sizeof ctx->no_gpu_reason,
                     "compile-only context for %s (the GPU, %s, is %s)", ctx->opts.arch, ctx->info.name, ctx->info.arch);
            cu.cuDevicePrimaryCtxRelease(ctx->device);
            ctx->cu_ctx = NULL;
            ctx->has_gpu = 0;
            memset(&ctx->info, 0, sizeof ctx->info);
            snprintf(ctx->info.no_gpu_reason, sizeof ctx->info.no_gpu_reason, "%s", ctx->no_gpu_reason);
        }
        snprintf(ctx->arch, sizeof ctx->arch, "%s", ctx->opts.arch);
    } else {
        snprintf(ctx->arch, sizeof ctx->arch, "%s", ctx->has_gpu ? ctx->info.arch : "sm_90a");
    }
    snprintf(ctx->info.arch, sizeof ctx->info.arch, "%s", ctx->arch);
    ctx->info.nvrtc_version = nvrtc_version_number();

    const char *tdir = ctx->opts.template_dir ? ctx->opts.template_dir : getenv("SPARSEJIT_TEMPLATE_DIR");
    snprintf(ctx->template_dir, sizeof ctx->template_dir, "%s", tdir ? tdir : "");

    const char *cache = ctx->opts.cache_path;
    if (!cache) {
        st = cache_default_path(ctx->cache_path, sizeof ctx->cache_path);
        if (st != SJ_OK) goto fail;
    } else {
        snprintf(ctx->cache_path, sizeof ctx->cache_path, "%s", cache);
    }
    if (ctx->cache_path[0]) open_caches(ctx);
    snprintf(ctx->info.cache_path, sizeof ctx->info.cache_path, "%s", ctx->cache_path);
    error_clear();
    *out = ctx;
    return SJ_OK;
fail:
    sj_context_destroy(ctx);
    return st;
}

sj_status sj_context_destroy(sj_context *ctx)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx) return SJ_OK;
    sj_status st = SJ_OK;
    if (ctx->has_gpu) cu.cuCtxSetCurrent(ctx->cu_ctx);
    for (int i = 0; i < ctx->n_kernels; i++) {
        if (ctx->kernels[i]->module && cu.cuModuleUnload(ctx->kernels[i]->module) != CUDA_SUCCESS)
            st = error_set(SJ_ERR_CUDA, "cuModuleUnload failed while destroying the context");
        free(ctx->kernels[i]);
    }
    free(ctx->kernels);
    if (ctx->scratch && cu.cuMemFree(ctx->scratch) != CUDA_SUCCESS)
        st = error_set(SJ_ERR_CUDA, "cuMemFree of the scratch buffer failed while destroying the context");
    kernel_table_free(&ctx->table);
    free(ctx->forced);
    cache_close(ctx->cache);
    for (int i = 0; i < ctx->n_shared; i++) cache_close(ctx->shared[i]);
    gen_close(ctx->gen);
    if (ctx->cu_ctx) cu.cuDevicePrimaryCtxRelease(ctx->device);
    free(ctx);
    return st;
}

sj_status sj_get_device_info(sj_context *ctx, sj_device_info *out)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_get_device_info: %s is NULL", !ctx ? "ctx" : "out");
    *out = ctx->info;
    return SJ_OK;
}

sj_status sj_get_stats(sj_context *ctx, sj_stats *out)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_get_stats: %s is NULL", !ctx ? "ctx" : "out");
    *out = ctx->stats;
    return SJ_OK;
}

sj_status sj_last_kernel_info(sj_context *ctx, sj_kernel_info *out)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_last_kernel_info: %s is NULL", !ctx ? "ctx" : "out");
    if (!ctx->last.source) return error_set(SJ_ERR_NOT_FOUND, "no op has run on this context yet");
    *out = ctx->last;
    return SJ_OK;
}

rt_caller_context rt_caller_context_enter(sj_context *ctx)
{
    rt_caller_context c = { NULL, 0 };
    /* Loads the driver first (once per process), so sj_context_create, which loads it, saves
     * the caller's context too. */
    if (cuda_load(NULL, 0) != SJ_OK || cu.cuCtxGetCurrent(&c.saved) != CUDA_SUCCESS) return c;
    c.known = 1;
    /* A failure here surfaces where a driver call needs the context (rt_require_gpu). */
    if (ctx && ctx->has_gpu && c.saved != ctx->cu_ctx) cu.cuCtxSetCurrent(ctx->cu_ctx);
    return c;
}

void rt_caller_context_restore(rt_caller_context *c)
{
    CUcontext now = NULL;
    /* A failure here has no status to go into: cuCtxSetCurrent to a context the caller had
     * current fails only if the caller destroyed it meanwhile. */
    if (c->known && cu.cuCtxGetCurrent(&now) == CUDA_SUCCESS && now != c->saved) cu.cuCtxSetCurrent(c->saved);
}

sj_status rt_require_gpu(sj_context *ctx, const char *what)
{
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    if (!ctx->has_gpu) return error_set(SJ_ERR_NO_GPU, "%s needs a GPU: %s", what, ctx->no_gpu_reason);
    CUresult r = cu.cuCtxSetCurrent(ctx->cu_ctx);
    if (r != CUDA_SUCCESS) return cuda_error(r, "cuCtxSetCurrent");
    return SJ_OK;
}

sj_status rt_generator(sj_context *ctx, gen_state **out)
{
    if (!ctx->gen) {
        sj_status st = gen_open(ctx->template_dir[0] ? ctx->template_dir : NULL, &ctx->gen);
        if (st != SJ_OK) return st;
        gen_set_target(ctx->gen, ctx->arch,
                       ctx->has_gpu ? (int)ctx->info.max_shared_per_block_optin : gen_arch_max_shared(ctx->arch),
                       ctx->has_gpu ? ctx->info.sm_count : 0);
    }
    *out = ctx->gen;
    return SJ_OK;
}

/* ------------------------------------------------------------------ memory */

sj_status sj_malloc(sj_context *ctx, size_t bytes, sj_devptr *out)
{
    RT_USE_CONTEXT(ctx);
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_malloc: out is NULL");
    *out = 0;
    if (!bytes) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_malloc: bytes must be > 0");
    sj_status st = rt_require_gpu(ctx, "sj_malloc");
    if (st != SJ_OK) return st;
    CUdeviceptr p;
    CUresult r = cu.cuMemAlloc(&p, bytes);
    if (r != CUDA_SUCCESS) {
        cuda_error(r, "cuMemAlloc");
        return error_prefix(r == CUDA_ERROR_OUT_OF_MEMORY ? SJ_ERR_OUT_OF_MEMORY : SJ_ERR_CUDA,
                               "sj_malloc(%zu bytes)", bytes);
    }
    *out = p;
    return SJ_OK;
}

sj_status rt_scratch(sj_context *ctx, size_t bytes, sj_devptr *out)
{
    if (ctx->scratch_bytes >= bytes) {
        *out = ctx->scratch;
        return SJ_OK;
    }
    sj_status st;
    if (ctx->scratch) {
        /* the kernels queued on it must finish before it goes */
        if ((st = sj_synchronize(ctx)) != SJ_OK) return st;
        CU_CHECK(cu.cuMemFree(ctx->scratch), "cuMemFree (scratch)");
        ctx->scratch = 0;
        ctx->scratch_bytes = 0;
    }
    sj_devptr p;
    if ((st = sj_malloc(ctx, bytes, &p)) != SJ_OK) return st;
    if ((st = sj_memset_u8(ctx, p, 0, bytes)) != SJ_OK) {
        sj_free(ctx, p);
        return st;
    }
    ctx->scratch = p;
    ctx->scratch_bytes = bytes;
    *out = p;
    return SJ_OK;
}

sj_status sj_free(sj_context *ctx, sj_devptr ptr)
{
    RT_USE_CONTEXT(ctx);
    if (!ptr) return SJ_OK;
    sj_status st = rt_require_gpu(ctx, "sj_free");
    if (st != SJ_OK) return st;
    CU_CHECK(cu.cuMemFree(ptr), "cuMemFree");
    return SJ_OK;
}

sj_status sj_memcpy_htod(sj_context *ctx, sj_devptr dst, const void *src, size_t bytes)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = rt_require_gpu(ctx, "sj_memcpy_htod");
    if (st != SJ_OK) return st;
    if (!dst || !src) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_memcpy_htod: %s is NULL", !dst ? "dst" : "src");
    CU_CHECK(cu.cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
    return SJ_OK;
}

sj_status sj_memcpy_dtoh(sj_context *ctx, void *dst, sj_devptr src, size_t bytes)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = rt_require_gpu(ctx, "sj_memcpy_dtoh");
    if (st != SJ_OK) return st;
    if (!dst || !src) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_memcpy_dtoh: %s is NULL", !dst ? "dst" : "src");
    CU_CHECK(cu.cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
    return SJ_OK;
}

sj_status sj_memset_u8(sj_context *ctx, sj_devptr dst, unsigned char value, size_t bytes)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = rt_require_gpu(ctx, "sj_memset_u8");
    if (st != SJ_OK) return st;
    if (!dst) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_memset_u8: dst is NULL");
    CU_CHECK(cu.cuMemsetD8(dst, value, bytes), "cuMemsetD8");
    return SJ_OK;
}

sj_status sj_synchronize(sj_context *ctx)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = rt_require_gpu(ctx, "sj_synchronize");
    if (st != SJ_OK) return st;
    CU_CHECK(cu.cuCtxSynchronize(), "cuCtxSynchronize (a kernel may have faulted)");
    return SJ_OK;
}

sj_status sj_set_config(sj_context *ctx, const sj_problem *problem, const char *config)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_set_config: ctx is NULL");
    sj_status st = sj_problem_validate(problem);
    if (st != SJ_OK) return st;
    sj_problem norm;
    op_normalize(problem, &norm);
    if (config && strlen(config) >= sizeof ctx->forced[0].config)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "config is longer than %zu characters", sizeof ctx->forced[0].config - 1);
    if (config && config[0]) { /* refused now, by the template, rather than at the next op call */
        const char *tname;
        gen_state *g;
        int valid = 0;
        char reason[512];
        if ((st = op_template(problem->op, &tname)) != SJ_OK || (st = rt_generator(ctx, &g)) != SJ_OK ||
            (st = gen_config_valid(g, tname, problem, config, &valid, reason, sizeof reason)) != SJ_OK)
            return error_prefix(st, "sj_set_config");
        if (!valid)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_set_config: config '%s' is not valid for this problem: %s", config,
                             reason);
    }
    for (int i = 0; i < ctx->n_forced; i++)
        if (!memcmp(&ctx->forced[i].problem, &norm, sizeof norm)) {
            if (config && config[0]) {
                snprintf(ctx->forced[i].config, sizeof ctx->forced[i].config, "%s", config);
            } else {
                ctx->forced[i] = ctx->forced[--ctx->n_forced];
            }
            return SJ_OK;
        }
    if (!config || !config[0]) return SJ_OK;
    if (ctx->n_forced == ctx->cap_forced) {
        int cap = ctx->cap_forced ? ctx->cap_forced * 2 : 8;
        void *p = realloc(ctx->forced, (size_t)cap * sizeof *ctx->forced);
        if (!p) return error_set(SJ_ERR_OUT_OF_MEMORY, "sj_set_config: out of memory");
        ctx->forced = p;
        ctx->cap_forced = cap;
    }
    ctx->forced[ctx->n_forced].problem = norm;
    snprintf(ctx->forced[ctx->n_forced].config, sizeof ctx->forced[0].config, "%s", config);
    ctx->n_forced++;
    return SJ_OK;
}
