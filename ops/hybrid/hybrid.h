/* hybrid.h: the hybrid family's parts that its descriptor (hybrid_op.c) hangs together, and the
 * launch its entry points (hybrid_api.c) and its harness share. */
#ifndef SJ_OPS_HYBRID_H
#define SJ_OPS_HYBRID_H

#include "runtime/runtime.h"
#include "tuner/harness.h"

extern const harness_ops harness_hybrid_gate;                          /* hybrid_harness.c */
extern const harness_ops harness_hybrid_ffn_fwd, harness_hybrid_ffn_dx; /* hybrid_ffn_harness.c */
extern const harness_ops harness_hybrid_ffn_dw;                         /* hybrid_dw_harness.c */

/* SJ_OK when the device matrix has the layout the problem describes (rows = m, cols = n,
 * W = twell_capacity, dtype) and its arrays are allocated and aligned. */
sj_status hybrid_check_device(const sj_hybrid_device *H, const sj_problem *p, const char *what);
/* SJ_OK when layout l (named name in errors, e.g. "H") is valid and has the problem's rows = m,
 * cols = n, W = twell_capacity and dtype. */
sj_status hybrid_check_layout(const sj_hybrid_layout *l, const sj_problem *p, const char *name, const char *what);

/* Resets H's counts, counter, slots (-1) and backup on the stream, then launches a hybrid-gate
 * kernel with its ABI (X, WgT, values, columns, nnz, slot, owner, backup, counter, M, N, K, R). */
sj_status hybrid_gate_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X, sj_devptr WgT,
                             const sj_hybrid_device *H, void *stream);

/* What the forward stores for the backward beside H: u at H's active pairs (input dtype). */
typedef struct hybrid_saved_u {
    sj_devptr values, backup;     /* rows x W, backup_rows x d_ff */
} hybrid_saved_u;
/* What the backward of the activations leaves for the weight gradients (fp32). */
typedef struct hybrid_grads {
    sj_devptr dg_values, dg_backup, du_values, du_backup;
} hybrid_grads;

/* Launch a hybrid-ffn-fwd kernel with its ABI (X, H, WuT, Wd, Y, u, R, then ALGO=2's workspace
 * and TMA descriptors): the entry point and the harness share it. An L2-blocked kernel (SPLIT >
 * 0) is followed on the stream by its config's STAGE=1 kernel (the same for the dx), and so is
 * ALGO=2's listing by its pairs kernel; work (16-byte aligned, hybrid_ffn_workspace_of's bytes for
 * k's config: the caller sized it) holds ALGO=2's list, which its listing writes whole after
 * zeroing the pairs kernel's counters itself, so work's contents on entry do not matter; the
 * other kernels read no workspace (work may be 0). */
sj_status hybrid_ffn_fwd_launch(sj_context *ctx, const loaded_kernel *k, sj_devptr X, const sj_hybrid_device *H,
                                sj_devptr WuT, sj_devptr Wd, sj_devptr Y, const hybrid_saved_u *u, sj_devptr work,
                                void *stream);
/* Launch a hybrid-ffn-dx kernel with its ABI (dY, H, u, WgT, WuT, Wd, dX, grads, R, then ALGO=2's
 * workspace and TMA descriptors), its config's second kernel after it as for the fwd; work as
 * there (hybrid_pairs_plan at halves = 2). */
sj_status hybrid_ffn_dx_launch(sj_context *ctx, const loaded_kernel *k, sj_devptr dY, const sj_hybrid_device *H,
                               const hybrid_saved_u *u, sj_devptr WgT, sj_devptr WuT, sj_devptr Wd, sj_devptr dX,
                               const hybrid_grads *g, sj_devptr work, void *stream);

/* The integer value of parameter name in a canonical config ("ALGO=2,STAGE=0,..."), 0 when the
 * config does not name it. */
sj_status hybrid_config_value(const char *config, const char *name, int *value);

