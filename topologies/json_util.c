/*
 * Implementation of the strict JSON layer over cJSON (topologies/json_util.h). Line and column of a
 * parse error are recomputed from cJSON's error offset; writes go through a temporary file and an
 * fsync'ed rename (POSIX rename is atomic within one file system).
 */
#include "topologies/json_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum moe_status
moe_file_read_all(const char *path, char **out, size_t *len_out, struct moe_diag *diag)
{
    moe_diag_source(diag, path);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return moe_diag_set(diag, MOE_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)fclose(f);
        return moe_diag_set(diag, MOE_ERR_IO, "%s is not a regular file", path);
    }
    if (st.st_size > MOE_JSON_MAX_FILE_BYTES) {
        (void)fclose(f);
        return moe_diag_set(diag, MOE_ERR_IO, "%s is %lld bytes, over the %ld-byte limit", path,
                            (long long)st.st_size, MOE_JSON_MAX_FILE_BYTES);
    }
    size_t cap = (size_t)st.st_size;
    char *buf = malloc(cap + 1);
    if (buf == NULL) {
        (void)fclose(f);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, cap, f);
    int read_err = ferror(f);
    (void)fclose(f);
    if (read_err != 0) {
        free(buf);
        return moe_diag_set(diag, MOE_ERR_IO, "error reading %s", path);
    }
    buf[got] = '\0';
    *out = buf;
    if (len_out != NULL) {
        *len_out = got;
    }
    return MOE_OK;
}

static void line_col(const char *text, size_t offset, int *line, int *col)
{
    int l = 1;
    int c = 1;
    for (size_t i = 0; i < offset && text[i] != '\0'; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

enum moe_status
moe_json_parse(const char *text, size_t len, const char *source, cJSON **out, struct moe_diag *diag)
{
    moe_diag_source(diag, source);
    if (memchr(text, '\0', len) != NULL) {
        return moe_diag_set(diag, MOE_ERR_PARSE, "%s: contains a NUL byte; not a JSON text",
                            source);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (root == NULL) {
        size_t off = end != NULL && end >= text ? (size_t)(end - text) : 0;
        if (off > len) {
            off = len;
        }
        int line;
        int col;
        line_col(text, off, &line, &col);
        if (diag != NULL) {
            diag->line = line;
            diag->column = col;
        }
        if (len == 0) {
            return moe_diag_set(diag, MOE_ERR_PARSE, "%s: empty file; expected a JSON object",
                                source);
        }
        /* text need not be NUL-terminated: quote at most the bytes that are there. */
        char near[24];
        size_t n = len - off < sizeof(near) - 4 ? len - off : sizeof(near) - 4;
        memcpy(near, text + off, n);
        near[n] = '\0';
        return moe_diag_set(diag, MOE_ERR_PARSE, "%s:%d:%d: malformed JSON near '%s'", source, line,
                            col, near);
    }
    /* Trailing garbage after the value is an error too. */
    size_t off = (size_t)(end - text);
    while (off < len &&
           (text[off] == ' ' || text[off] == '\n' || text[off] == '\r' || text[off] == '\t')) {
        off++;
    }
    if (off < len) {
        int line;
        int col;
        line_col(text, off, &line, &col);
        cJSON_Delete(root);
        if (diag != NULL) {
            diag->line = line;
            diag->column = col;
        }
        return moe_diag_set(diag, MOE_ERR_PARSE, "%s:%d:%d: unexpected text after the JSON value",
                            source, line, col);
    }
    *out = root;
    return MOE_OK;
}

enum moe_status moe_json_read_file(const char *path, cJSON **out, struct moe_diag *diag)
{
    char *text = NULL;
    size_t len = 0;
    MOE_TRY(moe_file_read_all(path, &text, &len, diag));
    enum moe_status st = moe_json_parse(text, len, path, out, diag);
    free(text);
    return st;
}

enum moe_status moe_json_check_keys(const cJSON *obj,
                                    const char *const *allowed,
                                    size_t n,
                                    const char *where,
                                    struct moe_diag *diag)
{
    if (!cJSON_IsObject(obj)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected a JSON object", where);
    }
    for (const cJSON *it = obj->child; it != NULL; it = it->next) {
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++) {
            ok = it->string != NULL && strcmp(it->string, allowed[i]) == 0;
        }
        if (!ok) {
            char list[384];
            size_t used = 0;
            list[0] = '\0';
            for (size_t i = 0; i < n && used + 2 < sizeof(list); i++) {
                int w =
                    snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", allowed[i]);
                if (w < 0) {
                    break;
                }
                used += (size_t)w;
            }
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: unknown key \"%s\" (known keys: %s)",
                                where, it->string != NULL ? it->string : "?", list);
        }
        /* Duplicate keys are a typo too. */
        for (const cJSON *jt = it->next; jt != NULL; jt = jt->next) {
            if (jt->string != NULL && it->string != NULL && strcmp(jt->string, it->string) == 0) {
                return moe_diag_set(diag, MOE_ERR_INVALID, "%s: key \"%s\" appears twice", where,
                                    it->string);
            }
        }
    }
    return MOE_OK;
}

static enum moe_status missing(const char *key, const char *where, struct moe_diag *diag)
{
    return moe_diag_set(diag, MOE_ERR_INVALID, "%s: missing required key \"%s\"", where, key);
}

enum moe_status moe_json_get_double(const cJSON *obj,
                                    const char *key,
                                    bool required,
                                    double lo,
                                    double hi,
                                    double *out,
                                    const char *where,
                                    struct moe_diag *diag)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL || cJSON_IsNull(it)) {
        return required ? missing(key, where, diag) : MOE_OK;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: expected a finite number", where, key);
    }
    double v = it->valuedouble;
    if (v < lo || v > hi) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s = %g is out of range [%g, %g]", where,
                            key, v, lo, hi);
    }
    *out = v;
    return MOE_OK;
}

