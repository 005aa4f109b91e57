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

#include "sparsejit_version.h" /* SJ_VERSION_MAJOR/MINOR/PATCH, SJ_VERSION_STRING */

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden symbol visibility, so that only what this header declares is
 * exported from libsparsejit.so; SJ_API marks those functions. */
#if defined(__GNUC__) || defined(__clang__)
#define SJ_API __attribute__((visibility("default")))
#else
#define SJ_API
#endif

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
SJ_API const char *sj_last_error(void);
SJ_API const char *sj_status_name(sj_status status);
/* SJ_VERSION_STRING of the library as built: "major.minor.patch". */
SJ_API const char *sj_version_string(void);

/* The binary interface: bumped whenever a public struct, enum or signature changes, so a binding
 * that reaches the library through its C ABI (ctypes in python/) can refuse a library it does not
 * match. sj_abi_version() is the number the library was built with. */
#define SJ_ABI_VERSION 4
SJ_API int sj_abi_version(void);
/* sizeof of the public struct name ("sj_problem", "sj_context_options", "sj_device_info",
 * "sj_stats", "sj_generated", "sj_kernel_info", "sj_vnm_layout", "sj_vnm_host", "sj_vnm_device",
 * "sj_twell_layout", "sj_twell_host", "sj_twell_device",
 * "sj_hybrid_layout", "sj_hybrid_report", "sj_hybrid_host", "sj_hybrid_ffn_step",
 * "sj_hybrid_device", "sj_tune_progress", "sj_tune_options",
 * "sj_tune_trial", "sj_tune_result", "sj_bench_result", "sj_gmp_schedule", "sj_gmp_target") as the
 * library was built; a binding
 * compares it with its own layout. SJ_ERR_INVALID_ARGUMENT naming the known structs otherwise. */
SJ_API sj_status sj_struct_size(const char *name, size_t *out);

typedef enum sj_dtype {
    SJ_DTYPE_F16 = 1,
    SJ_DTYPE_BF16 = 2,
    SJ_DTYPE_F32 = 3
} sj_dtype;

SJ_API const char *sj_dtype_name(sj_dtype dtype); /* "f16", "bf16", "f32"; NULL if unknown */
SJ_API sj_status sj_dtype_parse(const char *name, sj_dtype *out);
SJ_API size_t sj_dtype_size(sj_dtype dtype);      /* bytes per element; 0 if unknown */

typedef uint64_t sj_devptr;

/* ---------------------------------------------------------------- context and device */

typedef struct sj_context sj_context;

typedef enum sj_tune_policy {
    SJ_TUNE_NEVER = 0,    /* use the tuned winner if cached, else the template's default config */
    SJ_TUNE_ON_MISS = 1,  /* tune (budgeted search) the first time a shape has no tuned winner */
    SJ_TUNE_PINNED = 2    /* always the template's default config: identical kernels everywhere */
} sj_tune_policy;

/* Receives diagnostics that are not errors (a cache that could not store a kernel, a corrupt
 * cache moved aside): one sentence, no trailing newline, valid only during the call. */
typedef void (*sj_log_fn)(void *user, const char *message);

typedef struct sj_context_options {
    const char *cache_path;    /* NULL: $SPARSEJIT_CACHE, else $XDG_CACHE_HOME/sparsejit/kernels.db,
                                  else ~/.cache/sparsejit/kernels.db; "" disables the cache (and
                                  the shared ones). A file this process cannot write is used
                                  read-only; one that cannot be opened at all leaves the context
                                  without a cache. Either is said once through log, and neither
                                  fails sj_context_create. $SPARSEJIT_CACHE_RO lists shared
                                  read-only caches (paths separated by ':') looked up after it. */
    const char *template_dir;  /* NULL: $SPARSEJIT_TEMPLATE_DIR, else the templates built in */
    const char *arch;          /* NULL: the device's arch; else e.g. "sm_80", "sm_90a" (compile only) */
    int device_ordinal;        /* which GPU (default 0): 0..count-1, else SJ_ERR_INVALID_ARGUMENT
                                  naming the range (a negative one on any machine); without a GPU
                                  it is unused (a compile-only context, or SJ_ERR_NO_GPU with
                                  require_gpu) */
    int require_gpu;           /* nonzero: fail with SJ_ERR_NO_GPU instead of a compile-only context */
    sj_tune_policy tune_policy;
    sj_log_fn log;             /* diagnostics that are not errors (a cache that could not store a
                                  kernel, a corrupt cache moved aside); NULL: dropped */
    void *log_user;            /* passed to log */
} sj_context_options;

SJ_API void sj_context_options_init(sj_context_options *opts);

/* Creates a context. Without a GPU (and require_gpu == 0) the context can still generate and
 * compile kernels for opts->arch (default "sm_90a"); launches then fail with SJ_ERR_NO_GPU.
 * sparsejit works on the device's primary context (the one the CUDA runtime, cuBLAS and PyTorch
 * use), making it current while a call needs it; every function that takes a context leaves the
 * calling thread's current context as it found it (yours, or none), so streams and pointers
 * passed in must belong to the primary context. */
SJ_API sj_status sj_context_create(const sj_context_options *opts, sj_context **out);
SJ_API sj_status sj_context_destroy(sj_context *ctx);

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

SJ_API sj_status sj_get_device_info(sj_context *ctx, sj_device_info *out);

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

SJ_API sj_status sj_get_stats(sj_context *ctx, sj_stats *out);

/* Device memory, so callers need no CUDA runtime. */
SJ_API sj_status sj_malloc(sj_context *ctx, size_t bytes, sj_devptr *out);
SJ_API sj_status sj_free(sj_context *ctx, sj_devptr ptr);
SJ_API sj_status sj_memcpy_htod(sj_context *ctx, sj_devptr dst, const void *src, size_t bytes);
SJ_API sj_status sj_memcpy_dtoh(sj_context *ctx, void *dst, sj_devptr src, size_t bytes);
SJ_API sj_status sj_memset_u8(sj_context *ctx, sj_devptr dst, unsigned char value, size_t bytes);
SJ_API sj_status sj_synchronize(sj_context *ctx);

/* ---------------------------------------------------------------- problems and kernels */

typedef enum sj_op {
    SJ_OP_GEMM = 1,       /* C = A.B, dense, row-major */
    SJ_OP_VNM_SPMM = 2,   /* C = alpha * A_vnm . B + beta * C */
    SJ_OP_TWELL_GATE = 3, /* H = relu(X . Wg) written as TwELL */
    SJ_OP_TWELL_FFN = 4,  /* Y = (TwELL(H) (.) (X . Wu)) . Wd */
    SJ_OP_VNM_COMPRESS = 5, /* dense A (m x k) -> V:N:M compressed, on the device */
    SJ_OP_VNM_DW = 6,       /* dW = dY . X^T at W_vnm's kept slots, into W's value layout */
    SJ_OP_VNM_TRANSPOSE = 7, /* compressed W (m x k) -> dense masked W^T (k x m), on the device */
    SJ_OP_HYBRID_GATE = 8,   /* H = relu(X . Wg) written in the hybrid format (training) */
    SJ_OP_GMP_PRUNE = 9,     /* one GMP pruning step of a dense W and its mask, on the device */
    SJ_OP_HYBRID_FFN_FWD = 10, /* u at H's active pairs, Y = (H (.) u) . Wd (training forward) */
    SJ_OP_HYBRID_FFN_DX = 11,  /* sampled dh, dg, du at H's active pairs, dX (training backward) */
    SJ_OP_HYBRID_FFN_DW = 12,  /* dWgT, dWuT, dWd from H's per-pair values (training backward) */
    SJ_OP_HYBRID_TRANSPOSE = 13, /* the per-unit token lists of a hybrid matrix, on the device */
    SJ_OP_VNM_DX = 14          /* dX = W_vnm^T . dY, exact, from W's compressed form (training) */
} sj_op;

/* "gemm", "vnm-spmm", "twell-gate", "twell-ffn", "vnm-compress", "vnm-dw", "vnm-transpose",
 * "hybrid-gate", "gmp-prune", "hybrid-ffn-fwd", "hybrid-ffn-dx", "hybrid-ffn-dw", "hybrid-transpose",
 * "vnm-dx" */
SJ_API const char *sj_op_name(sj_op op);
SJ_API sj_status sj_op_parse(const char *name, sj_op *out);

