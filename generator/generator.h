/* generator.h: embedded, sandboxed Lua that loads kernel templates and turns a problem plus a
 * config into CUDA C source and launch geometry. Knows nothing of NVRTC, SQLite or the driver. */
#ifndef SJ_GENERATOR_H
#define SJ_GENERATOR_H

#include "sparsejit.h"

#include <stddef.h>

typedef struct gen_state gen_state;

#define GEN_MAX_PARAMS 16
#define GEN_MAX_VALUES 32

/* A template's tuning space for one problem: parameter names in the template's stable order,
 * and the candidate values of each. */
typedef struct gen_space {
    int n_params;
    char names[GEN_MAX_PARAMS][16];
    int n_values[GEN_MAX_PARAMS];
    int values[GEN_MAX_PARAMS][GEN_MAX_VALUES];
} gen_space;

/* template_dir: NULL uses the templates compiled into the library. */
sj_status gen_open(const char *template_dir, gen_state **out);
void gen_close(gen_state *g);

/* The sandbox's limits per template call: memory (bytes), Lua instructions plus pattern-matching
 * steps, and wall-clock milliseconds; 0 keeps the default (256 MiB, 500 million, 20 s). */
void gen_set_limits(gen_state *g, size_t memory_bytes, unsigned long long instructions, unsigned wall_ms);

/* The target the problem tables describe to templates: problem.arch ("sm_90a"), problem.SMEM
 * (dynamic shared memory a block may opt into, bytes) and problem.SMS (the device's SM count, 0
 * when there is no device; the cache key carries it). Default sm_90a, 232448, 0. */
void gen_set_target(gen_state *g, const char *arch, int max_shared_bytes, int sm_count);
/* Opt-in shared memory per block of an arch, for contexts without a GPU to ask. */
int gen_arch_max_shared(const char *arch);

/* sha256 (hex) over the template's source and every lib/ module: part of the cache key. */
sj_status gen_template_hash(gen_state *g, const char *template_name, char hex[65]);

sj_status gen_space_of(gen_state *g, const char *template_name, const sj_problem *p, gen_space *out);
/* 1 when cfg is valid for p, 0 with reason filled when not. */
sj_status gen_config_valid(gen_state *g, const char *template_name, const sj_problem *p,
                           const char *config, int *valid, char *reason, size_t reason_len);
sj_status gen_default_config(gen_state *g, const char *template_name, const sj_problem *p,
                             char *config, size_t len);
/* The best-known config of each of the template's variants (algorithms it chooses between by
 * a parameter, e.g. twell_ffn's ALGO), from its optional variants(problem), canonical, in the
 * template's order; a template without one has one variant, its default. The tuner measures
 * these first. At most max (SJ_ERR_TEMPLATE when the template returns more or none). */
#define GEN_MAX_VARIANTS 8
sj_status gen_variant_configs(gen_state *g, const char *template_name, const sj_problem *p, char configs[][256],
                              int max, int *n);
/* The full canonical config that `config` (possibly partial: named values override the
 * default) stands for. Unknown parameter names are refused. */
sj_status gen_canonical_config(gen_state *g, const char *template_name, const sj_problem *p,
                               const char *config, char *out, size_t len);
/* config NULL or "": the default. Output config is canonical (names sorted, "A=1,B=2"). */
sj_status gen_generate(gen_state *g, const char *template_name, const sj_problem *p,
                       const char *config, sj_generated **out);
/* Optional template functions flops(problem) / bytes(problem); 0 when the template has none. */
double gen_problem_flops(gen_state *g, const char *template_name, const sj_problem *p);

/* Config strings: "BM=128,BN=64" <-> name/value arrays. Canonical form sorts names. */
typedef struct gen_config {
    int n;
    char names[GEN_MAX_PARAMS][16];
    int values[GEN_MAX_PARAMS];
} gen_config;
sj_status gen_config_parse(const char *text, gen_config *out);
void gen_config_format(const gen_config *c, char *buf, size_t len); /* canonical */

#endif
