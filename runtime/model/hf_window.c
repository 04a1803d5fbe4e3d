// Sliding windows in config.json (hf_window.h): how each family's keys say which layers slide and
// how wide, read into model.sliding_window and model.layer_types, and written back.
#include "runtime/base/base.h"
#include "runtime/model/hf_window.h"
#include "runtime/model/hf_json.h"
#include <stdio.h>
#include <string.h>

// The window as transformers reads it: Mistral's default is 4096 and gpt-oss's 128 (null means
// none), the Qwen families' counts only with use_sliding_window, Mixtral's only when given;
// Llama and OLMoE have none. *window = 0 when there is none.
static int sliding_window(const json_ctx *j, const family *f, double *window) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j->root, "sliding_window");
    int use = 1;
    *window = 0;
    if (f->window == WINDOW_NONE) return 0;
    if (f->window == WINDOW_FLAG && get_bool(j, "use_sliding_window", 0, &use) < 0) return -1;
    if (!use) return 0;
    if (!w && f->window == WINDOW_MISTRAL) return *window = 4096, 0;
    if (!w && f->window == WINDOW_OSS) return *window = 128, 0;
    if (!w || cJSON_IsNull(w)) return 0;
    if (!cJSON_IsNumber(w) || !(w->valuedouble > 0))
        return failf(j->err, j->errlen, "%s: sliding_window must be a positive integer or null",
                     j->path);
    *window = w->valuedouble;
    return 0;
}

// Qwen2's, Qwen3's and gpt-oss's layer_types as transformers 5 sets them: config.json's list,
// or by default Qwen's sliding from max_window_layers (28 when absent) on when there is a window,
// gpt-oss's every other layer from layer 0; written into model.layer_types when some layer slides.
static int read_layer_types(const json_ctx *j, const family *f, double w, mt_model *model) {
    const cJSON *list = item(j, "layer_types");
    int from = 28, sliding = 0;
    size_t used = 0; // of m->layer_types, which read_window has emptied
    if (!list && f->window == WINDOW_FLAG && get_int(j, "max_window_layers", 28, &from) < 0)
        return -1;
    if (list && (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != model->layers))
        return failf(j->err, j->errlen, "%s: layer_types must list num_hidden_layers = %d entries",
                     j->path, model->layers);
    for (int l = 0; l < model->layers; l++) {
        int slides_by_default = f->window == WINDOW_OSS ? l % 2 == 0 : w > 0 && l >= from;
        const char *type = slides_by_default ? "sliding_attention" : "full_attention";
        if (list) {
            const cJSON *e = cJSON_GetArrayItem(list, l);
            if (!cJSON_IsString(e))
                return failf(j->err, j->errlen, "%s: layer_types[%d] is not a string", j->path, l);
            type = e->valuestring;
        }
        int slides = strcmp(type, "sliding_attention") == 0;
        if (!slides && strcmp(type, "full_attention") != 0)
            return failf(j->err, j->errlen,
                         "%s: layer_types[%d] \"%s\" not supported (full_attention or "
                         "sliding_attention)",
                         j->path, l, type);
        if (slides && !(w > 0))
            return failf(j->err, j->errlen,
                         "%s: layer_types[%d] is sliding_attention, but there is no window "
                         "(use_sliding_window false or sliding_window null)",
                         j->path, l);
        sliding += slides;
        int wrote = snprintf(model->layer_types + used, sizeof model->layer_types - used, "%s%s",
                             l ? "," : "", type);
        if (wrote < 0 || used + (size_t)wrote + 1 >= sizeof model->layer_types)
            return failf(j->err, j->errlen, "%s: layer_types: too many layers to list", j->path);
        used += (size_t)wrote;
    }
    if (!sliding) memset(model->layer_types, 0, sizeof model->layer_types); // no layer slides
    model->sliding_window = sliding ? (int)w : 0;
    return 0;
}

// The window as the model's fields. Mistral's slides every layer (model.sliding_window, and
// model.layer_types left empty), as transformers' MistralModel masks each layer with it; dense
// Qwen2's and Qwen3's slide the layers of their layer_types. The other families' windows shorter
// than the sequence are refused: how their layers take it is not read yet (a window at least as
// long as the sequence changes nothing).
int hf_read_window(const json_ctx *j, const family *f, int seq_len, mt_model *model) {
    double w;
    if (sliding_window(j, f, &w) < 0) return -1;
    model->sliding_window = 0;
    memset(model->layer_types, 0, sizeof model->layer_types);
    if (w > (1 << 30) || w != (int)w)
        return failf(j->err, j->errlen, "%s: sliding_window %g is not an integer up to 2^30",
                     j->path, w);
    if (f->window == WINDOW_MISTRAL) return model->sliding_window = (int)w, 0;
    if ((f->window == WINDOW_FLAG && !f->experts_key) || f->window == WINDOW_OSS)
        return read_layer_types(j, f, w, model);
    if (w > 0 && w < seq_len)
        return failf(j->err, j->errlen,
                     "%s: sliding_window %g is shorter than batch.seq_len %d: not supported yet "
                     "for %s",
                     j->path, w, seq_len, f->arch);
    return 0;
}

// Whether family f writes m's window: Mistral one every layer has (and a model without one is
// the Llama it is), dense Qwen2 and Qwen3 any layer_types, the others none.
int hf_writes_window(const family *f, const mt_model *m) {
    if (f->window == WINDOW_MISTRAL) return m->sliding_window > 0 && !m->layer_types[0];
    if ((f->window == WINDOW_FLAG && !f->experts_key) || f->window == WINDOW_OSS) return 1;
    return m->sliding_window == 0;
}

// Qwen2's and Qwen3's window: off, or on with each layer's type listed (read back as written).
// gpt-oss's layer_types always (its default alternates); when no layer slides, its window is
// GptOssConfig's default, 128, which no layer uses: transformers' GptOssModel builds the sliding
// mask for every forward and fails on a null window.
void hf_write_layer_types(cJSON *r, const family *f, const mt_model *m) {
    int window = m->sliding_window > 0 ? m->sliding_window : f->window == WINDOW_OSS ? 128 : 0;
    if (f->window == WINDOW_FLAG) {
        cJSON_AddBoolToObject(r, "use_sliding_window", m->sliding_window > 0);
        cJSON_AddNumberToObject(r, "max_window_layers", m->layers);
    }
    if (!window) {
        cJSON_AddNullToObject(r, "sliding_window");
        return;
    }
    cJSON_AddNumberToObject(r, "sliding_window", window);
    cJSON *list = cJSON_AddArrayToObject(r, "layer_types");
    for (int l = 0; l < m->layers; l++)
        cJSON_AddItemToArray(list,
                             cJSON_CreateString(mt_layer_kind_of(m, l)->window ? "sliding_attention"
                                                                               : "full_attention"));
}