/* One kernel request: everything that selects a kernel except its tuning config. */
typedef struct sj_problem {
    sj_op op;
    sj_dtype dtype;     /* input dtype (f16 or bf16) */
    sj_dtype out_dtype; /* output dtype (f16, bf16 or f32) */
    int64_t m, n, k;    /* C is m x n, reduction over k */
    int vnm_v, vnm_n, vnm_m;        /* V:N:M for the vnm-* ops */
    int twell_tile, twell_capacity; /* TwELL tile width T (1..SJ_TWELL_MAX_TILE) and per-tile capacity C (1..T) */
    int64_t d_ff;                   /* FFN inner size for SJ_OP_TWELL_FFN */
    double twell_sparsity;          /* TwELL ops: the fraction of zeros the activations are expected
                                       to have, in [0, 1); 0: unspecified (tuning then generates
                                       C/(2T) non-zeros per tile). Timings depend on it, so tuning
                                       generates inputs at it and the cache key carries it: a winner
                                       tuned at 0.99 is not reused at 0.999. */
    double twell_skew;              /* TwELL ops: how unevenly the d_ff units fire in the inputs
                                       that tuning and bench generate: 0 (default): every unit
                                       alike, independently per token; A > 0: the unit of rank r
                                       (a random order) fires at a rate proportional to r^-A,
                                       capped at 0.5, with the mean still 1 - twell_sparsity, so
                                       tokens share their busy units as in trained models. In
                                       [0, SJ_TWELL_MAX_SKEW]; needs twell_sparsity >= 0.5; the
                                       cache key carries it. */
    double twell_dead;              /* TwELL and hybrid ops: the share of d_ff units that never
                                       fire in those inputs (a random set of round(dead x d_ff)
                                       units), the others firing as twell_skew says with their
                                       mean raised so the activations keep twell_sparsity, as
                                       trained models have dead units. In [0, SJ_TWELL_MAX_DEAD];
                                       > 0 needs twell_sparsity > 0 and (1 - twell_sparsity) /
                                       (1 - dead) <= 0.5; the cache key carries it. */
    int lowrank_rank;               /* vnm-spmm: the rank r of a low-rank term U . Z added in the
                                       same kernel (sj_vnm_spmm_lowrank); 0: none, else
                                       SJ_LOWRANK_MIN_RANK..SJ_LOWRANK_MAX_RANK, a multiple of 8.
                                       Other ops refuse a non-zero rank. */
} sj_problem;

#define SJ_LOWRANK_MIN_RANK 8
#define SJ_LOWRANK_MAX_RANK 128

#define SJ_TWELL_MAX_SKEW 4.0
#define SJ_TWELL_MAX_DEAD 0.9
/* The widest TwELL tile: a column within a tile must fit an entry's 16 index bits. */
#define SJ_TWELL_MAX_TILE 65536

SJ_API void sj_problem_init(sj_problem *p, sj_op op, sj_dtype dtype, int64_t m, int64_t n, int64_t k);
SJ_API sj_status sj_problem_validate(const sj_problem *p);
/* Writes a one-line description, e.g. "gemm f16->f16 4096x4096x4096". */
SJ_API sj_status sj_problem_describe(const sj_problem *p, char *buf, size_t len);

/* Bytes of device workspace the op of problem needs when the caller provides it (the *_ws entry
 * points): for twell-ffn the most any of its configs needs (4 x tokens x d_ff and a little
 * more), for vnm-compress the 8-byte pattern-violation word (padded to 16), for hybrid-ffn-fwd,
 * -dx and -dw the most any of their configs needs over any hybrid matrix of the problem's shape
 * (a backup row for every token; far more than sj_hybrid_ffn_workspace, which sizes the kernel
 * a call will launch for H's own layout), 0 for ops that need none. Pure arithmetic: no
 * context, no GPU. */
SJ_API sj_status sj_workspace_size(const sj_problem *problem, size_t *bytes);

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
SJ_API sj_status sj_generate(sj_context *ctx, const sj_problem *problem, const char *config,
                             sj_generated **out);
SJ_API void sj_generated_free(sj_generated *g);

