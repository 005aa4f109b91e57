/* kernel.c: the request path of one kernel (docs/architecture.md): in-process table, then the
 * SQLite cache, then template + NVRTC (stored back into the cache), then load and launch. */
#include "core/op.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "core/problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sj_status rt_cache_key(sj_context *ctx, const sj_problem *p, const char *tname, cache_key *key)
{
    memset(key, 0, sizeof *key);
    gen_state *g;
    sj_status st;
    if ((!tname && (st = op_template(p->op, &tname)) != SJ_OK) || (st = rt_generator(ctx, &g)) != SJ_OK) return st;
    if ((st = gen_template_hash(g, tname, key->template_hash)) != SJ_OK) return st;
    snprintf(key->gpu, sizeof key->gpu, "%s", ctx->has_gpu ? ctx->info.name : "");
    snprintf(key->arch, sizeof key->arch, "%s", ctx->arch);
    key->sm_count = ctx->info.sm_count;
    key->driver_version = ctx->info.driver_version;
    key->nvrtc_version = ctx->info.nvrtc_version;
    snprintf(key->template_name, sizeof key->template_name, "%s", tname);
    snprintf(key->op, sizeof key->op, "%s", sj_op_name(p->op));
    snprintf(key->dtype, sizeof key->dtype, "%s", sj_dtype_name(p->dtype));
    snprintf(key->out_dtype, sizeof key->out_dtype, "%s", sj_dtype_name(p->out_dtype));
    key->m = p->m;
    key->n = p->n;
    key->k = p->k;
    problem_key_text(p, key->sparsity, sizeof key->sparsity);
    return SJ_OK;
}

static sj_status remember(sj_context *ctx, loaded_kernel *k)
{
    if (ctx->n_kernels == ctx->cap_kernels) {
        int cap = ctx->cap_kernels ? ctx->cap_kernels * 2 : 16;
        void *p = realloc(ctx->kernels, (size_t)cap * sizeof *ctx->kernels);
        if (!p) return error_set(SJ_ERR_OUT_OF_MEMORY, "kernel list: out of memory");
        ctx->kernels = p;
        ctx->cap_kernels = cap;
    }
    ctx->kernels[ctx->n_kernels++] = k;
    return SJ_OK;
}

/* Loads a cubin into a new loaded_kernel owned by the context. */
static sj_status load_cubin(sj_context *ctx, const sj_problem *p, const cache_kernel *ck, const char *tname,
                            sj_kernel_source source, loaded_kernel **out)
{
    loaded_kernel *k = malloc(sizeof *k);
    if (!k) return error_set(SJ_ERR_OUT_OF_MEMORY, "loading kernel: out of memory");
    sj_status st = rt_module_load(ctx, p, ck, tname, source, k);
    if (st == SJ_OK && (st = remember(ctx, k)) != SJ_OK) rt_module_unload(k);
    if (st != SJ_OK) {
        free(k);
        return st;
    }
    *out = k;
    return SJ_OK;
}

sj_status rt_cached_kernel(sj_context *ctx, const cache_key *key, const char *config, cache_kernel *out,
                               const char **from)
{
    sj_status st = SJ_ERR_NOT_FOUND;
    for (int i = -1; i < ctx->n_shared && st == SJ_ERR_NOT_FOUND; i++) {
        cache_db *db = i < 0 ? ctx->cache : ctx->shared[i];
        if (db) st = cache_get_kernel(db, key, config, out);
        *from = i < 0 ? ctx->cache_path : "a shared cache";
    }
    return st;
}

sj_status rt_cached_winner(sj_context *ctx, const cache_key *key, cache_winner *out)
{
    sj_status st = SJ_ERR_NOT_FOUND;
    for (int i = -1; i < ctx->n_shared && st == SJ_ERR_NOT_FOUND; i++) {
        cache_db *db = i < 0 ? ctx->cache : ctx->shared[i];
        if (db) st = cache_get_winner(db, key, out);
    }
    return st;
}

sj_status rt_cached_config(sj_context *ctx, const sj_problem *p, char *config, size_t len, sj_config_origin *origin)
{
    config[0] = 0;
    *origin = SJ_CONFIG_DEFAULT;
    if (ctx->opts.tune_policy == SJ_TUNE_PINNED || !(ctx->cache || ctx->n_shared)) return SJ_OK;
    cache_key key;
    cache_winner w;
    sj_status st = rt_cache_key(ctx, p, NULL, &key);
    if (st == SJ_OK) st = rt_cached_winner(ctx, &key, &w);
    if (st == SJ_ERR_NOT_FOUND) return SJ_OK;
    if (st != SJ_OK) return st;
    gen_state *g;
    char canon[256];
    if ((st = rt_generator(ctx, &g)) != SJ_OK) return st;
    char why[512];
    int valid = 0;
    if (gen_canonical_config(g, key.template_name, p, w.config, canon, sizeof canon) != SJ_OK ||
        gen_config_valid(g, key.template_name, p, canon, &valid, why, sizeof why) != SJ_OK)
        snprintf(why, sizeof why, "%s", sj_last_error());
    if (!valid) {
        char desc[256];
        sj_problem_describe(p, desc, sizeof desc);
        rt_log(ctx, "the cached winner %s for %s is not valid for template %s (%s); using the template's default config",
               w.config, desc, key.template_name, why);
        return SJ_OK;
    }
    snprintf(config, len, "%s", w.config);
    *origin = SJ_CONFIG_TUNED;
    return SJ_OK;
}

