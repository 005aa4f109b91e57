/* build.c: the one build path of a kernel: template -> CUDA source (Lua, on the context's
 * generator) -> NVRTC cubin -> the cache -> a loaded module. The request path (kernel.c), the
 * public sj_generate / sj_compile, the tuner's candidates (compiled on its own threads) and the
 * reference kernels all take these steps, so they count, store and load alike. */
#include "runtime/runtime.h"
#include "core/error.h"
#include "generator/nvrtc.h"
#include "core/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sj_status rt_generate(sj_context *ctx, const sj_problem *p, const char *tname, const char *config, sj_generated **out)
{
    gen_state *g;
    sj_status st = rt_generator(ctx, &g);
    if (st != SJ_OK) return st;
    double t0 = rt_seconds();
    if ((st = gen_generate(g, tname, p, config, out)) != SJ_OK) return st;
    ctx->stats.lua_generations++;
    ctx->stats.lua_seconds += rt_seconds() - t0;
    return SJ_OK;
}

sj_status build_compile(const sj_generated *g, const char *arch, cache_kernel *out, char **log)
{
    memset(out, 0, sizeof *out);
    snprintf(out->config, sizeof out->config, "%s", g->config);
    snprintf(out->entry, sizeof out->entry, "%s", g->entry);
    memcpy(out->grid, g->grid, sizeof out->grid);
    memcpy(out->block, g->block, sizeof out->block);
    out->shared_bytes = g->shared_bytes;
    return nvrtc_compile(g->source, g->entry, arch, &out->cubin, &out->cubin_size, log, &out->compile_seconds);
}

void rt_count_compile(sj_context *ctx, double seconds)
{
    ctx->stats.nvrtc_compiles++;
    ctx->stats.nvrtc_seconds += seconds;
}

sj_status rt_build(sj_context *ctx, const sj_problem *p, const cache_key *key, const char *config, cache_kernel *out)
{
    sj_generated *g = NULL;
    sj_status st = rt_generate(ctx, p, key->template_name, config, &g);
    if (st != SJ_OK) return st;
    st = build_compile(g, ctx->arch, out, NULL);
    rt_count_compile(ctx, out->compile_seconds);
    sj_generated_free(g);
    if (st != SJ_OK) return error_prefix(st, "compiling %s config %s", key->template_name, out->config);
    /* The kernel is good; a cache that cannot store it only costs a later compile. A read-only
     * one said so when it was opened. */
    if (ctx->cache && !cache_read_only(ctx->cache) && cache_put_kernel(ctx->cache, key, out) != SJ_OK)
        rt_log(ctx, "could not store kernel %s in %s: %s", key->template_name, ctx->cache_path, sj_last_error());
    return SJ_OK;
}

/* The parameter count of a loaded kernel: the indices the driver answers for. rt_launch holds
 * every launch to it, since cuLaunchKernel reads as many argument pointers as the kernel has. */
static sj_status count_params(CUfunction f, const char *entry, unsigned *out)
{
    enum { MAX_PARAMS = 256 };
    for (unsigned i = 0; i <= MAX_PARAMS; i++) {
        size_t offset, size;
        CUresult r = cu.cuFuncGetParamInfo(f, i, &offset, &size);
        if (r == CUDA_ERROR_INVALID_VALUE) {
            *out = i;
            return SJ_OK;
        }
        if (r != CUDA_SUCCESS) return cuda_error(r, "cuFuncGetParamInfo");
    }
    return error_set(SJ_ERR_UNSUPPORTED, "kernel %s has more than %d parameters", entry, MAX_PARAMS);
}

sj_status rt_module_load(sj_context *ctx, const sj_problem *p, const cache_kernel *ck, const char *tname,
                         sj_kernel_source source, loaded_kernel *out)
{
    memset(out, 0, sizeof *out);
    op_normalize(p, &out->problem);
    snprintf(out->config, sizeof out->config, "%s", ck->config);
    snprintf(out->template_name, sizeof out->template_name, "%s", tname);
    memcpy(out->grid, ck->grid, sizeof out->grid);
    memcpy(out->block, ck->block, sizeof out->block);
    out->shared_bytes = ck->shared_bytes;
    out->source = source;
    if (ck->shared_bytes > ctx->info.max_shared_per_block_optin)
        return error_set(SJ_ERR_UNSUPPORTED, "kernel %s (config %s) needs %u bytes of shared memory; %s allows %zu", ck->entry,
                         ck->config, ck->shared_bytes, ctx->info.name, ctx->info.max_shared_per_block_optin);
    CUresult r = cu.cuModuleLoadData(&out->module, ck->cubin);
    if (r != CUDA_SUCCESS) {
        out->module = NULL;
        return cuda_error(r, "cuModuleLoadData (cubin built for another arch or driver?)");
    }
    sj_status st = SJ_OK;
    if ((r = cu.cuModuleGetFunction(&out->function, out->module, ck->entry)) != CUDA_SUCCESS)
        st = cuda_error(r, "cuModuleGetFunction");
    else if (ck->shared_bytes > 48 * 1024 &&
             (r = cu.cuFuncSetAttribute(out->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        (int)ck->shared_bytes)) != CUDA_SUCCESS)
        st = cuda_error(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    if (st == SJ_OK) st = count_params(out->function, ck->entry, &out->n_params);
    if (st != SJ_OK) rt_module_unload(out);
    return st;
}

void rt_module_unload(loaded_kernel *k)
{
    if (k->module) cu.cuModuleUnload(k->module);
    k->module = NULL;
    k->function = NULL;
}

/* ------------------------------------------------------------------ the public entry points */

sj_status sj_generate(sj_context *ctx, const sj_problem *problem, const char *config, sj_generated **out)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_generate: %s is NULL", !ctx ? "ctx" : "out");
    *out = NULL;
    sj_status st = sj_problem_validate(problem);
    if (st != SJ_OK) return st;
    const char *tname;
    if ((st = op_template(problem->op, &tname)) != SJ_OK) return st;
    return rt_generate(ctx, problem, tname, config, out);
}

sj_status sj_compile(sj_context *ctx, const sj_generated *g, void **cubin, size_t *cubin_size, char **log)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !g || !cubin || !cubin_size)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_compile: ctx, generated source, cubin and cubin_size must be non-NULL");
    cache_kernel ck;
    sj_status st = build_compile(g, ctx->arch, &ck, log);
    rt_count_compile(ctx, ck.compile_seconds);
    *cubin = ck.cubin;
    *cubin_size = ck.cubin_size;
    return st;
}
