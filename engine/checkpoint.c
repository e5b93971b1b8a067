/*
 * Checkpoints: every rank writes its shard -- the weights it holds, its fp32 master shard and Adam
 * moments, the expert biases, the step, the data position and the RNG state -- as one binary file
 * (magic "MOEFCKPT", version, a fingerprint of model + layout) into DIR/step_<N>.tmp/, each file
 * written to a temporary name and renamed (moe_file_write_atomic); when DIR already holds a
 * checkpoint of step N (an earlier run), the name gets a unique _<tag>. After every rank is done,
 * rank 0 renames the directory to its final name (DIR/step_<N>[_<tag>]/), atomically
 * rewrites DIR/latest to name it, and removes checkpoints older than the one `latest` named
 * before, so a crash at any point leaves `latest` naming a complete checkpoint, never a torn one,
 * and repeated runs into one folder never collide. Loading reads DIR/latest and refuses
 * a file written for another layout, rank count or format version with a message saying which.
 * Resuming restores everything a step reads, so the losses continue bit for bit.
 *
 * File layout (version 2; integers in the writing host's byte order, little-endian on x86-64):
 *
 *   offset  bytes  field
 *        0      8  magic "MOEFCKPT"
 *        8      4  version (2)
 *       12      4  world size          16  4  rank          20  4  number of gradient buckets
 *       24      8  fingerprint of model + layout (FNV-1a over the shape-fixing values)
 *       32      8  step                40  8  data position (sequences consumed)
 *       48     32  RNG state (xoshiro256 words)
 *       80      8  payload bytes (what follows the header)
 *       88      8  checksum
 *       96      -  payload: per bucket its weights [padded], master, Adam m and v [shard each]
 *                  (fp32), then each MoE layer's expert bias [E] where the model has one
 *
 * The checksum is FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3, one byte at a
 * time) over every byte of the file except the checksum field itself: bytes 0..87, then 96 to the
 * end. Loading recomputes it before using anything, so a flipped bit or a truncated file is refused
 * ("checksum mismatch (corrupt or truncated)", naming the file) and nothing is loaded or written.
 * Version-1 files (no checksum) are refused with a hint to start a fresh run.
 */
#include "engine/internal.h"
#include "topologies/json_util.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_MAGIC   "MOEFCKPT"
#define CKPT_VERSION 2u

/* FNV-1a 64 parameters (Fowler, Noll, Vo; draft-eastlake-fnv). */
#define FNV64_BASIS 0xcbf29ce484222325ULL
#define FNV64_PRIME 0x100000001b3ULL

struct ckpt_header {
    char magic[8];
    uint32_t version;
    uint32_t world_size;
    uint32_t rank;
    uint32_t num_buckets;
    uint64_t fingerprint;
    int64_t step;
    uint64_t next_seq;
    uint64_t rng[4];
    uint64_t payload_bytes; /* bytes after the header */
    uint64_t checksum;      /* FNV-1a 64 of the file without these 8 bytes */
};
_Static_assert(sizeof(struct ckpt_header) == 96, "checkpoint header layout (see the table above)");
_Static_assert(offsetof(struct ckpt_header, checksum) == 88, "checksum at byte 88");

static uint64_t fnv1a64(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * FNV64_PRIME;
    }
    return h;
}

/* The checksum of a whole checkpoint file's bytes file[len] (len >= the header). */
static uint64_t file_checksum(const unsigned char *file, size_t len)
{
    size_t at = offsetof(struct ckpt_header, checksum);
    uint64_t h = fnv1a64(FNV64_BASIS, file, at);
    return fnv1a64(h, file + sizeof(struct ckpt_header), len - sizeof(struct ckpt_header));
}

/* FNV-1a over the values that fix every buffer's shape and meaning. */
static uint64_t fingerprint(const struct moe_eng *e)
{
    const struct moe_layout *l = &e->plan.layout;
    const struct moe_eng_dims *d = &e->d;
    long v[] = {l->tp,
                l->cp,
                l->dp,
                l->pp,
                l->vpp,
                l->ep,
                l->etp,
                l->mbs,
                l->gbs,
                l->seq_length,
                e->plan.options.use_distributed_optimizer,
                d->hidden,
                d->vocab,
                d->heads,
                d->kv_heads,
                d->head_dim,
                d->ffn,
                d->experts,
                d->expert_ffn,
                d->shared_ffn,
                d->topk,
                d->num_layers,
                e->num_buckets,
                e->num_params};
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        h = (h ^ (uint64_t)v[i]) * 1099511628211ULL;
    }
    for (int b = 0; b < e->num_buckets; b++) {
        h = (h ^ (uint64_t)e->buckets[b].padded) * 1099511628211ULL;
    }
    return h;
}

