/* search.c: walks a template's tuning space without touching the GPU, so it is tested on the CPU.
 * Owns the stable candidate order (mixed radix over the template's params, values in declared
 * order, duplicates dropped), constraint pruning through a validity predicate, the exhaustive
 * strategy and the budgeted one (the template's default, a seeded random sample, then batches
 * picked by a model of the measurements so far), the visited set that keeps every candidate
 * unique, and the winner rules of the sweep and of the run-off (fastest; ties within noise go
 * to the stable order). */
#include "tuner/tuner.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: a tiny seeded generator whose sequence is the same on every platform. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *state, uint64_t n) { return rng_next(state) % n; }

/* ------------------------------------------------------------------ index <-> config */

static void index_digits(const search *s, uint64_t index, int digits[GEN_MAX_PARAMS])
{
    /* The first param is the most significant digit, so index order is the stable order. */
    for (int i = s->space.n_params - 1; i >= 0; i--) {
        digits[i] = (int)(index % (uint64_t)s->space.n_values[i]);
        index /= (uint64_t)s->space.n_values[i];
    }
}

static void index_config(const search *s, uint64_t index, gen_config *cfg, char *text, size_t len)
{
    int d[GEN_MAX_PARAMS];
    index_digits(s, index, d);
    memset(cfg, 0, sizeof *cfg);
    cfg->n = s->space.n_params;
    for (int i = 0; i < cfg->n; i++) {
        memcpy(cfg->names[i], s->space.names[i], sizeof cfg->names[i]);
        cfg->values[i] = s->space.values[i][d[i]];
    }
    gen_config_format(cfg, text, len);
}

static sj_status index_valid(search *s, uint64_t index, int *valid)
{
    gen_config cfg;
    char text[256];
    index_config(s, index, &cfg, text, sizeof text);
    *valid = 0;
    return s->valid(s->user, &cfg, text, valid);
}

/* The stable index of config text, if every param of the space is set to one of its values. */
static int config_index(const search *s, const char *text, uint64_t *index)
{
    gen_config c;
    if (!text || gen_config_parse(text, &c) != SJ_OK) return 0;
    uint64_t i = 0;
    for (int p = 0; p < s->space.n_params; p++) {
        int d = -1;
        for (int k = 0; k < c.n && d < 0; k++)
            if (!strcmp(c.names[k], s->space.names[p]))
                for (int v = 0; v < s->space.n_values[p]; v++)
                    if (s->space.values[p][v] == c.values[k]) {
                        d = v;
                        break;
                    }
        if (d < 0) return 0;
        i = i * (uint64_t)s->space.n_values[p] + (uint64_t)d;
    }
    *index = i;
    return 1;
}

/* ------------------------------------------------------------------ visited set */

static int set_has(const search *s, uint64_t index)
{
    size_t mask = s->set_cap - 1;
    for (size_t h = (size_t)((index + 1) * 0x9e3779b97f4a7c15ull) & mask;; h = (h + 1) & mask) {
        if (s->set_keys[h] == 0) return 0;
        if (s->set_keys[h] == index + 1) return 1;
    }
}

static sj_status set_add(search *s, uint64_t index)
{
    if ((size_t)(s->n_entries + 1) * 2 > s->set_cap) {
        size_t cap = s->set_cap * 2;
        uint64_t *keys = calloc(cap, sizeof *keys);
        if (!keys) return error_set(SJ_ERR_OUT_OF_MEMORY, "search: out of memory growing the visited set");
        for (size_t i = 0; i < s->set_cap; i++) {
            uint64_t k = s->set_keys[i];
            if (!k) continue;
            size_t h = (size_t)(k * 0x9e3779b97f4a7c15ull) & (cap - 1);
            while (keys[h]) h = (h + 1) & (cap - 1);
            keys[h] = k;
        }
        free(s->set_keys);
        s->set_keys = keys;
        s->set_cap = cap;
    }
    size_t mask = s->set_cap - 1;
    size_t h = (size_t)((index + 1) * 0x9e3779b97f4a7c15ull) & mask;
    while (s->set_keys[h]) h = (h + 1) & mask;
    s->set_keys[h] = index + 1;
    return SJ_OK;
}

