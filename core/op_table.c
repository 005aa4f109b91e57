/* op_table.c: the one table of ops, and beside it the table of benchmarks that are not one op
 * (core/op.h's op_bench). Adding an op: its descriptor in ops/<family>/ and one line here
 * (docs/adding-an-op.md). The order is the CLI's and the docs' order. */
#include "core/op.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

/* Defined with their ops (ops/<family>/<family>_op.c). */
extern const op_desc op_gemm, op_vnm_spmm, op_vnm_compress, op_twell_gate, op_twell_ffn, op_vnm_dw, op_vnm_transpose,
    op_hybrid_gate, op_gmp_prune, op_hybrid_ffn_fwd, op_hybrid_ffn_dx, op_hybrid_ffn_dw, op_hybrid_transpose,
    op_vnm_dx;

static const op_desc *const table[] = {
    &op_gemm,
    &op_vnm_spmm,
    &op_twell_gate,
    &op_twell_ffn,
    &op_vnm_compress,
    &op_vnm_dw,
    &op_vnm_transpose,
    &op_vnm_dx,
    &op_hybrid_gate,
    &op_gmp_prune,
    &op_hybrid_ffn_fwd,
    &op_hybrid_ffn_dx,
    &op_hybrid_ffn_dw,
    &op_hybrid_transpose,
};

enum { N_OPS = sizeof table / sizeof *table };

/* Defined with their ops' family (ops/<family>/). */
extern const op_bench bench_twell_ffn_block, bench_vnm_train, bench_vnm_train_exact, bench_vnm_train_sparse_dx,
    bench_ffn_train;

static const op_bench *const benches[] = {
    &bench_twell_ffn_block,
    &bench_vnm_train,
    &bench_vnm_train_exact,
    &bench_vnm_train_sparse_dx,
    &bench_ffn_train,
};

enum { N_BENCHES = sizeof benches / sizeof *benches };

const op_desc *op_find(sj_op op)
{
    for (int i = 0; i < N_OPS; i++)
        if (table[i]->op == op) return table[i];
    return NULL;
}

const op_desc *op_find_name(const char *name)
{
    for (int i = 0; name && i < N_OPS; i++)
        if (!strcmp(table[i]->name, name)) return table[i];
    return NULL;
}

sj_status op_template(sj_op op, const char **name)
{
    const op_desc *d = op_find(op);
    if (!d) return error_set(SJ_ERR_INVALID_ARGUMENT, "no template for op %d: not one of %s", (int)op, op_names());
    *name = d->template_name;
    return SJ_OK;
}

int op_count(void) { return N_OPS; }

const op_desc *op_at(int i) { return i >= 0 && i < N_OPS ? table[i] : NULL; }

/* The names of the ops that pass (all when tunable_only is 0), comma separated, into buf. */
static void list_names(int tunable_only, char *buf, size_t len)
{
    size_t used = 0;
    for (int i = 0; i < N_OPS && used < len; i++)
        if (!tunable_only || table[i]->harness)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", table[i]->name);
}

const char *op_names(void)
{
    static _Thread_local char names[256];
    if (!names[0]) list_names(0, names, sizeof names);
    return names;
}

const char *op_tunable_names(void)
{
    static _Thread_local char names[256];
    if (!names[0]) list_names(1, names, sizeof names);
    return names;
}

const op_bench *op_bench_find_name(const char *name)
{
    for (int i = 0; name && i < N_BENCHES; i++)
        if (!strcmp(benches[i]->name, name)) return benches[i];
    return NULL;
}

int op_bench_count(void) { return N_BENCHES; }

const op_bench *op_bench_at(int i) { return i >= 0 && i < N_BENCHES ? benches[i] : NULL; }

const char *op_bench_names(void)
{
    static _Thread_local char names[256];
    if (!names[0]) {
        size_t used = 0;
        for (int i = 0; i < N_BENCHES && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", benches[i]->name);
    }
    return names;
}

void op_normalize(const sj_problem *p, sj_problem *out)
{
    memset(out, 0, sizeof *out);
    out->op = p->op;
    out->dtype = p->dtype;
    out->out_dtype = p->out_dtype;
    out->m = p->m;
    out->n = p->n;
    out->k = p->k;
    const op_desc *d = op_find(p->op);
    unsigned reads = d ? d->reads : 0;
    if (reads & OP_READS_VNM) {
        out->vnm_v = p->vnm_v;
        out->vnm_n = p->vnm_n;
        out->vnm_m = p->vnm_m;
    }
    if (reads & OP_READS_TWELL) {
        out->twell_tile = p->twell_tile;
        out->twell_capacity = p->twell_capacity;
        /* the cache keeps a winner per input law (sparsity, skew, dead): so must the table, or a
         * process would keep using the winner of the first sparsity it ran */
        out->twell_sparsity = p->twell_sparsity;
        out->twell_skew = p->twell_skew;
        out->twell_dead = p->twell_dead;
    }
    if (reads & OP_READS_D_FF) out->d_ff = p->d_ff;
    if (reads & OP_READS_LOWRANK) out->lowrank_rank = p->lowrank_rank;
}