enum moe_status moe_json_get_int(const cJSON *obj,
                                 const char *key,
                                 bool required,
                                 long lo,
                                 long hi,
                                 int *out,
                                 const char *where,
                                 struct moe_diag *diag)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL || cJSON_IsNull(it)) {
        return required ? missing(key, where, diag) : MOE_OK;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
        it->valuedouble != floor(it->valuedouble)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: expected an integer", where, key);
    }
    double v = it->valuedouble;
    if (v < (double)lo || v > (double)hi || v > (double)INT_MAX || v < (double)INT_MIN) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s = %.0f is out of range [%ld, %ld]", where,
                            key, v, lo, hi);
    }
    *out = (int)v;
    return MOE_OK;
}

enum moe_status moe_json_get_bool(const cJSON *obj,
                                  const char *key,
                                  bool required,
                                  bool *out,
                                  const char *where,
                                  struct moe_diag *diag)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL || cJSON_IsNull(it)) {
        return required ? missing(key, where, diag) : MOE_OK;
    }
    if (!cJSON_IsBool(it)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: expected true or false", where, key);
    }
    *out = cJSON_IsTrue(it);
    return MOE_OK;
}

enum moe_status moe_json_get_string(const cJSON *obj,
                                    const char *key,
                                    bool required,
                                    char *buf,
                                    size_t len,
                                    const char *where,
                                    struct moe_diag *diag)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL || cJSON_IsNull(it)) {
        return required ? missing(key, where, diag) : MOE_OK;
    }
    if (!cJSON_IsString(it) || it->valuestring == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: expected a string", where, key);
    }
    size_t n = strlen(it->valuestring);
    if (n + 1 > len) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: string of %zu chars is longer than %zu",
                            where, key, n, len - 1);
    }
    memcpy(buf, it->valuestring, n + 1);
    return MOE_OK;
}

enum moe_status moe_json_get_figure(const cJSON *obj,
                                    const char *key,
                                    bool required,
                                    double lo,
                                    double hi,
                                    double *out,
                                    const char *where,
                                    struct moe_diag *diag)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL || cJSON_IsNull(it)) {
        return required ? missing(key, where, diag) : MOE_OK;
    }
    char sub[192];
    (void)snprintf(sub, sizeof(sub), "%s.%s", where, key);
    if (!cJSON_IsObject(it)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: expected {\"value\": number, \"source\": \"...\"}", sub);
    }
    const char *const keys[] = {"value", "source", "note", "se", "prior"};
    MOE_TRY(moe_json_check_keys(it, keys, MOE_ARRAY_LEN(keys), sub, diag));
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(it, "source");
    if (!cJSON_IsString(src) || src->valuestring == NULL || src->valuestring[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: every figure needs a non-empty \"source\"",
                            sub);
    }
    MOE_TRY(moe_json_get_double(it, "value", true, lo, hi, out, sub, diag));
    double se = 0.0;
    MOE_TRY(moe_json_get_double(it, "se", false, 0.0, 1e30, &se, sub, diag));
    struct moe_json_prior prior;
    return moe_json_get_prior(it, sub, &prior, diag);
}

