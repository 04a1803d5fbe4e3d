#include "kernels/scratch.h"
#include <stdint.h>
#include <stdlib.h>

static size_t align_scratch(size_t n) {
    return (n + MT_SCRATCH_ALIGN - 1) / MT_SCRATCH_ALIGN * MT_SCRATCH_ALIGN;
}

size_t cuda_rmsnorm_scratch_floats(int n, int dim) {
    if (n <= 0 || dim <= 0) return 0;
    return (size_t)((n + MT_RMSNORM_SLAB - 1) / MT_RMSNORM_SLAB) * (size_t)dim;
}

size_t cuda_bias_scratch_floats(int cols) {
    return (size_t)MT_BIAS_SLABS * cols;
}

long cuda_moe_dispatch_tiles(int n, int k) {
    long t = ((long)n * k + MT_DISPATCH_TILE - 1) / MT_DISPATCH_TILE;
    return t < 1 ? 1 : t;
}

size_t cuda_moe_dispatch_scratch_bytes(int n, int E, int k) {
    return sizeof(int32_t) * (size_t)cuda_moe_dispatch_tiles(n, k) * (size_t)E;
}

long cuda_classifier_padded_vocab(int vocab) {
    return ((long)vocab + 7) / 8 * 8;
}

size_t cuda_classifier_logits_bytes(int chunk, int vocab) {
    return align_scratch((size_t)chunk * cuda_classifier_padded_vocab(vocab) * 4);
}

size_t cuda_classifier_scratch_bytes(int chunk, int dim, int vocab) {
    (void)dim; // the chunk of x is read in place
    if (chunk <= 0 || vocab <= 0) return 0;
    return cuda_classifier_logits_bytes(chunk, vocab) +
           align_scratch((size_t)chunk * cuda_classifier_padded_vocab(vocab) * 2);
}

int cuda_attention_run_kv_heads(int B, int T, int H, int KV, int hd) {
    const char *e = getenv("MT_ATTN_DQ_CAP");
    const size_t cap = e ? (size_t)strtoull(e, NULL, 10) : MT_DQ_ACC_CAP;
    const size_t per_kv = (size_t)B * T * (H / KV) * hd * sizeof(float);
    const size_t n = per_kv ? cap / per_kv : (size_t)KV;
    return n < 1 ? 1 : n > (size_t)KV ? KV : (int)n;
}

int cuda_attention_padded_ld(int hd) {
    return hd % 8 == 4 && hd > 64 ? 128 : 0;
}

cuda_attention_scratch_parts cuda_attention_scratch_layout(int B, int T, int H, int KV, int hd) {
    cuda_attention_scratch_parts s;
    const size_t group = (size_t)(H / KV),
                 run_kv = (size_t)cuda_attention_run_kv_heads(B, T, H, KV, hd);
    const size_t run_heads = run_kv * group, ld = (size_t)cuda_attention_padded_ld(hd);
    s.d_bytes = align_scratch((size_t)B * H * T * sizeof(float));
    s.dq_bytes = align_scratch((size_t)B * T * run_heads * hd * sizeof(float));
    s.turn_bytes = align_scratch((size_t)B * H * ((T + 63) / 64) * 2 * sizeof(unsigned));
    s.q_bytes = align_scratch((size_t)B * T * run_heads * ld * 2);
    s.kv_bytes = align_scratch((size_t)B * T * run_kv * ld * 2);
    s.total = s.d_bytes + s.dq_bytes + s.turn_bytes + 2 * s.q_bytes + 2 * s.kv_bytes;
    return s;
}

size_t cuda_attention_scratch_bytes(int B, int T, int H, int KV, int hd) {
    return cuda_attention_scratch_layout(B, T, H, KV, hd).total;
}