/* Records index as issued and fills the candidate. The caller checked it is unvisited. */
static sj_status issue(search *s, uint64_t index, search_candidate *out)
{
    if (s->n_entries == s->cap_entries) {
        int cap = s->cap_entries ? s->cap_entries * 2 : 64;
        search_entry *e = realloc(s->entries, sizeof *e * (size_t)cap);
        if (!e) return error_set(SJ_ERR_OUT_OF_MEMORY, "search: out of memory for %d entries", cap);
        s->entries = e;
        s->cap_entries = cap;
    }
    sj_status st = set_add(s, index);
    if (st != SJ_OK) return st;
    search_entry *e = &s->entries[s->n_entries];
    memset(e, 0, sizeof *e);
    e->index = index;
    gen_config cfg;
    index_config(s, index, &cfg, e->config, sizeof e->config);
    out->id = s->n_entries++;
    out->index = index;
    memcpy(out->config, e->config, sizeof out->config);
    s->pending++;
    return SJ_OK;
}

/* ------------------------------------------------------------------ setup */

sj_status search_init(search *s, const gen_space *space, search_valid_fn valid, void *user,
                      const search_options *opts)
{
    if (!s || !space || !valid || !opts)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "search_init: s, space, valid and opts must be non-NULL");
    memset(s, 0, sizeof *s);
    if (space->n_params < 0 || space->n_params > GEN_MAX_PARAMS)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "search: space has %d params, expected 0..%d", space->n_params,
                       GEN_MAX_PARAMS);
    if (opts->strategy != SJ_TUNE_EXHAUSTIVE && opts->strategy != SJ_TUNE_RANDOM)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "search: strategy %d is neither exhaustive nor random",
                       (int)opts->strategy);
    if (opts->budget_trials < 0 || opts->budget_seconds < 0)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "search: budgets must be >= 0 (trials %d, seconds %g)",
                       opts->budget_trials, opts->budget_seconds);
    s->valid = valid;
    s->user = user;
    s->opts = *opts;
    s->rng = opts->seed;
    s->space.n_params = space->n_params;
    s->total = 1;
    for (int i = 0; i < space->n_params; i++) {
        memcpy(s->space.names[i], space->names[i], sizeof s->space.names[i]);
        if (space->n_values[i] < 1 || space->n_values[i] > GEN_MAX_VALUES)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "search: param %s has %d values, expected 1..%d",
                           space->names[i], space->n_values[i], GEN_MAX_VALUES);
        /* A value listed twice would be the same config twice: keep its first place. */
        int n = 0;
        for (int j = 0; j < space->n_values[i]; j++) {
            int dup = 0;
            for (int q = 0; q < n; q++) dup |= s->space.values[i][q] == space->values[i][j];
            if (!dup) s->space.values[i][n++] = space->values[i][j];
        }
        s->space.n_values[i] = n;
        if (s->total > ((uint64_t)1 << 62) / (uint64_t)n)
            return error_set(SJ_ERR_UNSUPPORTED, "search: the space of %d params is larger than 2^62 configs",
                           space->n_params);
        s->total *= (uint64_t)n;
    }
    s->set_cap = 128;
    s->set_keys = calloc(s->set_cap, sizeof *s->set_keys);
    s->batch = malloc(sizeof *s->batch * SEARCH_BATCH);
    if (!s->set_keys || !s->batch) {
        search_free(s);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "search: out of memory");
    }

    s->n_valid = -1;
    if (s->total <= SEARCH_MAX_ENUMERATE) {
        s->valid_list = malloc(sizeof *s->valid_list * (size_t)s->total);
        if (!s->valid_list) {
            search_free(s);
            return error_set(SJ_ERR_OUT_OF_MEMORY, "search: out of memory for %llu configs",
                           (unsigned long long)s->total);
        }
        s->n_valid = 0;
        for (uint64_t i = 0; i < s->total; i++) {
            int ok;
            sj_status st = index_valid(s, i, &ok);
            if (st != SJ_OK) {
                search_free(s);
                return st;
            }
            if (ok) s->valid_list[s->n_valid++] = i;
            else s->pruned++;
        }
        if (s->n_valid == 0) {
            unsigned long long total = (unsigned long long)s->total;
            search_free(s);
            return error_set(SJ_ERR_UNSUPPORTED, "search: none of the %llu configs of the space is valid for this problem",
                           total);
        }
    }

    int known = s->n_valid >= 0 ? s->n_valid : -1;
    if (opts->strategy == SJ_TUNE_EXHAUSTIVE) {
        s->budget = opts->budget_trials > 0 ? opts->budget_trials : (known >= 0 ? known : INT32_MAX);
    } else {
        /* Default: a quarter of the space, 16..256. tests/test_tuner_search.c replays two V:N:M
         * spaces measured on an H200 (1284 and 2568 configs): 256 trials land within 3% of the exhaustive
         * best for nearly every seed. */
        int dflt = known >= 0 ? (known + 3) / 4 : 256;
        if (dflt < 16) dflt = 16;
        if (dflt > 256) dflt = 256;
        s->budget = opts->budget_trials > 0 ? opts->budget_trials : dflt;
    }
    if (known >= 0 && s->budget > known) s->budget = known;
    /* Random strategy: a sample of at most 16 seeds the model; the model picks the rest. */
    s->n_random = s->budget / 2 < 16 ? s->budget - s->budget / 2 : 16;
    if (opts->strategy == SJ_TUNE_RANDOM && s->n_valid > 0) {
        s->shuffle = malloc(sizeof *s->shuffle * (size_t)s->n_valid);
        if (!s->shuffle) {
            search_free(s);
            return error_set(SJ_ERR_OUT_OF_MEMORY, "search: out of memory");
        }
        memcpy(s->shuffle, s->valid_list, sizeof *s->shuffle * (size_t)s->n_valid);
    }
    for (int i = 0; opts->strategy == SJ_TUNE_RANDOM && i < SEARCH_MAX_FIRST; i++)
        if (config_index(s, opts->first[i], &s->first_index[s->n_first])) s->n_first++;
    memset(s->opts.first, 0, sizeof s->opts.first); /* the caller's strings need not outlive this call */
    return SJ_OK;
}