enum moe_status moe_json_get_prior(const cJSON *figure,
                                   const char *where,
                                   struct moe_json_prior *out,
                                   struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(figure, "prior");
    if (p == NULL) {
        return MOE_OK;
    }
    char sub[224];
    (void)snprintf(sub, sizeof(sub), "%s.prior", where);
    if (!cJSON_IsObject(p)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: expected {\"value\", \"sd\", \"min\", \"max\", \"source\"}", sub);
    }
    const char *const keys[] = {"value", "sd", "min", "max", "source", "note", "scope"};
    MOE_TRY(moe_json_check_keys(p, keys, MOE_ARRAY_LEN(keys), sub, diag));
    char scope[16] = "generation";
    MOE_TRY(moe_json_get_string(p, "scope", false, scope, sizeof(scope), sub, diag));
    if (strcmp(scope, "generation") != 0 && strcmp(scope, "cluster") != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s.scope \"%s\": expected \"generation\" or \"cluster\"", sub, scope);
    }
    out->cluster_scope = strcmp(scope, "cluster") == 0;
    MOE_TRY(moe_json_get_double(p, "min", true, -1e30, 1e30, &out->min, sub, diag));
    MOE_TRY(moe_json_get_double(p, "max", true, -1e30, 1e30, &out->max, sub, diag));
    if (!(out->max > out->min)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: max (%g) must exceed min (%g)", sub,
                            out->max, out->min);
    }
    MOE_TRY(moe_json_get_double(p, "value", true, out->min, out->max, &out->value, sub, diag));
    MOE_TRY(moe_json_get_double(p, "sd", true, 1e-30, 1e30, &out->sd, sub, diag));
    MOE_TRY(moe_json_get_string(p, "source", true, out->source, sizeof(out->source), sub, diag));
    if (out->source[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: a prior needs a non-empty \"source\"", sub);
    }
    out->present = true;
    return MOE_OK;
}

enum moe_status moe_json_check_format(const cJSON *root,
                                      const char *format,
                                      int max_version,
                                      const char *source,
                                      struct moe_diag *diag)
{
    if (!cJSON_IsObject(root)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: top level must be a JSON object", source);
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, format) != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: \"format\" must be \"%s\" (is this a %s file?)", source, format,
                            format);
    }
    int version = 0;
    MOE_TRY(moe_json_get_int(root, "version", true, 1, 1000000, &version, source, diag));
    if (version > max_version) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "%s: version %d is newer than this moefold reads (%d); upgrade moefold",
                            source, version, max_version);
    }
    return MOE_OK;
}

enum moe_status
moe_file_write_atomic(const char *path, const char *data, size_t len, struct moe_diag *diag)
{
    moe_diag_source(diag, path);
    char tmp[4096];
    int w = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    if (w < 0 || (size_t)w >= sizeof(tmp)) {
        return moe_diag_set(diag, MOE_ERR_IO, "path too long: %s", path);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        return moe_diag_set(diag, MOE_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            int err = errno;
            (void)close(fd);
            (void)unlink(tmp);
            return moe_diag_set(diag, MOE_ERR_IO, "writing %s failed: %s (previous file kept)",
                                path, strerror(err));
        }
        done += (size_t)n;
    }
    /* Close even when fsync fails, so the descriptor is not leaked. */
    int sync_rc = fsync(fd);
    int err = errno;
    if (close(fd) != 0 && sync_rc == 0) {
        sync_rc = -1;
        err = errno;
    }
    if (sync_rc != 0) {
        (void)unlink(tmp);
        return moe_diag_set(diag, MOE_ERR_IO, "flushing %s failed: %s (previous file kept)", path,
                            strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        (void)unlink(tmp);
        return moe_diag_set(diag, MOE_ERR_IO, "renaming into %s failed: %s (previous file kept)",
                            path, strerror(err));
    }
    return MOE_OK;
}

enum moe_status moe_json_write_file(const char *path, const cJSON *root, struct moe_diag *diag)
{
    char *text = cJSON_Print(root);
    if (text == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory printing JSON for %s", path);
    }
    size_t n = strlen(text);
    char *with_nl = realloc(text, n + 2);
    if (with_nl == NULL) {
        free(text);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory printing JSON for %s", path);
    }
    with_nl[n] = '\n';
    with_nl[n + 1] = '\0';
    enum moe_status st = moe_file_write_atomic(path, with_nl, n + 1, diag);
    free(with_nl);
    return st;
}