sj_status rt_kernel_with_config(sj_context *ctx, const sj_problem *p, const char *tname, const char *config,
                                const loaded_kernel **out)
{
    const char *cfg = config ? config : "";
    loaded_kernel *k = cfg[0] ? kernel_table_get(&ctx->table, p, cfg) : NULL;
    if (k) {
        ctx->stats.table_hits++;
        *out = k;
        return SJ_OK;
    }
    sj_status st = rt_require_gpu(ctx, "loading a kernel");
    if (st != SJ_OK) return st;
    gen_state *g;
    if ((!tname && (st = op_template(p->op, &tname)) != SJ_OK) || (st = rt_generator(ctx, &g)) != SJ_OK) return st;
    char canon[256];
    if ((st = gen_canonical_config(g, tname, p, cfg, canon, sizeof canon)) != SJ_OK) return st;
    k = kernel_table_get(&ctx->table, p, canon);
    if (!k) {
        cache_key key;
        if ((st = rt_cache_key(ctx, p, tname, &key)) != SJ_OK) return st;
        cache_kernel ck;
        memset(&ck, 0, sizeof ck);
        sj_kernel_source source = SJ_FROM_CACHE;
        const char *from = ctx->cache_path;
        st = rt_cached_kernel(ctx, &key, canon, &ck, &from);
        if (st == SJ_OK) {
            ctx->stats.cache_hits++;
        } else {
            if (st != SJ_ERR_NOT_FOUND) rt_log(ctx, "cache lookup in %s failed, rebuilding: %s", from, sj_last_error());
            if (ctx->cache || ctx->n_shared) ctx->stats.cache_misses++;
            source = SJ_FROM_COMPILE;
            if ((st = rt_build(ctx, p, &key, canon, &ck)) != SJ_OK) return st;
        }
        st = load_cubin(ctx, p, &ck, tname, source, &k);
        free(ck.cubin);
        if (st != SJ_OK) return st;
        if ((st = kernel_table_put(&ctx->table, p, canon, k)) != SJ_OK) return st;
    } else {
        ctx->stats.table_hits++;
    }
    if (strcmp(canon, cfg) && cfg[0] && (st = kernel_table_put(&ctx->table, p, cfg, k)) != SJ_OK) return st;
    *out = k;
    return SJ_OK;
}

static const char *forced_config(const sj_context *ctx, const sj_problem *p)
{
    if (!ctx->n_forced) return NULL;
    sj_problem norm;
    op_normalize(p, &norm);
    for (int i = 0; i < ctx->n_forced; i++)
        if (!memcmp(&ctx->forced[i].problem, &norm, sizeof norm)) return ctx->forced[i].config;
    return NULL;
}

static void note_last(sj_context *ctx, const loaded_kernel *k, sj_kernel_source source, sj_config_origin origin)
{
    ctx->last.source = source;
    ctx->last.origin = origin;
    snprintf(ctx->last.config, sizeof ctx->last.config, "%s", k->config);
    snprintf(ctx->last.template_name, sizeof ctx->last.template_name, "%s", k->template_name);
}

/* The kernel that serves p from the request path (the table's "" slot), with its origin. */
static sj_status serve(sj_context *ctx, const sj_problem *p, loaded_kernel *k, sj_config_origin origin,
                       const loaded_kernel **out)
{
    k->origin = origin;
    sj_status st = kernel_table_put(&ctx->table, p, "", k);
    if (st != SJ_OK) return st;
    note_last(ctx, k, k->source, origin);
    *out = k;
    return SJ_OK;
}

/* A tuned winner the GPU cannot use (it fails to build or load: a corrupt cubin, a driver that
 * refuses it; or to launch: tuned on another GPU, a MIG slice): the template's default serves p
 * from now on, said once, since the table then holds the default. what: "load" or "launch". */