void search_free(search *s)
{
    if (!s) return;
    free(s->batch);
    free(s->valid_list);
    free(s->shuffle);
    free(s->entries);
    free(s->set_keys);
    memset(s, 0, sizeof *s);
}

int search_planned(const search *s)
{
    if (s->budget == INT32_MAX) return -1;
    return s->budget;
}

/* ------------------------------------------------------------------ strategies */

/* Exhaustive: the next unvisited valid config in stable order. */
static sj_status next_in_order(search *s, int *found, uint64_t *index)
{
    *found = 0;
    if (s->valid_list) {
        while (s->cursor < (uint64_t)s->n_valid) {
            uint64_t i = s->valid_list[s->cursor++];
            if (!set_has(s, i)) {
                *index = i;
                *found = 1;
                return SJ_OK;
            }
        }
        return SJ_OK;
    }
    while (s->cursor < s->total) {
        uint64_t i = s->cursor++;
        if (set_has(s, i)) continue;
        int ok;
        sj_status st = index_valid(s, i, &ok);
        if (st != SJ_OK) return st;
        if (ok) {
            *index = i;
            *found = 1;
            return SJ_OK;
        }
        s->pruned++;
    }
    return SJ_OK;
}

/* opts.first in order, then a seeded uniform draw among the unvisited valid configs. */
static sj_status next_random(search *s, int *found, uint64_t *index)
{
    *found = 0;
    while (s->first_pos < s->n_first) {
        uint64_t i = s->first_index[s->first_pos++];
        int ok = 0;
        sj_status st = index_valid(s, i, &ok);
        if (st != SJ_OK) return st;
        if (ok && !set_has(s, i)) {
            *index = i;
            *found = 1;
            return SJ_OK;
        }
    }
    if (s->shuffle) {
        /* Incremental Fisher-Yates over the valid list: a permutation fixed by the seed. */
        while (s->random_drawn < s->n_valid) {
            uint64_t j = (uint64_t)s->random_drawn + rng_below(&s->rng, (uint64_t)(s->n_valid - s->random_drawn));
            uint64_t t = s->shuffle[s->random_drawn];
            s->shuffle[s->random_drawn] = s->shuffle[j];
            s->shuffle[j] = t;
            uint64_t i = s->shuffle[s->random_drawn++];
            if (!set_has(s, i)) {
                *index = i;
                *found = 1;
                return SJ_OK;
            }
        }
        return SJ_OK;
    }
    /* Too large to list: rejection sampling; a long run of misses means the valid configs left
     * are too sparse to find by chance, and the search stops there. */
    for (int attempt = 0; attempt < 4096; attempt++) {
        uint64_t i = rng_below(&s->rng, s->total);
        if (set_has(s, i)) continue;
        int ok;
        sj_status st = index_valid(s, i, &ok);
        if (st != SJ_OK) return st;
        if (ok) {
            *index = i;
            *found = 1;
            return SJ_OK;
        }
    }
    return SJ_OK;
}