/* Bytes of this rank's payload after the header. */
static size_t payload_bytes(const struct moe_eng *e)
{
    size_t n = 0;
    for (int b = 0; b < e->num_buckets; b++) {
        n += (e->buckets[b].padded + 3 * e->buckets[b].shard) * sizeof(float);
    }
    for (int l = 0; l < e->d.num_layers_all; l++) {
        n += e->layers[l].expert_bias != NULL ? (size_t)e->d.experts * sizeof(float) : 0;
    }
    return n;
}

/* Walk the payload: copy to (save) or from (load) buf (host). The tensors are engine memory:
 * explicit copies (engine/device.h), plain memcpy on the CPU backend. */
static void walk(struct moe_eng *e, unsigned char *buf, bool is_save)
{
    size_t off = 0;
    const moe_eng_dev_t *dev = e->ctx.dev;
#define MOVE_ON(d, ptr, bytes)                                                                     \
    do {                                                                                           \
        if (is_save) {                                                                             \
            moe_eng_copy_to_host((d), buf + off, (ptr), (bytes));                                  \
        } else {                                                                                   \
            moe_eng_copy_from_host((d), (ptr), buf + off, (bytes));                                \
        }                                                                                          \
        off += (bytes);                                                                            \
    } while (0)
#define MOVE(ptr, bytes) MOVE_ON(dev, ptr, bytes)
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        /* The offloaded optimizer's state (g_host set) is host memory: plain copies. */
        const moe_eng_dev_t *state_dev = bk->g_host != NULL ? NULL : dev;
        MOVE(bk->w, bk->padded * sizeof(float));
        MOVE_ON(state_dev, bk->master, bk->shard * sizeof(float));
        MOVE_ON(state_dev, bk->m, bk->shard * sizeof(float));
        MOVE_ON(state_dev, bk->v, bk->shard * sizeof(float));
    }
    for (int l = 0; l < e->d.num_layers_all; l++) {
        if (e->layers[l].expert_bias != NULL) {
            MOVE(e->layers[l].expert_bias, (size_t)e->d.experts * sizeof(float));
        }
    }
#undef MOVE
#undef MOVE_ON
    moe_eng_dev_sync(dev);
}

static enum moe_status make_dir(const char *path, struct moe_diag *diag)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        return moe_diag_set(diag, MOE_ERR_IO, "cannot create checkpoint directory %s: %s", path,
                            strerror(errno));
    }
    return MOE_OK;
}

static enum moe_status write_rank(struct moe_eng *e, const char *dir, struct moe_diag *diag)
{
    size_t pb = payload_bytes(e);
    size_t total = sizeof(struct ckpt_header) + pb;
    unsigned char *buf = moe_eng_heap_alloc(&e->ctx.heap, total);
    if (buf == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for a %zu-byte checkpoint", total);
    }
    struct ckpt_header h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, CKPT_MAGIC, sizeof(h.magic));
    h.version = CKPT_VERSION;
    h.world_size = (uint32_t)e->ctx.size;
    h.rank = (uint32_t)e->ctx.rank;
    h.num_buckets = (uint32_t)e->num_buckets;
    h.fingerprint = fingerprint(e);
    h.step = e->step;
    h.next_seq = e->data.next_seq;
    memcpy(h.rng, e->ctx.rng.s, sizeof(h.rng));
    h.payload_bytes = pb;
    memcpy(buf, &h, sizeof(h));
    walk(e, buf + sizeof(h), true);
    h.checksum = file_checksum(buf, total);
    memcpy(buf, &h, sizeof(h));
    char path[1200];
    (void)snprintf(path, sizeof(path), "%s/rank_%05d.ckpt", dir, e->ctx.rank);
    enum moe_status st = moe_file_write_atomic(path, (const char *)buf, total, diag);
    moe_eng_heap_free(&e->ctx.heap, buf, total);
    return st;
}

/* Agree on a status over the world (worst wins), keeping the local message. */
static enum moe_status agree(struct moe_eng *e, enum moe_status st, struct moe_diag *diag)
{
    int v = -(int)st;
    int worst = v;
    moe_comm_allreduce(e->ctx.world, &v, &worst, 1, MOE_COMM_I32, MOE_COMM_MAX);
    if (worst != 0 && st == MOE_OK) {
        (void)moe_diag_set(diag, (enum moe_status)(-worst),
                           "checkpoint failed on another rank (its message says why)");
    }
    return (enum moe_status)(-worst);
}