/* Compiles generated source with NVRTC for the context's arch; returns the cubin (free()). */
SJ_API sj_status sj_compile(sj_context *ctx, const sj_generated *g, void **cubin, size_t *cubin_size,
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

SJ_API sj_status sj_last_kernel_info(sj_context *ctx, sj_kernel_info *out);

/* Forces a config for the next op calls with this problem ("" clears it). Used by bench/tune. A
 * config may name some of the parameters: the rest come from the target's default, or, where
 * that mix is invalid (the default's other parameters belong to another algorithm), from the
 * first of the template's preferred candidates (variants) with which it is valid. A config that
 * is not NAME=INTEGER pairs, names a parameter the op's template does not have, or
 * that the template finds invalid for the problem is refused with SJ_ERR_INVALID_ARGUMENT. */
SJ_API sj_status sj_set_config(sj_context *ctx, const sj_problem *problem, const char *config);

/* ---------------------------------------------------------------- dense GEMM */

/* C[m x n] = A[m x k] . B[k x n], row-major, fp32 accumulation. A, B: problem->dtype;
 * C: problem->out_dtype. Pointers must be 16-byte aligned. stream: a CUstream or NULL. */
SJ_API sj_status sj_gemm(sj_context *ctx, const sj_problem *problem, sj_devptr A, sj_devptr B,
                         sj_devptr C, void *stream);

/* ---------------------------------------------------------------- V:N:M (VENOM) sparse weights */
/* A V:N:M matrix A (rows x cols, the K of the SpMM) is cut into blocks of V rows by M columns.
 * Every block keeps the same 4 of its M columns, and inside those 4 each row keeps 2 (2:4), so
 * a block runs on sparse tensor cores; density 2/M (2:4 itself is V:2:4). Supported: V in
 * {16, 32, 64, 128}, N = 2, M in 4..128, f16 and bf16. cols need not be a multiple of M (the
 * last group is padded with zero columns) nor rows of V (padded with zero rows).
 *
 * The compressed form is laid out for the kernel (ops/vnm/vnm_format.h gives the exact order):
 * values: the 2 kept values of every row and group, in mma.sp m16n8k32 fragment order;
 * meta: their 2-bit positions in the block's 4 columns, one metadata word per lane;
 * index: per row block and group the 4 selected columns as B rows (-1: padding column). */

typedef enum sj_vnm_select {
    SJ_VNM_EXACT = 0,    /* A already has the pattern: compress losslessly, else SJ_ERR_PATTERN */
    SJ_VNM_PRUNE_L2 = 1, /* by magnitude: per block the 4 columns of largest L2 norm, then per
                            row the 2 of those 4 with largest |a| (ties: the lower column) */
    SJ_VNM_PRUNE_L1 = 2  /* the same with L1 column norms */
} sj_vnm_select;

/* Sizes of one compressed matrix; every other sj_vnm_* call takes it from here. */
typedef struct sj_vnm_layout {
    sj_dtype dtype;          /* f16 or bf16 */
    int v, n, m;             /* V:N:M */
    int64_t rows, cols;      /* the dense matrix */
    int64_t row_blocks;      /* ceil(rows / v) */
    int64_t groups;          /* ceil(cols / m): column groups of one row */
    int64_t k_tiles;         /* tiles of 32 gathered columns (8 groups) per row, padded to even */
    size_t values_bytes, meta_bytes, index_bytes;
} sj_vnm_layout;

/* Fills layout for a rows x cols matrix; SJ_ERR_INVALID_ARGUMENT naming the bad parameter. */
SJ_API sj_status sj_vnm_layout_init(sj_vnm_layout *layout, sj_dtype dtype, int v, int n, int m,
                                    int64_t rows, int64_t cols);

/* A compressed matrix in host memory. */
typedef struct sj_vnm_host {
    sj_vnm_layout layout;
    uint16_t *values;        /* values_bytes */
    uint32_t *meta;          /* meta_bytes */
    int32_t *index;          /* index_bytes */
} sj_vnm_host;

/* Compresses the dense row-major A (layout->dtype, lda >= cols elements per row) into out,
 * which it allocates (free with sj_vnm_host_free). SJ_VNM_EXACT fails with SJ_ERR_PATTERN and
 * a message that names the first offending block or row when A is not V:N:M. */
SJ_API sj_status sj_vnm_compress(const sj_vnm_layout *layout, const void *A, int64_t lda,
                                 sj_vnm_select select, sj_vnm_host *out);
/* SJ_OK when A satisfies the layout's V:N:M pattern, SJ_ERR_PATTERN (with where) otherwise. */
SJ_API sj_status sj_vnm_check(const sj_vnm_layout *layout, const void *A, int64_t lda);
/* Writes the dense rows x cols matrix (zeros where pruned). SJ_ERR_INVALID_ARGUMENT when the
 * compressed data is inconsistent (unsorted indices, bad metadata, values in padding). */
SJ_API sj_status sj_vnm_decompress(const sj_vnm_host *h, void *A, int64_t lda);
SJ_API void sj_vnm_host_free(sj_vnm_host *h);

/* A compressed matrix in device memory (same layout as the host form). */
typedef struct sj_vnm_device {
    sj_vnm_layout layout;
    sj_devptr values, meta, index;
} sj_vnm_device;

/* Allocates out and copies h into it. */
SJ_API sj_status sj_vnm_upload(sj_context *ctx, const sj_vnm_host *h, sj_vnm_device *out);
/* Allocates out (host) and copies d into it. */
SJ_API sj_status sj_vnm_download(sj_context *ctx, const sj_vnm_device *d, sj_vnm_host *out);
SJ_API sj_status sj_vnm_device_free(sj_context *ctx, sj_vnm_device *d);

/* The GPU compressor: A is dense row-major on the device (lda >= cols elements per row);
 * allocates out and fills it with exactly the bytes sj_vnm_compress would. It waits for the
 * stream (the kernel is compiled for the call), and SJ_VNM_EXACT reports a violation as
 * SJ_ERR_PATTERN naming the first offending block or row, as the host does. */
SJ_API sj_status sj_vnm_compress_device(sj_context *ctx, const sj_vnm_layout *layout, sj_devptr A,
                                        int64_t lda, sj_vnm_select select, sj_vnm_device *out,
                                        void *stream);

/* The GPU compressor into arrays the caller provides, for callers that own the memory (a
 * framework's allocator) and for CUDA-graph capture: out's values, meta and index must be
 * device arrays of out->layout's sizes (out->layout equal to *layout); workspace (16-byte
 * aligned, workspace_bytes >= sj_workspace_size of the vnm-compress problem: m = rows, n = 1,
 * k = cols) receives the pattern-violation word. The call allocates nothing and does not wait:
 * it sets the word on the stream, launches, and returns. For SJ_VNM_EXACT read the word's 8
 * bytes back after the stream and hand them to sj_vnm_pattern_status. */
SJ_API sj_status sj_vnm_compress_device_ws(sj_context *ctx, const sj_vnm_layout *layout, sj_devptr A,
                                           int64_t lda, sj_vnm_select select, const sj_vnm_device *out,
                                           sj_devptr workspace, size_t workspace_bytes, void *stream);
/* The meaning of a pattern-violation word the compressor wrote: SJ_OK when it found none,
 * SJ_ERR_PATTERN naming the first offending block or row of layout otherwise. */
SJ_API sj_status sj_vnm_pattern_status(const sj_vnm_layout *layout, uint64_t word);

/* The SJ_OP_VNM_SPMM problem of C = A . B with A of layout and B cols x n. */
SJ_API sj_status sj_vnm_problem(const sj_vnm_layout *layout, int64_t n, sj_dtype out_dtype,
                                sj_problem *out);
/* C[rows x n] = alpha * A . B + beta * C, fp32 accumulation, on sparse tensor cores. B is
 * cols x n row-major (problem->dtype), C row-major (problem->out_dtype); n must be a multiple
 * of 8, pointers 16-byte aligned. problem must match A's layout (see sj_vnm_problem).
 * beta == 0: C is not read. stream: a CUstream or NULL. */
SJ_API sj_status sj_vnm_spmm(sj_context *ctx, const sj_problem *problem, const sj_vnm_device *A,
                             sj_devptr B, sj_devptr C, float alpha, float beta, void *stream);
/* SLoPe's low-rank adapters in the same kernel: C = alpha * (A . B + U . Z) + beta * C, with
 * U rows x r and Z r x n row-major in problem->dtype (Z = V . B, the adapter's down-projection
 * of B, is the caller's: a small dense product, and autograd keeps it anyway), r =
 * problem->lowrank_rank (8..128, a multiple of 8; sj_vnm_problem leaves it 0: set it after).
 * The r columns of U are extra reduction columns of the sparse product, accumulated into the
 * same fp32 accumulators after its k loop, so C is written once. Otherwise as sj_vnm_spmm
 * (which refuses a problem with a rank). */
SJ_API sj_status sj_vnm_spmm_lowrank(sj_context *ctx, const sj_problem *problem, const sj_vnm_device *A,
                                     sj_devptr B, sj_devptr C, sj_devptr U, sj_devptr Z, float alpha, float beta,
                                     void *stream);

/* ---------------------------------------------------------------- V:N:M training */
/* A linear layer Y = W . X with W (out x in) in V:N:M, X in x T (T tokens), Y out x T, all
 * row-major (tokens contiguous), trains with three products: the forward Y (sj_vnm_spmm), the
 * input gradient dX = W^T . dY (in x T) and the weight gradient dW = dY . X^T, needed only where
 * W keeps values. The host functions here are the references of the device ones (below) and
 * work without a context.
 *
 * Double pruning (SLoPe): W^T is not V:N:M, so dX runs on a second compressed copy WT2 of W^T
 * (in x out, the same V:N:M), pruned again along its own rows. The rule is sj_vnm_compress's
 * SJ_VNM_PRUNE_L2 applied to the dense W^T that W stands for: per block of V rows of W^T (V
 * columns of W) and M columns (M rows of W) the 4 columns of largest sum of squares (fp64, rows
 * in order; ties: the lower column; real columns before padding), then per row the 2 of those 4
 * with the largest |value| (ties: the lower position). Every value of WT2 is W's value at the
 * transposed place, and WT2's non-zeros are a subset of W^T's: it drops values, never moves or
 * rescales one. The exact dX (dense W^T) is offered beside it. */

/* The layout of W^T (cols x rows of W's layout, same dtype and V:N:M): WT2's. */
SJ_API sj_status sj_vnm_transpose_layout(const sj_vnm_layout *W, sj_vnm_layout *out);
/* WT2 from W on the host, by the rule above; allocates out (free with sj_vnm_host_free). */
SJ_API sj_status sj_vnm_double_prune_host(const sj_vnm_host *W, sj_vnm_host *out);
/* The exact dX = W^T . dY on the host: dY out x tokens (W's dtype), dX in x tokens (out_dtype),
 * row-major, fp64 accumulation, rounded at the end (to fp32, then out_dtype; nearest even). */
SJ_API sj_status sj_vnm_dx_host(const sj_vnm_host *W, const void *dY, int64_t tokens, sj_dtype out_dtype,
                                void *dX);
/* The sampled weight gradient on the host: dW = dY . X^T at every slot W's compressed form keeps
 * (2 per row and column group, also slots whose value is zero), written in W's value layout
 * (ops/vnm/vnm_format.h's order, elements of out_dtype: values_bytes / 2 of them), so an optimizer
 * updates W's values in place; 0 in slots of padding rows or columns. dY out x tokens, X in x
 * tokens (W's dtype), fp64 accumulation over the tokens in order, rounded at the end (to fp32,
 * then out_dtype). */
SJ_API sj_status sj_vnm_dw_host(const sj_vnm_host *W, const void *dY, const void *X, int64_t tokens,
                                sj_dtype out_dtype, void *dW_values);

/* On the device. None of these allocates or waits on the stream: a training step built of them
 * (and sj_vnm_spmm) can be captured in a CUDA graph once its kernels are loaded. Pointers 16-byte
 * aligned; stream: a CUstream or NULL.
 *   forward:          sj_vnm_spmm on W (sj_vnm_problem(W, tokens)), B = X, C = Y;
 *   dX double-pruned: sj_vnm_double_prune once per weight update, then sj_vnm_spmm on WT2
 *                     (sj_vnm_problem(WT2, tokens)), B = dY, C = dX;
 *   dX exact:         sj_vnm_dx_exact (dense W^T, then the dense gemm; the default), or the
 *                     candidate sj_vnm_dx (from W's compressed form, 4/M of the dense work);
 *   dW:               sj_vnm_dw into a buffer of W's value layout. */

/* The SJ_OP_VNM_DW problem of dW for W of layout over tokens (m = rows, n = cols, k = tokens). */
SJ_API sj_status sj_vnm_dw_problem(const sj_vnm_layout *W, int64_t tokens, sj_dtype out_dtype, sj_problem *out);
/* dW = dY . X^T at W's kept slots into dW_values (W's value layout, as sj_vnm_dw_host writes it:
 * values_bytes / 2 elements of problem->out_dtype, 0 in padding slots), fp32 accumulation on
 * tensor cores. dY is rows x tokens, X cols x tokens (problem->dtype), tokens a multiple of 8.
 * Reads W's metadata and index only (W.values may be 0). */
SJ_API sj_status sj_vnm_dw(sj_context *ctx, const sj_problem *problem, const sj_vnm_device *W, sj_devptr dY,
                           sj_devptr X, sj_devptr dW_values, void *stream);
/* The dense masked W^T into WT (cols x rows of W's dtype, leading dimension ldt >= rows, 2-byte
 * aligned): W's values where it keeps them, 0 elsewhere; every element is written. */
SJ_API sj_status sj_vnm_transpose(sj_context *ctx, const sj_vnm_device *W, sj_devptr WT, int64_t ldt, void *stream);
/* Bytes of workspace sj_vnm_double_prune needs: the dense W^T and the compressor's word. */
SJ_API sj_status sj_vnm_double_prune_workspace(const sj_vnm_layout *W, size_t *bytes);
/* The double-pruned copy WT2 of W^T on the device into the caller's arrays (WT2->layout from
 * sj_vnm_transpose_layout): the dense W^T into the workspace, then the compressor by magnitude,
 * byte for byte what sj_vnm_double_prune_host writes. */
SJ_API sj_status sj_vnm_double_prune(sj_context *ctx, const sj_vnm_device *W, const sj_vnm_device *WT2,
                                     sj_devptr workspace, size_t workspace_bytes, void *stream);
/* The exact dX = W^T . dY: the dense W^T into WT (cols x rows, the caller's), then the dense
 * gemm (cols x tokens over rows, fp32 accumulation) into dX (cols x tokens, out_dtype); dY is
 * rows x tokens. */
SJ_API sj_status sj_vnm_dx_exact(sj_context *ctx, const sj_vnm_device *W, sj_devptr WT, sj_devptr dY, sj_devptr dX,
                                 int64_t tokens, sj_dtype out_dtype, void *stream);
/* The SJ_OP_VNM_DX problem of dX for W of layout over tokens (m = rows, n = cols, k = tokens). */
SJ_API sj_status sj_vnm_dx_problem(const sj_vnm_layout *W, int64_t tokens, sj_dtype out_dtype, sj_problem *out);
/* The exact dX = W^T . dY straight from W's compressed form (templates/vnm_dx.lua): per row
 * block of V rows, the kept values in the block's 4 selected columns of each group times dY's V
 * rows on dense tensor cores (4/M of the dense product's work), scattered into an fp32 tile per
 * CTA in a fixed order (deterministic). dY is rows x tokens (problem->dtype), dX cols x tokens
 * (problem->out_dtype), row-major, tokens a multiple of 8; every element of dX is written. Needs
 * no W^T and no workspace. A candidate: written without a GPU, not yet run on one, so
 * sj_vnm_dx_exact stays the default of every caller. */
SJ_API sj_status sj_vnm_dx(sj_context *ctx, const sj_problem *problem, const sj_vnm_device *W, sj_devptr dY, sj_devptr dX,
                           void *stream);

/* Gradual magnitude pruning (Zhu and Gupta) ending in a V:2:M pattern. At the pruning steps
 * t = start_step + j * interval, j = 0..n_steps, the target sparsity is
 *   s_t = s_f + (s_i - s_f) (1 - j / n_steps)^3,
 * s_i at the first and s_f at the last; between pruning steps it stays that of the last one, and
 * before start_step nothing is pruned. Between dense and the pattern, each pruning step takes
 * the sparsest V:2:M' pattern the target allows (the largest M' <= M with 1 - 2/M' <= s_t; none
 * while s_t < 1/2) and reaches the rest of s_t by unstructured magnitude pruning inside it:
 *   1. U = W (.) mask, the surviving weights;
 *   2. with a pattern: mask &= the slots sj_vnm_compress(U, V:2:M', SJ_VNM_PRUNE_L2) keeps;
 *   3. while fewer than ceil(s_t * rows * cols) positions are masked out, mask out the surviving
 *      position of smallest |w| (the 16-bit magnitude; ties: the lower row-major index);
 *   4. W = W (.) mask.
 * The mask only shrinks, every step from s_t >= 1/2 on runs on sparse tensor cores (V:2:M'),
 * and the last step leaves W a V:2:M matrix. */
typedef struct sj_gmp_schedule {
    double initial_sparsity; /* s_i in [0, s_f] */
    double final_sparsity;   /* s_f in [1 - 2/m, 1): the pattern's, or more by unstructured pruning */
    int64_t start_step;      /* >= 0 */
    int64_t interval;        /* steps between pruning steps, >= 1 */
    int64_t n_steps;         /* the pruning steps after the first, >= 1 */
    int v, m;                /* the final pattern V:2:M (V in {16, 32, 64, 128}, M in 4..128) */
} sj_gmp_schedule;

/* What the schedule asks at one training step. */
typedef struct sj_gmp_target {
    int prune_now;           /* 1 at a pruning step */
    double sparsity;         /* the target (0 before start_step) */
    int pattern_m;           /* M' of the V:2:M' pattern the mask lies in; 0: none (s < 1/2) */
} sj_gmp_target;

SJ_API sj_status sj_gmp_target_at(const sj_gmp_schedule *schedule, int64_t step, sj_gmp_target *out);
/* One training step's pruning on the host (nothing unless the step is a pruning step): W (rows x
 * cols, ldw, dtype f16/bf16) and mask (rows x cols bytes, ldm, 1 = kept; all ones before the
 * first step) are updated in place by the rule above. */
SJ_API sj_status sj_gmp_prune_host(const sj_gmp_schedule *schedule, int64_t step, sj_dtype dtype, int64_t rows,
                                   int64_t cols, void *W, int64_t ldw, uint8_t *mask, int64_t ldm);

/* One training step's pruning on the device, bit for bit sj_gmp_prune_host: W (rows x cols, ldw
 * elements, dtype f16/bf16) and mask (rows x cols bytes, ldm, 1 = kept) on the device, updated in
 * place (nothing unless the step is a pruning step). The pattern's slots come from vnm-compress
 * of the survivors by magnitude, the unstructured part from a histogram of the survivors'
 * magnitudes (templates/gmp_prune.lua). workspace: 16-byte aligned, workspace_bytes >=
 * sj_gmp_prune_workspace's; the call allocates nothing and does not wait (capturable once its
 * kernels are loaded). After it, re-compress both copies on the stream from the pruned W, no host
 * round trip: sj_vnm_compress_device_ws(W, V:2:M' of sj_gmp_target_at, SJ_VNM_PRUNE_L2) for the
 * forward copy (W lies in the pattern, so it keeps every non-zero) and sj_vnm_double_prune of it
 * for the dX copy; sj_gmp_recompress does both. */
SJ_API sj_status sj_gmp_prune_workspace(const sj_gmp_schedule *schedule, sj_dtype dtype, int64_t rows, int64_t cols,
                                        size_t *bytes);
SJ_API sj_status sj_gmp_prune(sj_context *ctx, const sj_gmp_schedule *schedule, int64_t step, sj_dtype dtype,
                              int64_t rows, int64_t cols, sj_devptr W, int64_t ldw, sj_devptr mask, int64_t ldm,
                              sj_devptr workspace, size_t workspace_bytes, void *stream);
/* Both compressed copies of the pruned dense W (rows x cols, ldw) on the device: fwd (layout
 * V:2:M' of W's size) by magnitude, then wt2 = its double-pruned W^T (layout
 * sj_vnm_transpose_layout of fwd's); workspace >= sj_vnm_double_prune_workspace of fwd's layout. */
SJ_API sj_status sj_gmp_recompress(sj_context *ctx, sj_devptr W, int64_t ldw, const sj_vnm_device *fwd,
                                   const sj_vnm_device *wt2, sj_devptr workspace, size_t workspace_bytes, void *stream);

/* ---------------------------------------------------------------- TwELL activations and FFN */
/* TwELL (tile-wise ELLPACK) holds a sparse activation matrix H, rows = tokens, cols = d_ff
 * (the ReLU gate of an FFN block). The columns are cut into tiles of T; per row and tile up to
 * C non-zeros are kept with their local column, plus the tile's true non-zero count:
 *   entries[(r * n_tiles + t) * C + i], i < min(count, C): (local column << 16) | value bits,
 *       ascending by column (the remaining slots of the tile are unspecified);
 *   counts[r * n_tiles + t]: the number of non-zeros in the tile; it MAY EXCEED C;
 *   spill[r * cols + c] (dense, 16-bit): holds the whole tile t of row r exactly when
 *       counts[r * n_tiles + t] > C; elsewhere unspecified.
 * A value is a non-zero when it is neither +0 nor -0. Overflow stays exact: every consumer
 * (sj_twell_to_dense, the FFN kernel) reads a tile whose count exceeds C from the spill, which
 * the gate kernel writes densely for that tile only. The spill costs rows * cols values of
 * memory (the dense size) but traffic only for overflowing tiles; choose C so that they are
 * rare (sj_twell_overflow_tiles counts them).
 *
 * The two ops of an FFN block y = (relu(x.Wg) (.) (x.Wu)).Wd, and their sj_problem fields:
 *   twell-gate: H = relu(X . Wg) written as TwELL in the GEMM's epilogue (no second pass).
 *               m = tokens, n = d_ff, k = d_model, twell_tile = T, twell_capacity = C,
 *               dtype = inputs and TwELL values (f16/bf16), out_dtype = dtype.
 *   twell-ffn:  Y = (H (.) (X . Wu)) . Wd from X, TwELL(H), Wu and Wd in one kernel.
 *               m = tokens, n = d_model (output), k = d_model (input; n == k), d_ff,
 *               twell_tile / twell_capacity of H, dtype = inputs, out_dtype = Y (f16/bf16/f32).
 * Weights are stored one row per d_ff unit, d_model contiguous (so the units a token activates
 * are contiguous rows):
 *   WgT: d_ff x d_model, row j = Wg[:, j];  WuT: d_ff x d_model, row j = Wu[:, j];
 *   Wd:  d_ff x d_model, row j = Wd[j, :].
 * X is tokens x d_model and Y tokens x d_model, row-major. d_model must be a multiple of 8
 * and every device pointer 16-byte aligned. fp32 accumulation throughout; the FFN rounds
 * h * u to the input dtype before the down projection, as the dense block does. */

typedef struct sj_twell_layout {
    sj_dtype dtype;          /* f16 or bf16 */
    int64_t rows, cols;      /* tokens x d_ff */
    int tile, capacity;      /* T and C: 1 <= C <= T <= 65536 */
    int64_t n_tiles;         /* ceil(cols / T) */
    size_t entries_bytes, counts_bytes, spill_bytes;
} sj_twell_layout;

/* Fills layout; SJ_ERR_INVALID_ARGUMENT naming the bad parameter. */
SJ_API sj_status sj_twell_layout_init(sj_twell_layout *layout, sj_dtype dtype, int64_t rows,
                                      int64_t cols, int tile, int capacity);

/* A TwELL matrix in host memory. */
typedef struct sj_twell_host {
    sj_twell_layout layout;
    uint32_t *entries;       /* entries_bytes */
    int32_t *counts;         /* counts_bytes */
    uint16_t *spill;         /* spill_bytes */
} sj_twell_host;

/* Converts the dense row-major H (layout->dtype, ld >= cols elements per row) into out, which
 * it allocates (free with sj_twell_host_free). Unused slots and the spill outside overflowing
 * tiles are zeroed, so equal inputs give equal bytes. n_overflow (may be NULL): the number of
 * tiles with more than C non-zeros. */
SJ_API sj_status sj_twell_from_dense(const sj_twell_layout *layout, const void *H, int64_t ld,
                                     sj_twell_host *out, int64_t *n_overflow);
/* Writes the dense rows x cols matrix (+0 where H has no non-zero). SJ_ERR_INVALID_ARGUMENT
 * naming the row and tile when the data is inconsistent (a count out of range, a column
 * outside the tile or past cols, columns not ascending, a stored zero, entries of an
 * overflowing tile that are not the first C non-zeros of its spill, a spill tile whose
 * non-zero count differs from counts). */
SJ_API sj_status sj_twell_to_dense(const sj_twell_host *h, void *H, int64_t ld);
/* Tiles with more than C non-zeros (read from the spill). */
SJ_API int64_t sj_twell_overflow_tiles(const sj_twell_host *h);
SJ_API void sj_twell_host_free(sj_twell_host *h);

/* A TwELL matrix in device memory (same layout as the host form). */
typedef struct sj_twell_device {
    sj_twell_layout layout;
    sj_devptr entries, counts, spill;
} sj_twell_device;

/* Allocates the three device arrays of layout (contents undefined until written). */
SJ_API sj_status sj_twell_device_alloc(sj_context *ctx, const sj_twell_layout *layout,
                                       sj_twell_device *out);
/* Allocates out and copies h into it. */
SJ_API sj_status sj_twell_upload(sj_context *ctx, const sj_twell_host *h, sj_twell_device *out);
/* Allocates out (host) and copies d into it (synchronous). */
SJ_API sj_status sj_twell_download(sj_context *ctx, const sj_twell_device *d, sj_twell_host *out);
SJ_API sj_status sj_twell_device_free(sj_context *ctx, sj_twell_device *d);

/* The problems of the gate GEMM and of the fused FFN over a TwELL matrix of layout, with
 * twell_sparsity unspecified (0): set it to the sparsity tuned for (`sparsejit tune --sparsity`,
 * 0.99 by default there) so the op finds that winner. */
SJ_API sj_status sj_twell_gate_problem(const sj_twell_layout *layout, int64_t d_model, sj_problem *out);
SJ_API sj_status sj_twell_ffn_problem(const sj_twell_layout *layout, int64_t d_model, sj_dtype out_dtype,
                                      sj_problem *out);

/* H = relu(X . Wg) as TwELL: X tokens x d_model, WgT d_ff x d_model (problem->dtype); H must
 * have the problem's layout (rows = m, cols = n, T, C, dtype). Every count, the first
 * min(count, C) entries of every tile and the spill of overflowing tiles are written.
 * The gate template needs T to divide its column tile (T a power of two, 8..256).
 * stream: a CUstream or NULL. */
SJ_API sj_status sj_twell_gate(sj_context *ctx, const sj_problem *problem, sj_devptr X, sj_devptr WgT,
                               const sj_twell_device *H, void *stream);
/* Y = (H (.) (X . Wu)) . Wd for tokens = problem->m: X tokens x d_model, H TwELL tokens x
 * d_ff (the problem's layout), WuT and Wd d_ff x d_model (problem->dtype), Y tokens x d_model
 * (problem->out_dtype). Only the d_ff units that tokens activate are computed: per block of
 * tokens (config ALGO=0) or per (token, unit) pair over large tiles (ALGO=1 on CUDA cores,
 * ALGO=2 on tensor cores, sm_90a only; both use a workspace of 4 * tokens * d_ff bytes and a
 * little more (tokens and d_ff rounded up to 512), allocated once per context and kept; two
 * such launches on one context must not run at the same time on different streams). Without a
 * config the template picks ALGO=2 on sm_90a for a declared twell_sparsity in [0.9, 0.998)
 * when its work items fill at least half the GPU's SMs (16 warps a block, else 8), else ALGO=0.
 * stream: a CUstream or NULL. */
SJ_API sj_status sj_twell_ffn(sj_context *ctx, const sj_problem *problem, sj_devptr X,
                              const sj_twell_device *H, sj_devptr WuT, sj_devptr Wd, sj_devptr Y,
                              void *stream);
/* sj_twell_ffn with the workspace from the caller instead of the context: workspace (16-byte
 * aligned, workspace_bytes >= sj_workspace_size(problem)) is read only by the pairs kernels
 * (ALGO=1, 2), which find it through a few counters that the call zeroes on the stream first,
 * so its contents on entry do not matter. The launch allocates nothing and never waits, so it
 * can be captured in a CUDA graph once the kernel is loaded (one call before capture; not under
 * SJ_TUNE_ON_MISS for a problem without a winner). Launches with distinct workspaces may run
 * concurrently on different streams. */
SJ_API sj_status sj_twell_ffn_ws(sj_context *ctx, const sj_problem *problem, sj_devptr X,
                                 const sj_twell_device *H, sj_devptr WuT, sj_devptr Wd, sj_devptr Y,
                                 sj_devptr workspace, size_t workspace_bytes, void *stream);

/* ---------------------------------------------------------------- hybrid activations (training) */
/* The hybrid format keeps a sparse activation matrix H (rows = tokens, cols = d_ff: the ReLU gate
 * of an FFN block) for the backward pass. Each row keeps up to W (the ELL width) non-zeros in a
 * compact ELL matrix; a row with more, an overflow row, also gets a row of a dense backup that
 * holds the rest of its non-zeros. No row is ever dropped: the backup grows (the host converter
 * grows it itself; on the device, sj_hybrid_report says how many rows it needed).
 *   nnz[r] (int32): the number of non-zeros of row r; it MAY EXCEED W.
 *   values[r * W + i], columns[r * W + i] (16-bit value bits, uint16 column), i < min(nnz[r], W):
 *       distinct columns, non-zero values, in any order (the host writes ascending columns, the
 *       gate kernel the order in which its thread blocks arrive); the other slots unspecified.
 *   slot[r] (int32): -1 when nnz[r] <= W; else the backup row s (0 <= s < backup_rows) holding
 *       row r's other nnz[r] - W non-zeros at their columns and zeros everywhere else, so that
 *       H[r] = the ELL entries + backup[s] with disjoint supports; owner[s] = r. An overflow
 *       row with slot -1 or >= backup_rows did not fit a full backup (unplaced; the gate kernel
 *       leaves the counter's value there): such a matrix is incomplete, and every reader refuses it.
 *   counter (int32): the number of overflow rows, placed or not: more than backup_rows means
 *       the backup was too small.
 * A value is a non-zero when it is neither +0 nor -0. Columns are 16-bit, so cols <= 65536.
 * Memory: rows x (4 W + 8) bytes plus backup_rows x (2 cols + 4): at 99% zeros of d_ff 11008 and
 * W = 128, 520 bytes a row against 22016 for the dense row. */

typedef struct sj_hybrid_layout {
    sj_dtype dtype;          /* f16 or bf16 */
    int64_t rows, cols;      /* tokens x d_ff; cols <= 65536 */
    int width;               /* W: 1 <= W <= cols */
    int64_t backup_rows;     /* the dense backup's capacity: 0 .. rows */
    size_t values_bytes, columns_bytes, nnz_bytes, slot_bytes, owner_bytes, backup_bytes, counter_bytes;
    size_t total_bytes;      /* all of the above */
} sj_hybrid_layout;

/* Fills layout (every size); SJ_ERR_INVALID_ARGUMENT naming the bad parameter and its range. */
SJ_API sj_status sj_hybrid_layout_init(sj_hybrid_layout *layout, sj_dtype dtype, int64_t rows, int64_t cols,
                                       int width, int64_t backup_rows);

/* Where the rows of a hybrid matrix went. */
typedef struct sj_hybrid_report {
    int64_t rows_ell;        /* rows with at most W non-zeros (empty rows too): ELL only */
    int64_t rows_backup;     /* overflow rows with a backup row */
    int64_t rows_unplaced;   /* overflow rows the backup had no room for (0 for a complete matrix) */
    int64_t backup_needed;   /* rows_backup + rows_unplaced: the backup that holds every row */
    int64_t nnz;             /* non-zeros in all */
    int64_t nnz_ell, nnz_backup;
} sj_hybrid_report;

/* A hybrid matrix in host memory. */
typedef struct sj_hybrid_host {
    sj_hybrid_layout layout;
    uint16_t *values, *columns;  /* rows x W */
    int32_t *nnz, *slot;         /* rows */
    int32_t *owner;              /* backup_rows */
    uint16_t *backup;            /* backup_rows x cols */
    int32_t counter;             /* overflow rows */
} sj_hybrid_host;

/* Converts the dense row-major H (layout->dtype, ld >= cols elements per row) into out, which it
 * allocates (free with sj_hybrid_host_free): the first W non-zeros of each row in ascending
 * columns in the ELL, the rest of an overflow row in the next backup row (rows in order). When
 * more rows overflow than layout->backup_rows, the backup grows to fit them all
 * (out->layout.backup_rows is then larger than layout's). Unused slots and backup rows are
 * zeroed, so equal inputs give equal bytes. report (may be NULL): where the rows went. */
SJ_API sj_status sj_hybrid_from_dense(const sj_hybrid_layout *layout, const void *H, int64_t ld,
                                      sj_hybrid_host *out, sj_hybrid_report *report);
/* Writes the dense rows x cols matrix (+0 where H has no non-zero). SJ_ERR_INVALID_ARGUMENT
 * naming the row when the data is inconsistent (a count out of range, a column past cols or
 * repeated, a stored zero, a slot out of range or not owned by its row, an unplaced overflow
 * row, a backup row whose non-zeros are not the row's other nnz - W or meet an ELL column). */
SJ_API sj_status sj_hybrid_to_dense(const sj_hybrid_host *h, void *H, int64_t ld);
/* Where the rows of h went (from nnz, slot and the counter; checks nothing else). */
SJ_API sj_status sj_hybrid_report_host(const sj_hybrid_host *h, sj_hybrid_report *report);
SJ_API void sj_hybrid_host_free(sj_hybrid_host *h);

/* A hybrid matrix in device memory (same arrays as the host form; counter is one int32).
 * owner and backup are 0 when layout.backup_rows is 0. */
typedef struct sj_hybrid_device {
    sj_hybrid_layout layout;
    sj_devptr values, columns, nnz, slot, owner, backup, counter;
} sj_hybrid_device;

/* Allocates the arrays of layout (contents undefined until written). */
SJ_API sj_status sj_hybrid_device_alloc(sj_context *ctx, const sj_hybrid_layout *layout, sj_hybrid_device *out);
/* Allocates out and copies h into it. */
SJ_API sj_status sj_hybrid_upload(sj_context *ctx, const sj_hybrid_host *h, sj_hybrid_device *out);
/* Allocates out (host) and copies d into it (synchronous). */
SJ_API sj_status sj_hybrid_download(sj_context *ctx, const sj_hybrid_device *d, sj_hybrid_host *out);
/* Replaces d's backup (and owner) by one of backup_rows rows (contents undefined): the growth of
 * a backup that was too small. The rest of d is kept. */
SJ_API sj_status sj_hybrid_device_grow(sj_context *ctx, sj_hybrid_device *d, int64_t backup_rows);
SJ_API sj_status sj_hybrid_device_free(sj_context *ctx, sj_hybrid_device *d);
/* Where the rows of d went (copies nnz, slot and the counter back; synchronous). */
SJ_API sj_status sj_hybrid_report_device(sj_context *ctx, const sj_hybrid_device *d, sj_hybrid_report *report);

/* The hybrid-gate problem writing a matrix of layout from d_model inputs: m = rows (tokens),
 * n = cols (d_ff), k = d_model, twell_tile = cols (a row is one tile), twell_capacity = W,
 * dtype = out_dtype = layout's; twell_sparsity unspecified (0): set it to the sparsity tuned for
 * so the op finds that winner. */
SJ_API sj_status sj_hybrid_gate_problem(const sj_hybrid_layout *layout, int64_t d_model, sj_problem *out);
/* H = relu(X . Wg) in the hybrid format, the partition decided on the GPU: X tokens x d_model,
 * WgT d_ff x d_model (problem->dtype, 16-byte aligned, d_model a multiple of 8); H of the
 * problem's layout. The call zeroes H's counts, counter and backup and sets its slots to -1 on
 * the stream, then launches the gate (templates/hybrid_gate.lua), whose epilogue writes the ELL,
 * claims backup rows with an atomic counter and writes overflow rows' rest there. Asynchronous:
 * when more rows overflow than the backup holds, the surplus rows are unplaced and every reader
 * refuses the matrix; sj_hybrid_report_device tells, sj_hybrid_gate_complete handles it. */
SJ_API sj_status sj_hybrid_gate(sj_context *ctx, const sj_problem *problem, sj_devptr X, sj_devptr WgT,
                                const sj_hybrid_device *H, void *stream);
/* sj_hybrid_gate, then the counter read back (synchronous); when rows were left unplaced the
 * backup grows to every overflow row (sj_hybrid_device_grow) and the gate runs again, so no row
 * is ever dropped. report (may be NULL): where the rows went; *relaunched (may be NULL): 1 when
 * the backup had to grow. */
SJ_API sj_status sj_hybrid_gate_complete(sj_context *ctx, const sj_problem *problem, sj_devptr X, sj_devptr WgT,
                                         sj_hybrid_device *H, sj_hybrid_report *report, int *relaunched,
                                         void *stream);

/* The problem of hybrid-ffn-fwd, hybrid-ffn-dx or hybrid-ffn-dw (op) over a matrix of layout (the gate's): m =
 * rows (tokens), n = k = d_model, d_ff = cols, twell_tile = cols, twell_capacity = W, dtype =
 * out_dtype = layout's (set out_dtype to f32 for fp32 outputs); twell_sparsity unspecified. */
SJ_API sj_status sj_hybrid_ffn_problem(const sj_hybrid_layout *layout, sj_op op, int64_t d_model, sj_problem *out);
/* Bytes of workspace the hybrid-ffn-fwd, hybrid-ffn-dx or hybrid-ffn-dw call (problem->op) of
 * problem over a matrix of layout (H's, as the gate left it: a grown backup included) needs: the
 * one size query for the workspace these three ops take from the caller. It resolves the kernel
 * exactly as the call does (the config forced by sj_set_config, else the cached tuned winner,
 * else the template's default; under SJ_TUNE_ON_MISS a problem without a winner is tuned), so
 * the first query of a problem may generate, compile and load (or tune) that kernel, as the
 * first call would, and needs a GPU (SJ_ERR_NO_GPU otherwise); once it is loaded the query is a
 * table lookup and arithmetic (no device work, no waiting). Ask again after sj_set_config,
 * sj_tune or anything else that changes the kernel. fwd, dx: 0 for the per-token and the
 * L2-blocked (SPLIT > 0) kernels; the tensor-core variant (ALGO=2) lists H's pairs there: about
 * 4 x tokens x d_ff bytes for the fwd (8 for the dx), tokens and units rounded up to 512, 8 bytes
 * a position H holds (rows x W + backup_rows x d_ff) and a little more. dw: sj_hybrid_ffn_dw_workspace(layout)
 * (the transpose) plus, for a BUSY = B > 0 config, the busy units' buffers, a16(4 d_ff) +
 * a16(4 (B + 1)) + a16(3 B tokens sj_dtype_size(dtype)) + a16(3 B d_model
 * sj_dtype_size(out_dtype)) bytes (a16: rounded up to 16; 38 MB at 8192 tokens, d_ff 11008,
 * d_model 4096, B = 512, bf16). */
SJ_API sj_status sj_hybrid_ffn_workspace(sj_context *ctx, const sj_problem *problem, const sj_hybrid_layout *layout,
                                         size_t *bytes);
/* The forward after sj_hybrid_gate (templates/hybrid_ffn_fwd.lua): for every active pair (t, j)
 * of H (a = relu(g) > 0) u = X[t] . WuT[j], a sampled product, written in the input dtype into
 * u_values (rows x W, at the pair's ELL slot) or u_backup (backup_rows x d_ff, at the pair's
 * backup position), nothing else of them; Y[t] = sum_j a u Wd[j] (problem->out_dtype). X, Y
 * tokens x d_model; WuT, Wd d_ff x d_model; row-major, 16-byte aligned, d_model a multiple of 8.
 * What the backward needs is H and u: W + backup positions, 6 bytes an ELL pair. An overflow row
 * that H left unplaced gets a NaN Y row. CUDA cores, one CTA per token; a config with ALGO=2
 * (sm_90a; not the default) runs it on tensor cores instead. workspace: the caller's, 16-byte
 * aligned, workspace_bytes >= sj_hybrid_ffn_workspace(problem, &H->layout) for the kernel the
 * call resolves (else SJ_ERR_INVALID_ARGUMENT naming workspace_bytes, the bytes needed and the
 * config); its contents on entry do not matter; 0 (with any workspace_bytes) when that is 0.
 * The call allocates nothing and never waits, so once its kernel is loaded (one call or query
 * before capture; not under SJ_TUNE_ON_MISS for a problem without a winner) it can be captured
 * in a CUDA graph, and calls with distinct workspaces may run concurrently on different streams
 * (the same for sj_hybrid_ffn_dx and sj_hybrid_ffn_dw). */
SJ_API sj_status sj_hybrid_ffn_fwd(sj_context *ctx, const sj_problem *problem, sj_devptr X, const sj_hybrid_device *H,
                                   sj_devptr WuT, sj_devptr Wd, sj_devptr Y, sj_devptr u_values, sj_devptr u_backup,
                                   sj_devptr workspace, size_t workspace_bytes, void *stream);
/* The backward through the activations (templates/hybrid_ffn_dx.lua), from dY (tokens x
 * d_model) and what the forward stored (H, u_values, u_backup): per active pair the sampled
 * dh = dY[t] . Wd[j], du = dh a and dg = dh u, written as fp32 into dg_values / du_values (rows x
 * W) or dg_backup / du_backup (backup_rows x d_ff) at the pair's position, nothing else of them;
 * dX[t] = sum_j dg WgT[j] + du WuT[j] (problem->out_dtype). The weight gradients are sums of
 * these compact values times rows of X and dY (docs/training.md). An unplaced row gets a NaN dX
 * row. workspace as sj_hybrid_ffn_fwd's (ALGO=2's list, its slots kept twice). Asynchronous. */
SJ_API sj_status sj_hybrid_ffn_dx(sj_context *ctx, const sj_problem *problem, sj_devptr dY, const sj_hybrid_device *H,
                                  sj_devptr u_values, sj_devptr u_backup, sj_devptr WgT, sj_devptr WuT, sj_devptr Wd,
                                  sj_devptr dX, sj_devptr dg_values, sj_devptr dg_backup, sj_devptr du_values,
                                  sj_devptr du_backup, sj_devptr workspace, size_t workspace_bytes, void *stream);

/* Bytes of the transpose's part of sj_hybrid_ffn_dw's workspace for a matrix of layout, all a
 * BUSY = 0 config (the default) needs: the transpose of its pairs (a token bitmap and a prefix
 * word per unit and 32 tokens, the units' list starts, and one 4-byte entry per pair it can hold:
 * min(rows x cols, rows x W + backup_rows x (cols - W))). sj_hybrid_ffn_workspace gives the
 * whole of what the kernel a call launches needs (a BUSY > 0 config's buffers on top). Pure
 * arithmetic. SJ_ERR_INVALID_ARGUMENT when the layout's positions (rows x W + backup_rows x
 * cols) pass 2^32 - 1. */
SJ_API sj_status sj_hybrid_ffn_dw_workspace(const sj_hybrid_layout *layout, size_t *bytes);
/* The three weight gradients from what the forward and sj_hybrid_ffn_dx stored, as sparse
 * products over H's active pairs only (templates/hybrid_ffn_dw.lua; docs/training.md):
 *   dWgT[j] = sum_t dg X[t],  dWuT[j] = sum_t du X[t],  dWd[j] = sum_t (a u) dY[t],
 * summed over the tokens t active at unit j in ascending token order, fp32 accumulation, so the
 * result is deterministic. X, dY tokens x d_model (problem->dtype); dWgT, dWuT, dWd d_ff x
 * d_model (problem->out_dtype: f16, bf16 or f32; every row written, zeros for a unit no token
 * activates); u_* as sj_hybrid_ffn_fwd wrote them, dg_* and du_* as sj_hybrid_ffn_dx did. The
 * call first builds the per-unit token lists in the workspace (16-byte aligned, workspace_bytes
 * >= sj_hybrid_ffn_workspace(problem, &H->layout) for the kernel the call resolves, else
 * SJ_ERR_INVALID_ARGUMENT naming workspace_bytes, the bytes needed and the config; its contents
 * on entry do not matter) with the hybrid-transpose kernels (a token bitmap per unit, zeroed on
 * the stream first, popcount prefix sums, then each pair placed at its rank: no atomics decide
 * an order), then runs the gradient kernel (CUDA cores, one CTA per block of units and d_model
 * slice). An incomplete H (its counter above backup_rows) gives NaN gradients. Allocates nothing,
 * never waits (capturable once the kernels are loaded, as sj_hybrid_ffn_fwd).
 * A config with BUSY = B > 0 (in the tuning space, not the default; not yet run on a GPU) sends
 * the busiest units to dense tensor-core GEMMs: the first B units in ascending order with at
 * least ceil(tokens / 64) active tokens (busy ones past B stay on CUDA cores) get their dg, du
 * and a u written densely (B x tokens each, zeros at inactive tokens) and ROUNDED TO THE INPUT
 * DTYPE, as a dense f16/bf16 backward rounds dG, dU and h (an f16 coefficient beyond 65504
 * becomes inf there too), then two gemm-op products over all tokens (fp32 accumulation; sums in
 * the GEMM's order, deterministic) give their rows; the other units' rows are the BUSY = 0
 * config's bytes. Being dense over every token, a busy unit's rows also see non-finite values of
 * X or dY at tokens where it is inactive. Its buffers (sj_hybrid_ffn_workspace counts them)
 * follow the transpose's in the same workspace; the dense coefficients are zeroed on the stream
 * first. */
SJ_API sj_status sj_hybrid_ffn_dw(sj_context *ctx, const sj_problem *problem, sj_devptr X, sj_devptr dY,
                                  const sj_hybrid_device *H, sj_devptr u_values, sj_devptr u_backup,
                                  sj_devptr dg_values, sj_devptr dg_backup, sj_devptr du_values, sj_devptr du_backup,
                                  sj_devptr dWgT, sj_devptr dWuT, sj_devptr dWd, sj_devptr workspace,
                                  size_t workspace_bytes, void *stream);

/* The training step of the ReLU FFN block y = Wd . (relu(Wg . x) (.) (Wu . x)) per token, in
 * fp64 on the host: the reference the device products are checked against (docs/training.md,
 * "Training with sparse activations", writes the autograd math out). Storage as the TwELL
 * ops': X and dY tokens x d_model; WgT, WuT, Wd d_ff x d_model (row j: unit j's weights), all
 * 16-bit of dtype, row-major. It runs the sparse formulation: the gate g = X . Wg is the only
 * dense product; everything else visits the active pairs (token t, unit j) with g > 0 only:
 *   forward  u = x . WuT[j], h = g u at active pairs; Y[t] = sum_j h Wd[j];
 *   backward dh = dY[t] . Wd[j] at active pairs only (a sampled product); du = dh g; dg = dh u;
 *            dX[t] = sum_j dg WgT[j] + du WuT[j];  dWgT[j] = sum_t dg X[t];
 *            dWuT[j] = sum_t du X[t];  dWd[j] = sum_t h dY[t].
 * Outputs in the layouts of the values they are gradients of (the caller's arrays, fp64). */
typedef struct sj_hybrid_ffn_step {
    double *Y, *dX;              /* tokens x d_model */
    double *dWgT, *dWuT, *dWd;   /* d_ff x d_model */
    int64_t active;              /* active (token, unit) pairs: g > 0 */
} sj_hybrid_ffn_step;

SJ_API sj_status sj_hybrid_ffn_step_host(sj_dtype dtype, int64_t tokens, int64_t d_model, int64_t d_ff,
                                         const void *X, const void *WgT, const void *WuT, const void *Wd,
                                         const void *dY, sj_hybrid_ffn_step *out);

/* ---------------------------------------------------------------- tuner */

/* Search strategies. EXHAUSTIVE measures every valid config of the template's space; RANDOM
 * measures a seeded random sample, then batches picked by a model fitted to the measurements so
 * far (an additive model of log time over the parameter values, refitted on a bootstrap resample
 * for each batch; half of each batch near the best config so far), within a budget of trials
 * and/or seconds. */
typedef enum sj_tune_strategy {
    SJ_TUNE_EXHAUSTIVE = 0,
    SJ_TUNE_RANDOM = 1
} sj_tune_strategy;

/* "exhaustive", "random"; NULL if unknown */
SJ_API const char *sj_tune_strategy_name(sj_tune_strategy s);
SJ_API sj_status sj_tune_strategy_parse(const char *name, sj_tune_strategy *out);

/* Handed to the progress callback after every finished candidate. */
typedef struct sj_tune_progress {
    int done;                /* candidates finished (measured or rejected) */
    int total;               /* candidates planned: the valid space or the trial budget; -1 unknown */
    int rejected;            /* failed to compile/load/launch, or disagreed with the reference */
    const char *config;      /* the candidate just finished */
    const char *status;      /* its status: "ok", "noisy", "compile-error", "wrong-result", ... */
    double median_us;        /* its median (0 when rejected) */
    const char *best_config; /* "" until one passes */
    double best_us;          /* 0 until one passes */
    double elapsed_s;
    double eta_s;            /* estimated seconds left; < 0 when unknown */
} sj_tune_progress;

/* Return nonzero to stop the search early (the best so far still wins and is stored). */
typedef int (*sj_tune_progress_fn)(void *user, const sj_tune_progress *progress);

typedef struct sj_tune_options {
    sj_tune_strategy strategy;
    int budget_trials;       /* RANDOM: candidates to measure (0: a quarter of the valid space,
                                16..256); EXHAUSTIVE: 0 = all, else the first N in stable order */
    double budget_seconds;   /* stop starting new candidates after this many seconds (0: no limit) */
    uint64_t seed;           /* RANDOM: the same seed samples the same candidates */
    double warmup_ms;        /* warm-up budget per candidate (default 25) */
    double rep_ms;           /* measurement budget per candidate (default 100) */
    int min_reps;            /* at least this many timed runs (default 10) */
    int threads;             /* NVRTC compile threads (0: online CPUs - 1, at least 1) */
    int save;                /* store trials and winner in the context's cache (default 1) */
    sj_tune_progress_fn progress;
    void *progress_user;
} sj_tune_options;

SJ_API void sj_tune_options_init(sj_tune_options *opts);

/* One measured candidate. */
typedef struct sj_tune_trial {
    char config[256];
    char status[32];         /* "ok", "noisy", "compile-error", "load-error", "launch-error",
                                "wrong-result" */
    double median_us, p20_us, p80_us;
    double tflops;
    double compile_seconds;
    double rel_error;        /* ||out - ref|| / ||ref|| of the correctness check (-1: not run) */
} sj_tune_trial;

typedef struct sj_tune_result {
    char config[256];        /* the winner */
    char template_name[64];
    char strategy[16];
    double median_us, p20_us, p80_us;
    double tflops;
    int space_size;          /* valid configs in the space; -1 when too large to count */
    int trials_done;         /* candidates finished */
    int trials_rejected;
    double seconds;          /* wall time of the whole tuning */
    double compile_seconds;  /* NVRTC time summed over candidates (spread over the threads) */
    int saved;               /* 1 when stored in the cache */
    int finalists;           /* the sweep's fastest configs re-timed side by side (the run-off) to
                                name the winner, whose times above come from it; 0: no run-off */
    sj_tune_trial *trials;   /* every trial in the order finished; free with sj_tune_result_free */
    int n_trials;
} sj_tune_result;

SJ_API void sj_tune_result_free(sj_tune_result *result);

/* Tunes the kernel of problem on the context's GPU: enumerates the template's valid configs,
 * compiles them on several threads while the GPU measures the compiled ones, rejects those that
 * disagree with an independent reference kernel, times the rest, then times the four fastest
 * again in interleaved rounds and picks the fastest of that run-off (ties within 0.5% go to the
 * first in the template's stable order). The trials and the winner are stored in the cache in one
 * transaction, and later op calls on any context with this cache use the winner. A context
 * without a cache stores nothing (result->saved = 0): apply the winner with sj_set_config.
 * opts NULL: defaults. SJ_ERR_VERIFY when no candidate passed. */
SJ_API sj_status sj_tune(sj_context *ctx, const sj_problem *problem, const sj_tune_options *opts,
                         sj_tune_result *result);

typedef struct sj_bench_result {
    double median_us, p20_us, p80_us;
    double tflops;
    double rel_error;        /* ||out - reference|| / ||reference|| of the checked launch */
    int reps;
    char config[256];        /* the kernel that was timed */
    sj_config_origin origin;
    sj_kernel_source source;
} sj_bench_result;

/* Times the kernel the op would use now for problem (forced, tuned or default config) with the
 * tuner's method: device events, L2 flushed between runs, warm-up and repetition budgets from
 * opts (NULL: defaults), median and 20/80% quantiles. Inputs, check and TFLOP/s are the tuner's
 * (the op's harness), as `sparsejit bench` has them, without its dense baseline. Before it times,
 * it checks the kernel's output against the tuner's reference (result->rel_error; twell-ffn: 16
 * sampled rows) and returns SJ_ERR_VERIFY, timing nothing, when the error exceeds the tuner's
 * tolerance. */
SJ_API sj_status sj_bench(sj_context *ctx, const sj_problem *problem, const sj_tune_options *opts,
                          sj_bench_result *result);

#ifdef __cplusplus
}
#endif

#endif /* SPARSEJIT_H */