/* ------------------------------------------------------------------ the model stage */

/* Parameter-value effects of an additive model of log(time), fitted by backfitting with a
 * ridge pull towards 0 on a bootstrap resample of the measured entries: refitting on another
 * resample for every batch (Thompson-style) keeps the search exploring instead of settling on
 * the first good region. */
typedef struct model {
    double mu;
    double effect[GEN_MAX_PARAMS][GEN_MAX_VALUES];
} model;

static double model_predict(const search *s, const model *m, const int d[GEN_MAX_PARAMS])
{
    double y = m->mu;
    for (int p = 0; p < s->space.n_params; p++) y += m->effect[p][d[p]];
    return y;
}

static sj_status model_fit(search *s, model *m)
{
    int n = 0;
    for (int i = 0; i < s->n_entries; i++) n += s->entries[i].finished && s->entries[i].time_us > 0;
    int *pick = malloc(sizeof *pick * (size_t)(n ? n : 1));
    int (*dig)[GEN_MAX_PARAMS] = malloc(sizeof *dig * (size_t)(n ? n : 1));
    double *y = malloc(sizeof *y * (size_t)(n ? n : 1));
    if (!pick || !dig || !y) {
        free(pick);
        free(dig);
        free(y);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "search: out of memory fitting the model");
    }
    int k = 0;
    for (int i = 0; i < s->n_entries; i++)
        if (s->entries[i].finished && s->entries[i].time_us > 0) pick[k++] = i;
    memset(m, 0, sizeof *m);
    for (int i = 0; i < n; i++) { /* the resample */
        const search_entry *e = &s->entries[pick[rng_below(&s->rng, (uint64_t)n)]];
        index_digits(s, e->index, dig[i]);
        y[i] = log(e->time_us);
        m->mu += y[i] / n;
    }
    const double ridge = 1.0;
    for (int iter = 0; iter < 10; iter++) {
        for (int p = 0; p < s->space.n_params; p++) {
            double sum[GEN_MAX_VALUES] = { 0 };
            int count[GEN_MAX_VALUES] = { 0 };
            for (int i = 0; i < n; i++) {
                sum[dig[i][p]] += y[i] - model_predict(s, m, dig[i]) + m->effect[p][dig[i][p]];
                count[dig[i][p]]++;
            }
            for (int v = 0; v < s->space.n_values[p]; v++) m->effect[p][v] = sum[v] / (count[v] + ridge);
        }
    }
    free(pick);
    free(dig);
    free(y);
    return SJ_OK;
}