/* The checkpoint directory `latest` names (its first word), or "" when there is none. */
static void read_latest(const char *dir, char *name, size_t len)
{
    char path[1100];
    (void)snprintf(path, sizeof(path), "%s/latest", dir);
    name[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return;
    }
    char line[256];
    char word[256];
    if (fgets(line, sizeof(line), f) != NULL && sscanf(line, "%255s", word) == 1) {
        (void)snprintf(name, len, "%s", word);
    }
    (void)fclose(f);
}

/* Remove a checkpoint directory: its rank files, then the directory (best effort). */
static void remove_checkpoint(const char *dir, const char *name)
{
    char path[1400];
    (void)snprintf(path, sizeof(path), "%s/%s", dir, name);
    DIR *d = opendir(path);
    if (d == NULL) {
        return;
    }
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, "rank_", 5) == 0) {
            char file[1800];
            (void)snprintf(file, sizeof(file), "%s/%s", path, ent->d_name);
            (void)unlink(file);
        }
    }
    (void)closedir(d);
    (void)rmdir(path);
}

/*
 * Rank 0, after every rank's file is in tmp_name: rename it to its final (unique) name, point
 * `latest` at it atomically, then drop the checkpoints older than the previous one. A crash at
 * any point leaves `latest` naming a complete checkpoint.
 */
static enum moe_status
publish(const char *dir, const char *tmp_name, const char *final_name, struct moe_diag *diag)
{
    char prev[256];
    read_latest(dir, prev, sizeof(prev));
    char tmp[1100], fin[1100], latest[1100];
    (void)snprintf(tmp, sizeof(tmp), "%s/%s", dir, tmp_name);
    (void)snprintf(fin, sizeof(fin), "%s/%s", dir, final_name);
    (void)snprintf(latest, sizeof(latest), "%s/latest", dir);
    if (rename(tmp, fin) != 0) {
        return moe_diag_set(diag, MOE_ERR_IO, "cannot rename %s to %s: %s", tmp, fin,
                            strerror(errno));
    }
    char text[300];
    int n = snprintf(text, sizeof(text), "%s\n", final_name);
    MOE_TRY(moe_file_write_atomic(latest, text, (size_t)n, diag));
    DIR *d = opendir(dir);
    if (d == NULL) {
        return MOE_OK;
    }
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        bool is_ckpt = strncmp(ent->d_name, "step_", 5) == 0 && strstr(ent->d_name, ".tmp") == NULL;
        if (is_ckpt && strcmp(ent->d_name, final_name) != 0 && strcmp(ent->d_name, prev) != 0) {
            remove_checkpoint(dir, ent->d_name);
        }
    }
    (void)closedir(d);
    return MOE_OK;
}

enum moe_status moe_eng_save(moe_eng_t *e, const char *dir, struct moe_diag *diag)
{
    if (strlen(dir) > 900) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "checkpoint directory path is too long");
    }
    moe_eng_params_wait(e, MOE_ENG_TAG_EMBED);
    moe_eng_params_wait(e, MOE_ENG_TAG_HEAD);
    for (int l = 0; l < e->d.num_layers_all; l++) {
        moe_eng_params_wait(e, l);
    }
    /* step_<N>, or, when a checkpoint of that step is already in the folder (an earlier run),
     * step_<N>_<tag> with a tag from rank 0's clock and process id: a save never renames over
     * an existing checkpoint. Rank 0 decides; every rank gets the name. */
    char name[64];
    if (e->ctx.rank == 0) {
        char probe[1100];
        struct stat st_probe;
        (void)snprintf(name, sizeof(name), "step_%06d", e->step);
        (void)snprintf(probe, sizeof(probe), "%s/%s", dir, name);
        if (stat(probe, &st_probe) == 0) {
            uint64_t tag = moe_eng_hash3((uint64_t)e->step, (uint64_t)(moe_eng_now() * 1e9),
                                         (uint64_t)getpid());
            (void)snprintf(name, sizeof(name), "step_%06d_%08x", e->step,
                           (unsigned)(tag & 0xffffffffu));
        }
    }
    moe_comm_bcast(e->ctx.world, name, sizeof(name) / sizeof(int), MOE_COMM_I32, 0);
    char tmp_name[80], tmp[1100];
    (void)snprintf(tmp_name, sizeof(tmp_name), "%s.tmp", name);
    (void)snprintf(tmp, sizeof(tmp), "%s/%s", dir, tmp_name);
    enum moe_status st = MOE_OK;
    if (e->ctx.rank == 0) {
        st = make_dir(dir, diag);
        if (st == MOE_OK) {
            st = make_dir(tmp, diag);
        }
    }
    MOE_TRY(agree(e, st, diag));
    st = write_rank(e, tmp, diag);
    MOE_TRY(agree(e, st, diag));
    if (e->ctx.rank == 0) {
        st = publish(dir, tmp_name, name, diag);
    }
    MOE_TRY(agree(e, st, diag));
    moe_eng_log_info(&e->ctx.log, "saved checkpoint %s/%s (step %d)", dir, name, e->step);
    return MOE_OK;
}

