// config.json's sliding windows (hf_window.c), private to runtime/model/.
#ifndef MT_HF_WINDOW_H
#define MT_HF_WINDOW_H

#include "runtime/model/hf_rows.h"

// Sliding windows (hf_window.c): config.json's window and layer_types into model.sliding_window
// and model.layer_types (-1 with one line in j's err); whether family f can write m's window;
// and its keys written back.
int hf_read_window(const json_ctx *j, const family *f, int seq_len, mt_model *m);
int hf_writes_window(const family *f, const mt_model *m);
void hf_write_layer_types(cJSON *r, const family *f, const mt_model *m);

#endif
