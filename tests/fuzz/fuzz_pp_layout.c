/*
 * libFuzzer target: Megatron pipeline layout strings ("Et|(tt|)*30mL") through
 * moe_layout_count_pp_chunks and moe_layout_parse_pp_string on a preset model.
 *
 * Input: byte 0 picks pp (1 + b % 64), byte 1 the preset (b % number of presets); the rest is the
 * layout string. vpp is derived as Megatron does (chunks / pp) when the count divides.
 *
 * Properties: every rejection has a message; an accepted layout formatted back with
 * moe_layout_format_pp_string parses to the same chunks.
 *
 * Seeds: the layout strings of tests/data/published_runs.json and plans (tests/fuzz/gen_seeds.c)
 * plus tests/fuzz/seeds/pp_layout/. Dictionary: tests/fuzz/pp_layout.dict.
 */
#include "model/layout.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_PP     64
#define FORMAT_LEN (MOE_MAX_PP_CHUNKS * 32)

static void round_trip(const struct moe_model_cfg *cfg, const struct moe_layout *lay)
{
    char *text = malloc(FORMAT_LEN);
    struct moe_layout *again = malloc(sizeof(*again));
    if (text == NULL || again == NULL) {
        fuzz_fail("out of memory");
    }
    moe_layout_format_pp_string(lay, text, FORMAT_LEN);
    moe_layout_init(again);
    again->pp = lay->pp;
    again->vpp = lay->vpp;
    struct moe_diag diag = {0};
    if (moe_layout_parse_pp_string(text, cfg, again, &diag) != MOE_OK) {
        fuzz_fail("formatted layout '%s' does not parse back: %s", text, diag.message);
    }
    if (again->num_chunks != lay->num_chunks ||
        memcmp(again->chunks, lay->chunks, (size_t)lay->num_chunks * sizeof(lay->chunks[0])) != 0) {
        fuzz_fail("layout changed in a format/parse round trip: '%s'", text);
    }
    free(again);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) {
        return 0;
    }
    size_t num_presets = moe_cfg_num_presets();
    if (num_presets == 0) {
        fuzz_fail("no presets");
    }
    const struct moe_model_cfg *cfg = moe_cfg_preset_at(data[1] % num_presets);
    char *text = fuzz_text(data + 2, size - 2);
    struct moe_layout *lay = malloc(sizeof(*lay));
    if (text == NULL || lay == NULL) {
        fuzz_fail("out of memory");
    }
    moe_layout_init(lay);
    lay->pp = 1 + data[0] % MAX_PP;
    struct moe_diag diag = {0};
    int chunks = 0;
    enum moe_status st = moe_layout_count_pp_chunks(text, &chunks, &diag);
    if (fuzz_check_status("moe_layout_count_pp_chunks", st, &diag, NULL)) {
        if (chunks < 0 || chunks > MOE_MAX_PP_CHUNKS) {
            fuzz_fail("moe_layout_count_pp_chunks accepted %d chunks", chunks);
        }
        lay->vpp = chunks > 0 && chunks % lay->pp == 0 ? chunks / lay->pp : 1;
        memset(&diag, 0, sizeof(diag));
        st = moe_layout_parse_pp_string(text, cfg, lay, &diag);
        if (fuzz_check_status("moe_layout_parse_pp_string", st, &diag, NULL)) {
            round_trip(cfg, lay);
        }
    }
    free(lay);
    free(text);
    return 0;
}
