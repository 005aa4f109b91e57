/* sparsejit.h: the one public header of libsparsejit.
 *
 * sparsejit generates sparse (and dense reference) GPU kernels from Lua templates at run time,
 * compiles them with NVRTC for the GPU in front of it, tunes them, and keeps the winners in an
 * SQLite cache. Every function returns an sj_status; sj_last_error() gives a thread-local
 * sentence that says what went wrong. Device memory is addressed with sj_devptr (a CUdeviceptr),
 * so callers need neither the CUDA runtime nor cuda.h to use the library.
 */
#ifndef SPARSEJIT_H
#define SPARSEJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SJ_VERSION_MAJOR 0
#define SJ_VERSION_MINOR 1
#define SJ_VERSION_PATCH 0

typedef enum sj_status {
    SJ_OK = 0,
    SJ_ERR_INVALID_ARGUMENT, /* an argument is NULL, out of range or inconsistent */
    SJ_ERR_UNSUPPORTED,      /* valid request, but no kernel/format path supports it */
    SJ_ERR_NO_GPU,           /* no libcuda, no device, or the context has no GPU */
    SJ_ERR_CUDA,             /* a CUDA driver call failed */
    SJ_ERR_NVRTC,            /* NVRTC could not compile the generated source */
    SJ_ERR_TEMPLATE,         /* a Lua template failed (message carries file:line) */
    SJ_ERR_CACHE,            /* the SQLite cache failed */
    SJ_ERR_NOT_FOUND,        /* the looked-up item does not exist */
    SJ_ERR_VERIFY,           /* a kernel produced a result that disagrees with the reference */
    SJ_ERR_OUT_OF_MEMORY,
    SJ_ERR_IO,               /* a file could not be read or written */
    SJ_ERR_PATTERN           /* a matrix does not satisfy the requested sparsity pattern */
} sj_status;

/* Thread-local description of the last failure on this thread ("" when none). */
const char *sj_last_error(void);
const char *sj_status_name(sj_status status);
const char *sj_version_string(void);

typedef enum sj_dtype {
    SJ_DTYPE_F16 = 1,
    SJ_DTYPE_BF16 = 2,
    SJ_DTYPE_F32 = 3
} sj_dtype;

const char *sj_dtype_name(sj_dtype dtype); /* "f16", "bf16", "f32"; NULL if unknown */
sj_status sj_dtype_parse(const char *name, sj_dtype *out);
size_t sj_dtype_size(sj_dtype dtype);      /* bytes per element; 0 if unknown */

typedef uint64_t sj_devptr;

/* ---------------------------------------------------------------- context and device */

typedef struct sj_context sj_context;

typedef enum sj_tune_policy {
    SJ_TUNE_NEVER = 0,    /* use the tuned winner if cached, else the template's default config */
    SJ_TUNE_ON_MISS = 1,  /* tune (budgeted search) the first time a shape has no tuned winner */
    SJ_TUNE_PINNED = 2    /* always the template's default config: identical kernels everywhere */
} sj_tune_policy;

typedef struct sj_context_options {
    const char *cache_path;    /* NULL: $SPARSEJIT_CACHE, else $XDG_CACHE_HOME/sparsejit/kernels.db,
                                  else ~/.cache/sparsejit/kernels.db; "" disables the cache */
    const char *template_dir;  /* NULL: $SPARSEJIT_TEMPLATE_DIR, else the templates built in */
    const char *arch;          /* NULL: the device's arch; else e.g. "sm_80", "sm_90a" (compile only) */
    int device_ordinal;        /* which GPU (default 0) */
    int require_gpu;           /* nonzero: fail with SJ_ERR_NO_GPU instead of a compile-only context */
    sj_tune_policy tune_policy;
} sj_context_options;

void sj_context_options_init(sj_context_options *opts);

/* Creates a context. Without a GPU (and require_gpu == 0) the context can still generate and
 * compile kernels for opts->arch (default "sm_90a"); launches then fail with SJ_ERR_NO_GPU. */
sj_status sj_context_create(const sj_context_options *opts, sj_context **out);
sj_status sj_context_destroy(sj_context *ctx);

typedef struct sj_device_info {
    int has_gpu;
    char no_gpu_reason[256]; /* why has_gpu == 0 */
    char name[256];
    char arch[16];           /* e.g. "sm_90a": the arch kernels are compiled for */
    int cc_major, cc_minor;
    int sm_count;
    int driver_version;      /* e.g. 13000 */
    int nvrtc_version;       /* major*1000 + minor*10, e.g. 13000 */
    size_t total_memory;
    size_t l2_bytes;
    size_t max_shared_per_block_optin;
    char cache_path[1024];   /* "" when the cache is disabled */
} sj_device_info;

sj_status sj_get_device_info(sj_context *ctx, sj_device_info *out);

/* Counters, for tests and for showing where time went. */
typedef struct sj_stats {
    uint64_t lua_generations;  /* template runs */
    uint64_t nvrtc_compiles;   /* NVRTC compilations */
    uint64_t cache_hits;       /* kernels loaded from SQLite */
    uint64_t cache_misses;
    uint64_t table_hits;       /* launches served from the in-process kernel table */
    uint64_t launches;
    double nvrtc_seconds;
    double lua_seconds;
} sj_stats;