static enum moe_status read_rank(struct moe_eng *e, const char *dir, struct moe_diag *diag)
{
    char latest[1100];
    (void)snprintf(latest, sizeof(latest), "%s/latest", dir);
    char *text = NULL;
    size_t len = 0;
    MOE_TRY(moe_file_read_all(latest, &text, &len, diag));
    char sub[128] = "";
    (void)sscanf(text, "%127s", sub);
    free(text);
    char path[1400];
    (void)snprintf(path, sizeof(path), "%s/%s/rank_%05d.ckpt", dir, sub, e->ctx.rank);
    char *buf = NULL;
    MOE_TRY(moe_file_read_all(path, &buf, &len, diag));
    struct ckpt_header h;
    enum moe_status st = MOE_OK;
    if (len < sizeof(h)) {
        st = moe_diag_set(diag, MOE_ERR_IO,
                          "%s: checksum mismatch (corrupt or truncated): %zu bytes, shorter than "
                          "the %zu-byte header; resume from an intact checkpoint",
                          path, len, sizeof(h));
        goto out_free_buf;
    }
    memcpy(&h, buf, sizeof(h));
    if (memcmp(h.magic, CKPT_MAGIC, sizeof(h.magic)) != 0) {
        st = moe_diag_set(diag, MOE_ERR_IO, "%s is not a moefold checkpoint (bad magic)", path);
    } else if (h.version != CKPT_VERSION) {
        st = moe_diag_set(diag, MOE_ERR_IO,
                          "%s has checkpoint version %u%s; this moefold-train reads version %u "
                          "(start a fresh run, or resume with the moefold-train that wrote it)",
                          path, h.version, h.version < CKPT_VERSION ? " (no checksum)" : "",
                          CKPT_VERSION);
    } else if (len - sizeof(h) != h.payload_bytes) {
        st = moe_diag_set(diag, MOE_ERR_IO,
                          "%s: checksum mismatch (corrupt or truncated): %zu payload bytes where "
                          "the header says %llu; resume from an intact checkpoint",
                          path, len - sizeof(h), (unsigned long long)h.payload_bytes);
    } else if (file_checksum((const unsigned char *)buf, len) != h.checksum) {
        st = moe_diag_set(diag, MOE_ERR_IO,
                          "%s: checksum mismatch (corrupt or truncated): the file's FNV-1a 64 is "
                          "%016llx, its header says %016llx; resume from an intact checkpoint",
                          path, (unsigned long long)file_checksum((const unsigned char *)buf, len),
                          (unsigned long long)h.checksum);
    } else if (h.world_size != (uint32_t)e->ctx.size || h.rank != (uint32_t)e->ctx.rank) {
        st = moe_diag_set(diag, MOE_ERR_INVALID,
                          "%s was written by rank %u of %u; this is rank %d of %d "
                          "(resume with the "
                          "same number of ranks)",
                          path, h.rank, h.world_size, e->ctx.rank, e->ctx.size);
    } else if (h.fingerprint != fingerprint(e) || len != sizeof(h) + payload_bytes(e)) {
        st = moe_diag_set(diag, MOE_ERR_INVALID,
                          "%s was written for another model or layout; resume with the same "
                          "plan",
                          path);
    } else {
        walk(e, (unsigned char *)buf + sizeof(h), false);
        e->step = (int)h.step;
        e->data.next_seq = h.next_seq;
        memcpy(e->ctx.rng.s, h.rng, sizeof(h.rng));
    }
out_free_buf:
    free(buf);
    return st;
}

enum moe_status moe_eng_load(moe_eng_t *e, const char *dir, struct moe_diag *diag)
{
    if (strlen(dir) > 900) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "checkpoint directory path is too long");
    }
    enum moe_status st = read_rank(e, dir, diag);
    MOE_TRY(agree(e, st, diag));
    moe_eng_log_info(&e->ctx.log, "resumed from %s at step %d", dir, e->step);
    return MOE_OK;
}