/* Bytes of workspace the hybrid-ffn-fwd, -dx or -dw kernel of config (canonical, as loaded) for
 * problem p needs over a matrix of layout l (H's): fwd and dx 0, or for ALGO=2
 * hybrid_pairs_plan's total (halves 1 for the fwd, 2 for the dx); dw the transpose's
 * (sj_hybrid_ffn_dw_workspace, hybrid_dw_plan) and, for BUSY = B > 0, hybrid_dw_busy_plan's total
 * at capacity B right after it. Pure arithmetic (hybrid_ffn_workspace.c): what
 * sj_hybrid_ffn_workspace answers for the kernel it resolves, what the entry points require of
 * the caller's workspace and the harnesses allocate. */
sj_status hybrid_ffn_workspace_of(const sj_problem *p, const char *config, const sj_hybrid_layout *l, size_t *bytes);
/* The bound sj_workspace_size gives (the descriptors' workspace): the most a kernel of any config
 * needs over any matrix of p's shape (a backup row for every token): fwd and dx ALGO=2's, dw the
 * transpose's and the busy buffers at the largest BUSY the template allows (HYBRID_DW_MAX_BUSY,
 * at most d_ff). */
size_t hybrid_ffn_workspace_bound(const sj_problem *p);
/* The entry points' check of the caller's workspace for the kernel k they will launch over H's
 * layout l (its alignment they check with the other pointers, before resolving k):
 * workspace_bytes at least hybrid_ffn_workspace_of's bytes, and workspace not 0 unless k needs
 * none. Errors start with what and name the argument, the bytes needed and k's config. */
sj_status hybrid_ffn_workspace_check(const loaded_kernel *k, const sj_hybrid_layout *l, sj_devptr workspace,
                                     size_t workspace_bytes, const char *what);

/* hybrid-ffn-fwd's and hybrid-ffn-dx's tensor-core variants (ALGO=2, templates/lib/hybrid_pairs.lua)
 * list H's pairs in a workspace before their pairs kernel: per row and unit tile a count and the
 * index of its first pair, and the pairs, two words each: (column in the tile << 16) | value bits,
 * and the pair's hybrid position (its ELL slot r W + i, or rows W + s cols + j in backup row s).
 * The workspace: the pairs kernel's own first (halves = 1 for the fwd, 2 for the dx, whose slots
 * are kept twice), then counts and starts (rows x ceil(cols / 256) ints each), then the list (a
 * pair a position: rows W + backup_rows cols). Byte offsets; pure arithmetic
 * (hybrid_pairs_list.c; the template computes the same). */
#define HYBRID_PAIRS_NO_POSITION 0xffffffffu /* an unplaced row's one NaN pair */
typedef struct hybrid_pairs_ws {
    size_t counts, starts, list, total;
    int64_t positions;          /* the list's capacity */
} hybrid_pairs_ws;
void hybrid_pairs_plan(int64_t rows, int64_t cols, int width, int64_t backup_rows, int halves, hybrid_pairs_ws *out);
/* The listing on the host, as the device's STAGE=0 writes it: counts and starts (rows x
 * ceil(cols / unit_tile), row-major) and the pairs of each row and tile in ascending columns at
 * list[2 start ..] (list: 2 words a position); unplaced overflow rows list one NaN pair of unit 0
 * with HYBRID_PAIRS_NO_POSITION. Entries of the list no row uses are left as they were. */
sj_status hybrid_pairs_list_host(const sj_hybrid_host *h, int unit_tile, int32_t *counts, int32_t *starts,
                                 uint32_t *list);

/* The gradients' outputs (d_ff x d_model each). */
typedef struct hybrid_weight_grads {
    sj_devptr dWgT, dWuT, dWd;
} hybrid_weight_grads;

/* n rounded up to 16 bytes: every buffer of the dw's workspace plans starts 16-byte aligned. */
static inline size_t hybrid_align16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The workspace of hybrid-ffn-dw's transpose for a matrix of rows x cols, W, backup_rows: byte
 * offsets of the token bitmaps and word prefixes (cols x ceil(rows / 32) words each), the list
 * starts (cols + 1 ints) and the list (pairs words, pairs = what the layout can hold), and the
 * total. Pure arithmetic (hybrid_ffn_workspace.c). */