sj_status sj_get_stats(sj_context *ctx, sj_stats *out);

/* Device memory, so callers need no CUDA runtime. */
sj_status sj_malloc(sj_context *ctx, size_t bytes, sj_devptr *out);
sj_status sj_free(sj_context *ctx, sj_devptr ptr);
sj_status sj_memcpy_htod(sj_context *ctx, sj_devptr dst, const void *src, size_t bytes);
sj_status sj_memcpy_dtoh(sj_context *ctx, void *dst, sj_devptr src, size_t bytes);
sj_status sj_memset_u8(sj_context *ctx, sj_devptr dst, unsigned char value, size_t bytes);
sj_status sj_synchronize(sj_context *ctx);

/* ---------------------------------------------------------------- problems and kernels */

typedef enum sj_op {
    SJ_OP_GEMM = 1,       /* C = A.B, dense, row-major */
    SJ_OP_VNM_SPMM = 2,   /* C = alpha * A_vnm . B + beta * C */
    SJ_OP_TWELL_GATE = 3, /* H = relu(X . Wg) written as TwELL */
    SJ_OP_TWELL_FFN = 4   /* Y = (TwELL(H) (.) (X . Wu)) . Wd */
} sj_op;

const char *sj_op_name(sj_op op); /* "gemm", "vnm-spmm", "twell-gate", "twell-ffn" */
sj_status sj_op_parse(const char *name, sj_op *out);

/* One kernel request: everything that selects a kernel except its tuning config. */
typedef struct sj_problem {
    sj_op op;
    sj_dtype dtype;     /* input dtype (f16 or bf16) */
    sj_dtype out_dtype; /* output dtype (f16, bf16 or f32) */
    int64_t m, n, k;    /* C is m x n, reduction over k */
    int vnm_v, vnm_n, vnm_m;        /* V:N:M for SJ_OP_VNM_SPMM */
    int twell_tile, twell_capacity; /* TwELL tile width T and per-tile capacity C */
    int64_t d_ff;                   /* FFN inner size for SJ_OP_TWELL_FFN */
} sj_problem;

void sj_problem_init(sj_problem *p, sj_op op, sj_dtype dtype, int64_t m, int64_t n, int64_t k);
sj_status sj_problem_validate(const sj_problem *p);
/* Writes a one-line description, e.g. "gemm f16->f16 4096x4096x4096". */
sj_status sj_problem_describe(const sj_problem *p, char *buf, size_t len);

/* Source of one kernel, as a template produced it. Free with sj_generated_free. */
typedef struct sj_generated {
    char *source;        /* CUDA C */
    char *entry;         /* kernel name */
    char *config;        /* canonical config, e.g. "BK=32,BM=128,BN=128,STAGES=3,WM=64,WN=64" */
    char *template_name;
    unsigned grid[3], block[3];
    unsigned shared_bytes;
} sj_generated;

/* Runs the op's template for problem and config ("" or NULL: the template's default). */
sj_status sj_generate(sj_context *ctx, const sj_problem *problem, const char *config,
                      sj_generated **out);
void sj_generated_free(sj_generated *g);

/* Compiles generated source with NVRTC for the context's arch; returns the cubin (free()). */
sj_status sj_compile(sj_context *ctx, const sj_generated *g, void **cubin, size_t *cubin_size,
                     char **log);

/* Which path gave the kernel used by the last op call on this context. */
typedef enum sj_kernel_source {
    SJ_FROM_TABLE = 1,   /* already loaded in this process */
    SJ_FROM_CACHE = 2,   /* cubin from SQLite */
    SJ_FROM_COMPILE = 3  /* generated and compiled now */
} sj_kernel_source;

typedef enum sj_config_origin {
    SJ_CONFIG_TUNED = 1,    /* the tuner's winner for this exact key */
    SJ_CONFIG_DEFAULT = 2,  /* no tuned winner: the template's heuristic default */
    SJ_CONFIG_EXPLICIT = 3  /* the caller named the config */
} sj_config_origin;

typedef struct sj_kernel_info {
    sj_kernel_source source;
    sj_config_origin origin;
    char config[256];
    char template_name[64];
} sj_kernel_info;

sj_status sj_last_kernel_info(sj_context *ctx, sj_kernel_info *out);

/* Forces a config for the next op calls with this problem ("" clears it). Used by bench/tune. */
sj_status sj_set_config(sj_context *ctx, const sj_problem *problem, const char *config);

/* ---------------------------------------------------------------- dense GEMM */

/* C[m x n] = A[m x k] . B[k x n], row-major, fp32 accumulation. A, B: problem->dtype;
 * C: problem->out_dtype. Pointers must be 16-byte aligned. stream: a CUstream or NULL. */
sj_status sj_gemm(sj_context *ctx, const sj_problem *problem, sj_devptr A, sj_devptr B,
                  sj_devptr C, void *stream);

/* ---------------------------------------------------------------- V:N:M (VENOM) sparse weights */
/* @@VNM_API@@ */

/* ---------------------------------------------------------------- TwELL activations and FFN */
/* @@TWELL_API@@ */

/* ---------------------------------------------------------------- tuner */
/* @@TUNER_API@@ */

#ifdef __cplusplus
}
#endif

#endif /* SPARSEJIT_H */
