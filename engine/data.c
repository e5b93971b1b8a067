/*
 * Training data: byte-level tokens (token id = byte value, vocabulary 256) of a text file or of a
 * directory's files (default: the license texts every Debian system ships under
 * /usr/share/common-licenses, read in name order), or a seeded synthetic corpus: a first-order
 * Markov chain over 128 symbols where each symbol has four successors with probabilities
 * 0.70/0.15/0.10/0.05 (entropy 0.92 nats per token, against ln 256 = 5.55 for a uniform guess), so
 * the loss has somewhere to fall.
 *
 * Order: every step draws one 64-bit value per sequence of the global batch from the context's RNG,
 * on every rank alike: a text window's start, or a synthetic sequence's seed. A rank keeps the
 * sequences of its micro-batches (group j of mbs sequences goes to DP rank j mod DP as its
 * micro-batch j / DP) and, of each, the tokens of its CP piece (chunks r and 2 CP - 1 - r of 2 CP,
 * Megatron's load-balanced causal split; engine/internal.h). So every layout sees the same
 * global batch, and (RNG state, sequences consumed) is the whole data position a checkpoint saves.
 * With MTP layers the loss stage also keeps each depth k's inputs and targets: the tokens k and
 * k + 1 positions ahead, read from the same sequence (no exchange between CP ranks is needed).
 */
#include "engine/internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_CORPUS "/usr/share/common-licenses"
#define SYN_SYMBOLS    128
#define SYN_SUCC       4

static const double syn_probs[SYN_SUCC] = {0.70, 0.15, 0.10, 0.05};

/* Size of a regular file, -1 if not one. */
static long file_size(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        return -1;
    }
    return (long)st.st_size;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Append the bytes of path at buf + *len (buf has room). */
static enum moe_status
append_file(const char *path, unsigned char *buf, size_t cap, size_t *len, struct moe_diag *diag)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return moe_diag_set(diag, MOE_ERR_IO, "cannot open data file %s", path);
    }
    size_t n = fread(buf + *len, 1, cap - *len, f);
    *len += n;
    (void)fclose(f);
    return MOE_OK;
}

/* Files to read: path itself, or the regular files of a directory sorted by name. */
static enum moe_status load_text(struct moe_eng *e, const char *path, struct moe_diag *diag)
{
    struct moe_eng_data *dt = &e->data;
    char names[256][256];
    const char *sorted[256];
    int n = 0;
    long total = file_size(path);
    if (total < 0) {
        DIR *dir = opendir(path);
        if (dir == NULL) {
            return moe_diag_set(diag, MOE_ERR_IO,
                                "data path %s is neither a readable file nor a directory", path);
        }
        total = 0;
        struct dirent *ent;
        while ((ent = readdir(dir)) != NULL && n < 256) {
            char full[512];
            (void)snprintf(full, sizeof(full), "%s/%s", path, ent->d_name);
            long sz = file_size(full);
            if (sz > 0 && ent->d_name[0] != '.') {
                (void)snprintf(names[n], sizeof(names[n]), "%s", ent->d_name);
                sorted[n] = names[n];
                n++;
                total += sz;
            }
        }
        (void)closedir(dir);
        qsort(sorted, (size_t)n, sizeof(sorted[0]), cmp_names);
    }
    if (total < (long)e->d.seq + 2) {
        return moe_diag_set(diag, MOE_ERR_IO,
                            "data %s holds %ld bytes; a sequence of %d tokens needs at least %d",
                            path, total, e->d.seq, e->d.seq + 2);
    }
    dt->text_bytes_alloc = (size_t)total;
    dt->text = moe_eng_heap_alloc(&e->ctx.heap, dt->text_bytes_alloc);
    if (dt->text == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for %ld bytes of data", total);
    }
    dt->text_len = 0;
    if (n == 0) {
        MOE_TRY(append_file(path, dt->text, dt->text_bytes_alloc, &dt->text_len, diag));
    }
    for (int i = 0; i < n; i++) {
        char full[512];
        (void)snprintf(full, sizeof(full), "%s/%s", path, sorted[i]);
        MOE_TRY(append_file(full, dt->text, dt->text_bytes_alloc, &dt->text_len, diag));
    }
    if (dt->text_len < (size_t)e->d.seq + 2) {
        return moe_diag_set(diag, MOE_ERR_IO, "could not read enough bytes from %s", path);
    }
    return MOE_OK;
}

enum moe_status moe_eng_data_init(struct moe_eng *e, struct moe_diag *diag)
{
    struct moe_eng_data *dt = &e->data;
    memset(dt, 0, sizeof(*dt));
    dt->kind = e->opts.data_kind;
    dt->seed = e->opts.seed;
    dt->vocab = e->plan.model.vocab_size;
    if (dt->kind == MOE_ENG_DATA_TEXT) {
        if (dt->vocab < 256) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "byte-level text needs a vocabulary of at least 256 (model has "
                                "%d); use --synthetic or a larger vocabulary",
                                dt->vocab);
        }
        return load_text(e, e->opts.data_path != NULL ? e->opts.data_path : DEFAULT_CORPUS, diag);
    }
    int syms = dt->vocab < SYN_SYMBOLS ? dt->vocab : SYN_SYMBOLS;
    dt->succ = moe_eng_heap_alloc(&e->ctx.heap, (size_t)syms * SYN_SUCC * sizeof(int));
    if (dt->succ == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the synthetic corpus");
    }
    struct moe_eng_rng r;
    moe_eng_rng_seed(&r, dt->seed ^ 0x5eed5eedULL);
    for (int a = 0; a < syms * SYN_SUCC; a++) {
        dt->succ[a] = (int)(moe_eng_rng_next(&r) % (uint64_t)syms);
    }
    return MOE_OK;
}