typedef struct scored { double score; uint64_t index; } scored;

static int by_score(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index); /* stable order breaks ties */
}

static int hamming(const search *s, uint64_t a, uint64_t b)
{
    int da[GEN_MAX_PARAMS], db[GEN_MAX_PARAMS], h = 0;
    index_digits(s, a, da);
    index_digits(s, b, db);
    for (int p = 0; p < s->space.n_params; p++) h += da[p] != db[p];
    return h;
}

/* The unvisited valid configs the model may pick from: all of them when the space is listed,
 * else a seeded sample of the space. */
static sj_status candidate_pool(search *s, scored **out, int *n_out)
{
    int cap = s->valid_list ? s->n_valid : 4096, n = 0;
    scored *pool = malloc(sizeof *pool * (size_t)(cap ? cap : 1));
    if (!pool) return error_set(SJ_ERR_OUT_OF_MEMORY, "search: out of memory for %d candidates", cap);
    if (s->valid_list) {
        for (int i = 0; i < s->n_valid; i++)
            if (!set_has(s, s->valid_list[i])) pool[n++].index = s->valid_list[i];
    } else {
        for (int attempt = 0; attempt < 4 * cap && n < cap; attempt++) {
            uint64_t i = rng_below(&s->rng, s->total);
            int ok, dup = set_has(s, i);
            for (int j = 0; j < n && !dup; j++) dup = pool[j].index == i;
            if (dup) continue;
            sj_status st = index_valid(s, i, &ok);
            if (st != SJ_OK) {
                free(pool);
                return st;
            }
            if (ok) pool[n++].index = i;
        }
    }
    *out = pool;
    *n_out = n;
    return SJ_OK;
}

/* Chooses the next batch: half the model's best picks within SEARCH_NEAR changed parameters
 * of the fastest config so far, the rest the model's best picks anywhere. */
static sj_status plan_batch(search *s)
{
    s->batch_len = s->batch_pos = 0;
    int best = search_best(s, 0);
    if (best < 0) return SJ_OK; /* nothing measured yet: the caller samples at random */
    model m;
    sj_status st = model_fit(s, &m);
    if (st != SJ_OK) return st;
    scored *pool = NULL;
    int n = 0;
    if ((st = candidate_pool(s, &pool, &n)) != SJ_OK) return st;
    for (int i = 0; i < n; i++) {
        int d[GEN_MAX_PARAMS];
        index_digits(s, pool[i].index, d);
        pool[i].score = model_predict(s, &m, d);
    }
    qsort(pool, (size_t)n, sizeof *pool, by_score);
    int want = s->budget - s->n_entries;
    if (want > SEARCH_BATCH) want = SEARCH_BATCH;
    int near = want / 2;
    uint64_t centre = s->entries[best].index;
    for (int i = 0; i < n && s->batch_len < near; i++)
        if (hamming(s, pool[i].index, centre) <= SEARCH_NEAR) {
            s->batch[s->batch_len++] = pool[i].index;
            pool[i].index = UINT64_MAX; /* taken */
        }
    for (int i = 0; i < n && s->batch_len < want; i++)
        if (pool[i].index != UINT64_MAX) s->batch[s->batch_len++] = pool[i].index;
    free(pool);
    return SJ_OK;
}

/* The model stage issues a whole batch at once (so it compiles in parallel) and plans the next
 * one only when every result is in: the walk is the same whatever order results arrive in. */
