/* op.h: the op table. One descriptor per op says what every layer needs to know of the op: its
 * name and template, which sj_problem fields it reads, its own validation and cache-key text,
 * whether it is tuned, and the harness that times and checks it. The runtime, the tuner, the CLI
 * and the Lua module look an op up here instead of switching on sj_op; adding an op is a folder
 * ops/<family>/ with its descriptor and one line in op_table.c (docs/adding-an-op.md). Beside the
 * ops, a table of benchmarks that are not one op's kernel (op_bench: the FFN block, a V:N:M
 * layer's training step).
 *
 * The descriptors live with their ops (ops/<family>/<family>_op.c), which sit above the runtime
 * they launch through; the table names them as data, and this floor calls into them only
 * through the pointers below, so nothing here includes anything above it. */
#ifndef SJ_CORE_OP_H
#define SJ_CORE_OP_H

#include <stddef.h>
#include "sparsejit.h"

typedef struct harness_ops harness_ops; /* tuner/harness.h: inputs, launch, reference, FLOPs, baseline */
typedef struct bench_ops bench_ops;     /* tuner/bench.h: a benchmark of several kernels */

/* The sj_problem fields an op reads beyond op, dtype, out_dtype, m, n, k. Fields an op does not
 * read are ignored (and zeroed where a problem is a key: the kernel table, forced configs). */
enum {
    OP_READS_VNM = 1,        /* vnm_v, vnm_n, vnm_m */
    OP_READS_TWELL = 2,      /* twell_tile, twell_capacity, twell_sparsity, twell_skew */
    OP_READS_D_FF = 4,       /* d_ff */
    OP_READS_LOWRANK = 8     /* lowrank_rank (sj_problem_validate refuses a rank the op does not read) */
};

/* One algorithm of an op's template, as the op table's walk (tests/test_op_table.c) compiles and
 * disassembles it: the config that selects it, the lowest target it runs on, and the machine
 * instructions that show it is the algorithm it claims to be. The walk checks every variant on
 * every target from its arch up; a kernel may drift to another unit (tensor cores to FFMA, TMA
 * to cp.async) and still be correct, so only its SASS tells. */
typedef struct op_variant {
    const char *name;        /* "pairs-tensor-cores" */
    /* What selects it, completed from the template's default for the target (named values
     * override it); NULL: the default itself. Must be valid for the op's example problem. */
    const char *config;
    const char *arch;        /* the lowest target: "sm_80" or "sm_90a" (refused below it) */
    const char *sass;        /* instruction substrings its SASS must all contain: "HGMMA,UTMALDG" */
    const char *sass_absent; /* ... and must not contain ("HMMA" of a CUDA-core variant); NULL: none */
    /* 1: the kernel keeps per-thread arrays it indexes by data in local memory (a stack frame,
     * LDL/STL by design); 0: no LDL/STL may occur, so a register spill fails the walk. */
    int local_arrays;
    /* The problem the walk generates it for; NULL: the op's example. For a variant that a
     * problem field selects rather than a config (vnm-spmm's low-rank tail, lowrank_rank > 0). */
    void (*example)(sj_problem *p);
} op_variant;

typedef struct op_desc {
    sj_op op;
    const char *name;              /* "vnm-spmm": sj_op_name, the CLI's --op, the cache key */
    const char *template_name;     /* "vnm_spmm": templates/<name>.lua */
    unsigned reads;                /* OP_READS_* */
    /* The arguments its entry points launch with (templates/README.md's ABI). A template's
     * kernel takes them or a prefix of them (twell-ffn's ALGO=0 and 1 read no tensor maps), never
     * more: the op table's walk counts every variant's parameters, and rt_launch refuses fewer
     * arguments than a loaded kernel's. 0: per kernel (gmp-prune's stages each have their own). */
    unsigned n_args;
    int tunable;                   /* 0: one config (a conversion), never tuned, also not on miss */
    /* The op's own checks, after the common ones (sizes, dtypes); NULL when it has none. Errors
     * name the field and the accepted range. */
    sj_status (*validate)(const sj_problem *p);
    /* The canonical text of the op's sparsity parameters in the cache key ("" when none). */
    void (*key_text)(const sj_problem *p, char *buf, size_t len);
    /* The front ends' (CLI, Lua) values for the op's parameters left unset (zero): V:N:M 64:2:8,
     * TwELL 128:16 at 99% sparsity. The library itself never fills them in. NULL: none. */
    void (*fill_defaults)(sj_problem *p);
    /* The sparsity as bench rows show it ("2:8", "0.99@T128:C16"); NULL: dense, "". */
    void (*label)(const sj_problem *p, char *buf, size_t len);
    /* Bytes of device workspace the op needs from a caller that provides it (sj_workspace_size):
     * the most any of its configs uses. NULL: the op needs none. */
    size_t (*workspace)(const sj_problem *p);
    /* The one harness of the op: what the tuner, `sparsejit bench`, Lua's sparsejit.bench and
     * sj_bench all time, check and count; NULL when not tunable (nothing benches it either). */
    const harness_ops *harness;
    /* What bench times the op against (its harness's baseline), one line of help; NULL with no
     * harness. */
    const char *baseline_help;
    /* A small valid problem of the op (compiles in seconds): what the walk generates each
     * variant for. */
    void (*example)(sj_problem *p);
    const op_variant *variants;    /* every algorithm its template chooses between (at least one) */
    int n_variants;
} op_desc;

/* The descriptor of op, NULL when op is not one. */
const op_desc *op_find(sj_op op);
/* The descriptor named name ("gemm", "vnm-spmm", ...), NULL when none is. */
const op_desc *op_find_name(const char *name);
/* The template of op (its descriptor's); SJ_ERR_INVALID_ARGUMENT naming op when it is not one. */
sj_status op_template(sj_op op, const char **name);
/* Every op, in the table's order: op_at(0) .. op_at(op_count() - 1). */
int op_count(void);
const op_desc *op_at(int i);
/* "gemm, vnm-spmm, ..." for error messages. */
const char *op_names(void);

/* The problem with the fields its op does not read zeroed: equal keys for equal requests. */
void op_normalize(const sj_problem *p, sj_problem *out);
/* "gemm, vnm-spmm, ..." of the ops with a harness: what the tuner tunes and bench times. */
const char *op_tunable_names(void);

/* A benchmark that is not one op's kernel (the FFN block: the gate, then the FFN over the TwELL
 * it wrote; a V:N:M layer's training step: forward, dX, dW): `sparsejit bench --op NAME` and Lua's sparsejit.bench run it as they run an op, its
 * parts one after the other through their entry points. It is not an op: no template, no cache
 * key, nothing to tune (the tuner tunes its parts). It takes a problem of one of its parts' ops,
 * from which it derives the others'. The table beside the op table lists them (op_table.c); the
 * descriptors live with their ops' family. */
typedef struct op_bench {
    const char *name;              /* "twell-ffn-block": not an op name */
    sj_op op;                      /* the op whose problem it takes (shape, d_ff, sparsity, ...) */
    const char *parts;             /* the tunable ops it runs, for messages: "twell-gate + twell-ffn" */
    const char *summary;           /* one line of help: what it times, against what */
    const bench_ops *ops;
} op_bench;

/* The benchmark named name, NULL when none is. */
const op_bench *op_bench_find_name(const char *name);
/* Every benchmark: op_bench_at(0) .. op_bench_at(op_bench_count() - 1). */
int op_bench_count(void);
const op_bench *op_bench_at(int i);
/* "twell-ffn-block, ..." for messages and help. */
const char *op_bench_names(void);

#endif