typedef struct hybrid_dw_ws {
    size_t bits, wpre, start, list, total;
    int64_t words, pairs;       /* words of one bitmap or prefix array; the list's capacity */
} hybrid_dw_ws;
void hybrid_dw_plan(int64_t rows, int64_t cols, int width, int64_t backup_rows, hybrid_dw_ws *out);

/* templates/hybrid_ffn_dw.lua's largest BUSY (its BUSY_CAPACITIES; tests/test_hybrid_dw_busy.c
 * checks they agree): the bound sj_workspace_size gives for any config covers it. */
#define HYBRID_DW_MAX_BUSY 512

/* hybrid-ffn-dw's busy units (BUSY > 0 configs, templates/lib/hybrid_busy.lua; hybrid_dw_busy.c):
 * a unit is busy when at least hybrid_dw_busy_threshold(tokens) = ceil(tokens / 64) tokens are
 * active at it; the first `capacity` (= BUSY) busy units in ascending order get slots 0, 1, ...,
 * the others (busy ones past the capacity too) stay on CUDA cores. */
int64_t hybrid_dw_busy_threshold(int64_t tokens);
/* The selection on the host, as the device's stage 4 writes it from the same counts (d_ff token
 * counts): slot_of[j] (d_ff: the slot or -1), unit_of[s] (capacity + 1: the slot's unit, -1
 * past the count, then the count). */
void hybrid_dw_busy_select_host(const int64_t *counts, int64_t d_ff, int64_t tokens, int capacity, int32_t *slot_of,
                                int32_t *unit_of);
/* The busy units' buffers, byte offsets from one 16-byte aligned base: slot_of (d_ff ints),
 * unit_of (capacity + 1 ints), A (a_bytes: 3 capacity rows of tokens in the input dtype, rows s,
 * capacity + s and 2 capacity + s slot s's dg, du and a u; zero where the unit's token is
 * inactive) and C (3 capacity rows of d_model in the gradients' dtype: A . X for the first 2
 * capacity, A . dY for the last capacity), and the total. Pure arithmetic. */
typedef struct hybrid_dw_busy_ws {
    size_t slot_of, unit_of, a, a_bytes, c, total;
} hybrid_dw_busy_ws;
void hybrid_dw_busy_plan(int64_t tokens, int64_t d_ff, int64_t d_model, int capacity, size_t in_size, size_t out_size,
                         hybrid_dw_busy_ws *out);

/* The transpose of H into workspace (the hybrid-transpose stages, plan w), then the hybrid-ffn-dw
 * kernel k with its ABI: the entry point and the harness share it. A BUSY > 0 config also selects
 * the busy units, scatters their coefficients, runs the two GEMMs (the gemm op's kernels for the
 * shapes: rt_kernel_for) and copies their rows out, in the busy buffers (hybrid_dw_busy_plan at
 * k's BUSY) at workspace + w->total. workspace: 16-byte aligned, hybrid_ffn_workspace_of's bytes
 * for k's config (the caller sized it); what the kernels need zeroed (the bitmaps, the busy
 * coefficients) is zeroed on the stream first, the rest is written before it is read, so its
 * contents on entry do not matter. */
sj_status hybrid_ffn_dw_launch(sj_context *ctx, const loaded_kernel *k, sj_devptr X, sj_devptr dY,
                               const sj_hybrid_device *H, const hybrid_saved_u *u, const hybrid_grads *g,
                               const hybrid_weight_grads *out, sj_devptr workspace, const hybrid_dw_ws *w,
                               void *stream);

/* The memory accounting of the ffn-train benchmark (hybrid_train_bench.c; docs/training.md):
 * the bytes of activations a training step over hybrid activations keeps for its backward, H's
 * arrays (layout's total_bytes) and u at its pairs (rows x W + backup_rows x cols values of the
 * dtype), and those the dense step keeps, what PyTorch's autograd saves for the block beside X:
 * a = relu(g) (ReLU's output, also the product's input), u (the product's other input) and h
 * (the down projection's input), tokens x d_ff each in the dtype. */
int64_t hybrid_ffn_saved_bytes(const sj_hybrid_layout *layout);
int64_t hybrid_ffn_dense_saved_bytes(int64_t tokens, int64_t d_ff, sj_dtype dtype);

#endif