static sj_status next_model(search *s, search_step *step, int *found, uint64_t *index)
{
    *found = 0;
    if (s->batch_pos == s->batch_len) {
        if (s->pending > 0) {
            *step = SEARCH_WAIT;
            return SJ_OK;
        }
        sj_status st = plan_batch(s);
        if (st != SJ_OK) return st;
    }
    while (s->batch_pos < s->batch_len) {
        uint64_t i = s->batch[s->batch_pos++];
        if (!set_has(s, i)) {
            *index = i;
            *found = 1;
            return SJ_OK;
        }
    }
    return SJ_OK; /* the model found nothing: the caller samples at random */
}

sj_status search_next(search *s, double elapsed_s, search_step *step, search_candidate *out)
{
    if (!s || !step || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "search_next: NULL argument");
    *step = SEARCH_DONE;
    if (s->n_entries >= s->budget || s->exhausted) return SJ_OK;
    if (s->opts.budget_seconds > 0 && elapsed_s >= s->opts.budget_seconds) return SJ_OK;
    int found = 0;
    uint64_t index = 0;
    sj_status st;
    if (s->opts.strategy == SJ_TUNE_EXHAUSTIVE) {
        st = next_in_order(s, &found, &index);
    } else if (s->n_entries < s->n_random) {
        st = next_random(s, &found, &index);
    } else {
        search_step local = SEARCH_DONE;
        st = next_model(s, &local, &found, &index);
        if (st != SJ_OK) return st;
        if (local == SEARCH_WAIT) {
            *step = SEARCH_WAIT;
            return SJ_OK;
        }
        if (!found) st = next_random(s, &found, &index);
    }
    if (st != SJ_OK) return st;
    if (!found) {
        s->exhausted = 1;
        return SJ_OK;
    }
    st = issue(s, index, out);
    if (st == SJ_OK) *step = SEARCH_CANDIDATE;
    return st;
}

sj_status search_report(search *s, int id, double time_us)
{
    if (!s || id < 0 || id >= s->n_entries)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "search_report: id %d is not an issued candidate", id);
    search_entry *e = &s->entries[id];
    if (e->finished) return error_set(SJ_ERR_INVALID_ARGUMENT, "search_report: candidate %d (%s) reported twice", id, e->config);
    e->finished = 1;
    e->time_us = time_us > 0 ? time_us : 0;
    s->pending--;
    return SJ_OK;
}

int search_best(const search *s, double tie_frac)
{
    double fastest = 0;
    for (int i = 0; i < s->n_entries; i++) {
        const search_entry *e = &s->entries[i];
        if (e->finished && e->time_us > 0 && (fastest == 0 || e->time_us < fastest)) fastest = e->time_us;
    }
    if (fastest == 0) return -1;
    int best = -1;
    for (int i = 0; i < s->n_entries; i++) {
        const search_entry *e = &s->entries[i];
        if (!e->finished || e->time_us <= 0 || e->time_us > fastest * (1.0 + tie_frac)) continue;
        if (best < 0 || e->index < s->entries[best].index) best = i;
    }
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int search_runoff_pick(int n, int n_rounds, const double *times, const uint64_t *index, double tie_frac,
                       int *median_round)
{
    if (n < 1 || n_rounds < 1 || n_rounds > 16) return -1;
    double fastest = 0, score[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        double t[16];
        memcpy(t, times + (size_t)i * n_rounds, sizeof *t * (size_t)n_rounds);
        qsort(t, (size_t)n_rounds, sizeof *t, cmp_double);
        score[i] = t[n_rounds / 2]; /* upper median: a value that was measured */
        if (i == 0 || score[i] < fastest) fastest = score[i];
    }
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (score[i] > fastest * (1.0 + tie_frac)) continue;
        if (best < 0 || index[i] < index[best]) best = i;
    }
    *median_round = 0;
    for (int r = 0; r < n_rounds; r++)
        if (times[(size_t)best * n_rounds + r] == score[best]) *median_round = r;
    return best;
}