void moe_eng_data_fini(struct moe_eng *e)
{
    struct moe_eng_data *dt = &e->data;
    moe_eng_heap_free(&e->ctx.heap, dt->text, dt->text_bytes_alloc);
    int syms = dt->vocab < SYN_SYMBOLS ? dt->vocab : SYN_SYMBOLS;
    moe_eng_heap_free(&e->ctx.heap, dt->succ, (size_t)syms * SYN_SUCC * sizeof(int));
    dt->text = NULL;
    dt->succ = NULL;
}

/* Tokens [first, first + n] (n + 1 of them) of the sequence drawn as `draw`, into ids/targets. */
static void
fill_sequence(const struct moe_eng *e, uint64_t draw, int first, int n, int *ids, int *targets)
{
    const struct moe_eng_data *dt = &e->data;
    if (dt->kind == MOE_ENG_DATA_TEXT) {
        size_t span = dt->text_len - (size_t)e->d.seq - 1;
        size_t start = (size_t)(draw % (uint64_t)span) + (size_t)first;
        for (int t = 0; t < n; t++) {
            ids[t] = dt->text[start + (size_t)t];
            targets[t] = dt->text[start + (size_t)t + 1];
        }
        return;
    }
    int syms = dt->vocab < SYN_SYMBOLS ? dt->vocab : SYN_SYMBOLS;
    int tok = (int)(moe_eng_hash3(dt->seed, draw, 0) % (uint64_t)syms);
    for (int t = 0; t <= first + n; t++) {
        if (t >= first && t < first + n) {
            ids[t - first] = tok;
        }
        if (t > first) {
            targets[t - first - 1] = tok;
        }
        double u = (double)(moe_eng_hash3(dt->seed, draw, (uint64_t)t + 1) >> 11) * 0x1.0p-53;
        int j = 0;
        double acc = syn_probs[0];
        while (j + 1 < SYN_SUCC && u >= acc) {
            j++;
            acc += syn_probs[j];
        }
        tok = dt->succ[tok * SYN_SUCC + j];
    }
}

/* MTP depth k's ids and targets for positions [first, first + n): the tokens k and k + 1 ahead,
 * id 0 and target -1 (ignored) past the sequence (Megatron rolls the ids and the loss mask). */
static void fill_shifted(
    const struct moe_eng *e, uint64_t draw, int first, int n, int k, int *ids, int *targets)
{
    int valid = e->d.seq - first - k;
    valid = valid < 0 ? 0 : (valid > n ? n : valid);
    if (valid > 0) {
        fill_sequence(e, draw, first + k, valid, ids, targets);
    }
    for (int t = valid; t < n; t++) {
        ids[t] = 0;
        targets[t] = -1;
    }
}

void moe_eng_data_next_batch(struct moe_eng *e)
{
    const struct moe_layout *lay = &e->plan.layout;
    const struct moe_eng_dims *d = &e->d;
    int dp = e->groups.me.dp;
    for (int g = 0; g < lay->gbs; g++) {
        uint64_t draw = moe_eng_rng_next(&e->ctx.rng);
        int j = g / lay->mbs;
        if (j % lay->dp != dp) {
            continue;
        }
        int mb = j / lay->dp;
        int b = g % lay->mbs;
        size_t off = (size_t)mb * (size_t)d->tokens + (size_t)b * (size_t)d->seq_l;
        for (int h = 0; h < d->num_cp_chunks; h++) { /* CP: this rank's two chunks (internal.h) */
            size_t at = off + (size_t)h * (size_t)d->cp_chunk_len;
            fill_sequence(e, draw, d->cp_chunk_pos[h], d->cp_chunk_len, e->h_ids + at,
                          e->h_targets + at);
            for (int k = 1; e->h_mtp_ids != NULL && k <= d->num_mtp; k++) {
                size_t mk = (size_t)(k - 1) * (size_t)lay->num_microbatches * (size_t)d->tokens;
                fill_shifted(e, draw, d->cp_chunk_pos[h], d->cp_chunk_len, k,
                             e->h_mtp_ids + mk + at, e->h_mtp_targets + mk + at);
            }
        }
    }
    e->data.next_seq += (uint64_t)lay->gbs;
    /* CUDA: the batch to the device (no-op on the CPU, where h_ids is ids). */
    size_t bytes = (size_t)lay->num_microbatches * (size_t)d->tokens * sizeof(int);
    moe_eng_copy_from_host(e->ctx.dev, e->ids, e->h_ids, bytes);
    moe_eng_copy_from_host(e->ctx.dev, e->targets, e->h_targets, bytes);
    if (e->mtp_ids != NULL) {
        size_t mb = (size_t)d->num_mtp * bytes;
        moe_eng_copy_from_host(e->ctx.dev, e->mtp_ids, e->h_mtp_ids, mb);
        moe_eng_copy_from_host(e->ctx.dev, e->mtp_targets, e->h_mtp_targets, mb);
    }
}