static sj_status serve_default_instead(sj_context *ctx, const sj_problem *p, const char *config, const char *what,
                                       const char *why, const loaded_kernel **out)
{
    char desc[256];
    sj_problem_describe(p, desc, sizeof desc);
    rt_log(ctx, "the tuned config %s for %s failed to %s (%s); using the template's default config", config, desc, what,
           why);
    const loaded_kernel *chosen;
    sj_status st = rt_kernel_with_config(ctx, p, NULL, "", &chosen);
    if (st != SJ_OK) return error_prefix(st, "the default config after the tuned %s failed to %s", config, what);
    return serve(ctx, p, (loaded_kernel *)chosen, SJ_CONFIG_DEFAULT, out);
}

sj_status rt_kernel_for(sj_context *ctx, const sj_problem *p, const loaded_kernel **out)
{
    const char *forced = forced_config(ctx, p);
    if (forced) {
        uint64_t hits = ctx->stats.table_hits;
        sj_status st = rt_kernel_with_config(ctx, p, NULL, forced, out);
        if (st == SJ_OK)
            note_last(ctx, *out, ctx->stats.table_hits > hits ? SJ_FROM_TABLE : (*out)->source, SJ_CONFIG_EXPLICIT);
        return st;
    }
    loaded_kernel *k = kernel_table_get(&ctx->table, p, "");
    if (k) { /* the hot path */
        ctx->stats.table_hits++;
        if (ctx->last.source != SJ_FROM_TABLE || ctx->last.origin != k->origin || strcmp(ctx->last.config, k->config))
            note_last(ctx, k, SJ_FROM_TABLE, k->origin);
        *out = k;
        return SJ_OK;
    }
    sj_status st = rt_require_gpu(ctx, "running an op");
    if (st != SJ_OK) return st;
    char config[256] = "";
    sj_config_origin origin = SJ_CONFIG_DEFAULT;
    if ((st = rt_cached_config(ctx, p, config, sizeof config, &origin)) != SJ_OK) return st;
    /* A conversion (not tunable) has a single config: nothing to tune. */
    if (origin == SJ_CONFIG_DEFAULT && ctx->opts.tune_policy == SJ_TUNE_ON_MISS && op_find(p->op)->tunable) {
        if (!ctx->tune_on_miss)
            return error_set(SJ_ERR_UNSUPPORTED, "SJ_TUNE_ON_MISS: this context has no tuner (create it with sj_context_create)");
        if ((st = ctx->tune_on_miss(ctx, p, config, sizeof config)) != SJ_OK) return st;
        origin = SJ_CONFIG_TUNED;
    }
    const loaded_kernel *chosen;
    st = rt_kernel_with_config(ctx, p, NULL, config, &chosen);
    if (st != SJ_OK && origin == SJ_CONFIG_TUNED) return serve_default_instead(ctx, p, config, "load", sj_last_error(), out);
    if (st != SJ_OK) return st;
    return serve(ctx, p, (loaded_kernel *)chosen, origin, out);
}

static CUresult launch_once(const loaded_kernel *k, void **args, void *stream)
{
    return cu.cuLaunchKernel(k->function, k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2],
                             k->shared_bytes, (CUstream)stream, args, NULL);
}

/* The errors a launch refuses for the kernel itself (its geometry or resources on this GPU and
 * driver), not for the device's state: another config of the same op may launch. */
static int refused_for_the_kernel(CUresult r)
{
    return r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
}

sj_status rt_launch(sj_context *ctx, const loaded_kernel *k, void **args, size_t n_args, void *stream)
{
    if (n_args < k->n_params)
        return error_set(SJ_ERR_UNSUPPORTED, "launching %s (config %s): the kernel takes %u parameters, the op passed %zu",
                         k->template_name, k->config, k->n_params, n_args);
    /* The context may be used from another thread than the one that created it. */
    CUcontext current = NULL;
    if (cu.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != ctx->cu_ctx) {
        CUresult r = cu.cuCtxSetCurrent(ctx->cu_ctx);
        if (r != CUDA_SUCCESS) return cuda_error(r, "cuCtxSetCurrent");
    }
    CUresult r = launch_once(k, args, stream);
    if (r != CUDA_SUCCESS && refused_for_the_kernel(r) && k->origin == SJ_CONFIG_TUNED &&
        kernel_table_get(&ctx->table, &k->problem, "") == k) {
        const char *name = NULL;
        cu.cuGetErrorName(r, &name);
        const loaded_kernel *def;
        sj_status st = serve_default_instead(ctx, &k->problem, k->config, "launch", name ? name : "?", &def);
        if (st != SJ_OK) return st;
        r = launch_once(def, args, stream);
    }
    if (r != CUDA_SUCCESS) return cuda_error(r, "cuLaunchKernel");
    ctx->stats.launches++;
    return SJ_OK;
}

sj_status rt_check_ptr(const char *name, sj_devptr p, unsigned alignment)
{
    if (!p) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s is a null device pointer", name);
    if (alignment && p % alignment)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s = 0x%llx is not %u-byte aligned", name,
                       (unsigned long long)p, alignment);
    return SJ_OK;
}
