/*
 * The one JSON layer (cJSON) every moefold file goes through: strict reading with diagnostics that
 * name the file, line, column and key; range-checked getters; "figure" objects that carry a value
 * with its source; and atomic writes (temporary file, flush, fsync, rename), so an interrupted or
 * failing write never leaves a torn file and keeps the previous one.
 *
 * In moefold's own files an unknown key is an error naming it (moe_json_check_keys); HuggingFace
 * files are read leniently by their readers.
 */
#ifndef MOE_TOPOLOGIES_JSON_UTIL_H
#define MOE_TOPOLOGIES_JSON_UTIL_H

#include "model/status.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest file the readers accept (bytes); bigger is refused, not read. */
#define MOE_JSON_MAX_FILE_BYTES (64L * 1024 * 1024)

/*
 * Read and parse a JSON file. On success *out owns the tree (cJSON_Delete it). Errors:
 * MOE_ERR_IO (cannot open/read, too big), MOE_ERR_PARSE (diag has line and column).
 */
MOE_NODISCARD enum moe_status
moe_json_read_file(const char *path, cJSON **out, struct moe_diag *diag);
/* Parse text of len bytes; source names it in diagnostics. */
MOE_NODISCARD enum moe_status moe_json_parse(
    const char *text, size_t len, const char *source, cJSON **out, struct moe_diag *diag);

/* MOE_ERR_PARSE naming the first key of obj not in allowed[n]; where = "cluster.gpu" etc. */
MOE_NODISCARD enum moe_status moe_json_check_keys(const cJSON *obj,
                                                  const char *const *allowed,
                                                  size_t n,
                                                  const char *where,
                                                  struct moe_diag *diag);

/*
 * Getters: look up key in obj. When the key is absent: required -> MOE_ERR_INVALID naming it,
 * else *out is left unchanged and MOE_OK is returned. Wrong type or out of [lo, hi] ->
 * MOE_ERR_INVALID naming where.key, the value and the range.
 */
MOE_NODISCARD enum moe_status moe_json_get_int(const cJSON *obj,
                                               const char *key,
                                               bool required,
                                               long lo,
                                               long hi,
                                               int *out,
                                               const char *where,
                                               struct moe_diag *diag);
MOE_NODISCARD enum moe_status moe_json_get_double(const cJSON *obj,
                                                  const char *key,
                                                  bool required,
                                                  double lo,
                                                  double hi,
                                                  double *out,
                                                  const char *where,
                                                  struct moe_diag *diag);
MOE_NODISCARD enum moe_status moe_json_get_bool(const cJSON *obj,
                                                const char *key,
                                                bool required,
                                                bool *out,
                                                const char *where,
                                                struct moe_diag *diag);
/* Copies into buf[len]; a string that does not fit is MOE_ERR_INVALID. */
MOE_NODISCARD enum moe_status moe_json_get_string(const cJSON *obj,
                                                  const char *key,
                                                  bool required,
                                                  char *buf,
                                                  size_t len,
                                                  const char *where,
                                                  struct moe_diag *diag);

/*
 * The prior of a fitted figure: {"value", "sd", "min", "max", "source"} and optionally "scope"
 * ("generation", the default, or "cluster") under the figure's "prior" key (moefold fit reads it;
 * the figure's own value is the fit's result). A figure may also carry "se", the standard error
 * of a fitted value.
 */
struct moe_json_prior {
    bool present;       /* the figure has a prior (it is a fitted software figure) */
    double value;       /* prior mean, in the figure's unit */
    double sd;          /* prior standard deviation (> 0) */
    double min, max;    /* physical range the fit keeps the figure in (min < value < max) */
    bool cluster_scope; /* "scope": "cluster": only runs on this very cluster inform it (a figure
                           of its host CPU, network or exact GPU, not of the generation's
                           software stack) */
    char source[768];   /* where the prior comes from (a microbenchmark, or "no measurement") */
};

/* Read figure->prior into out (present = false when there is none); malformed: MOE_ERR_INVALID. */
MOE_NODISCARD enum moe_status moe_json_get_prior(const cJSON *figure,
                                                 const char *where,
                                                 struct moe_json_prior *out,
                                                 struct moe_diag *diag);

/*
 * A figure is {"value": number, "source": "non-empty text"} (optionally "note", and for fitted
 * figures "se" and "prior", both checked). Reads the value into *out, range-checked; a figure
 * without a source is an error.
 */
MOE_NODISCARD enum moe_status moe_json_get_figure(const cJSON *obj,
                                                  const char *key,
                                                  bool required,
                                                  double lo,
                                                  double hi,
                                                  double *out,
                                                  const char *where,
                                                  struct moe_diag *diag);

/*
 * Check the "format" and "version" keys: format must equal `format`, version must be an integer
 * in [1, max_version]. Messages give a hint (e.g. "written by a newer moefold").
 */
MOE_NODISCARD enum moe_status moe_json_check_format(const cJSON *root,
                                                    const char *format,
                                                    int max_version,
                                                    const char *source,
                                                    struct moe_diag *diag);

/*
 * Write len bytes to path atomically: path.tmp.<pid> is written, flushed, fsync'ed and renamed over
 * path. On any failure the temporary is removed, path is untouched and MOE_ERR_IO names the cause.
 */
MOE_NODISCARD enum moe_status
moe_file_write_atomic(const char *path, const char *data, size_t len, struct moe_diag *diag);
/* Print root (formatted) and write it atomically, with a trailing newline. */
MOE_NODISCARD enum moe_status
moe_json_write_file(const char *path, const cJSON *root, struct moe_diag *diag);

/* Read a whole file into a malloc'd NUL-terminated buffer (*len_out bytes without NUL). */
MOE_NODISCARD enum moe_status
moe_file_read_all(const char *path, char **out, size_t *len_out, struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_TOPOLOGIES_JSON_UTIL_H */
