// plan_matches_allocation: the bytes a backend's allocator gives its working sets equal the
// plan's, measured through the allocator (backend_ops.allocated_bytes counts each request as
// the backend makes it), on configs that each add buffers: dense, MoE (a shared expert, a dense
// layer), long context (chunks shorter than the micro-batch), bf16 gradient slots, qk_norm per
// head and over the projections, packed documents, a head dim of 8k + 4 (the attention
// scratch's padded copies), Qwen3.5's hybrid (Gated DeltaNet layers of a value width above
// the attention's, the gated attention, packed documents), and multi-head latent attention with
// and without the low-rank query path (values narrower than q and k, and on the CPU wider). At
// start, then per kept layer pass and per kept attention output; on CUDA also the backend's host
// memory (pinned and plain).
//   test_plan_allocation cuda|cpu
// cuda: exits 77 ("SKIPPED: no CUDA device") without a GPU or a CUDA build.
#include "runtime/engine/backend.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include "tests/check.h"
#include <stdio.h>
#include <string.h>
#ifdef MT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static mt_config dense(void) {
    mt_config c;
    memset(&c, 0, sizeof c);
    c.model.dim = 128, c.model.layers = 3, c.model.heads = 4, c.model.kv_heads = 2,
    c.model.ffn_dim = 256, c.model.vocab = 512;
    c.micro_batch = 2, c.seq_len = 64, c.micro_batches = 2, c.model.rope_theta = 10000;
    c.model.norm_eps = 1e-5, c.model.tied_embeddings = 1, c.device_groups = -1,
    c.keep_attention = -1;
    c.grad_dtype = GRAD_DTYPE_FP32;
    return c;
}

typedef struct {
    const char *name;
    mt_config c;
    int cpu_only; // a model the CUDA backend refuses (cu_layers_check)
} named_config;

static int configs(named_config *out) {
    int n = 0;
    out[n++] = (named_config){.name = "dense", .c = dense()};
    mt_config moe = dense();
    moe.model.experts = 8, moe.model.top_k = 2, moe.model.moe_ffn_dim = 64,
    moe.model.shared_ffn_dim = 32;
    moe.model.norm_topk_prob = 1, moe.model.moe_every = 1, moe.model.shared_gate = 1;
    strcpy(moe.model.dense_layers, "0");
    out[n++] = (named_config){.name = "moe", .c = moe};
    mt_config chunked = moe; // MoE too: its chunk-sized buffers and per-chunk counts
    chunked.micro_batch = 1, chunked.seq_len = 1024, chunked.seq_chunk = 256;
    out[n++] = (named_config){.name = "long context", .c = chunked};
    mt_config bf16 = dense();
    bf16.grad_dtype = GRAD_DTYPE_BF16;
    out[n++] = (named_config){.name = "bf16 gradient slots", .c = bf16};
    mt_config head = moe;
    head.model.qk_norm = QK_HEAD;
    out[n++] = (named_config){.name = "qk_norm head", .c = head};
    mt_config all = dense();
    all.model.qk_norm = QK_ALL;
    out[n++] = (named_config){.name = "qk_norm all", .c = all};
    mt_config packed = dense();
    packed.data_pack = PACK_DOCUMENTS;
    out[n++] = (named_config){.name = "packed documents", .c = packed};
    mt_config hd100 = dense();
    hd100.model.dim = 400, hd100.model.ffn_dim = 512;
    out[n++] = (named_config){.name = "head dim 100", .c = hd100};
    mt_config qwen35 = dense(); // value width 8 x 32 = 256 > heads x head_dim = 128
    strcpy(qwen35.model.layer_types, "linear_attention,linear_attention,full_attention");
    qwen35.model.linear_k_heads = 4, qwen35.model.linear_v_heads = 8,
    qwen35.model.linear_k_dim = 16;
    qwen35.model.linear_v_dim = 32, qwen35.model.linear_conv = 4, qwen35.model.attn_output_gate = 1;
    qwen35.model.qk_norm = QK_HEAD, qwen35.model.norm_zero_centered = 1,
    qwen35.data_pack = PACK_DOCUMENTS;
    out[n++] = (named_config){.name = "Qwen3.5 hybrid", .c = qwen35};
    mt_config mla = dense(); // q, k 32 + 16 wide, values 24: the buffers at 48 a head
    mla.model.kv_heads = mla.model.heads, mla.model.mla_q_rank = 48, mla.model.mla_kv_rank = 64,
    mla.model.mla_nope_dim = 32;
    mla.model.mla_rope_dim = 16, mla.model.mla_v_dim = 24, mla.model.rope_interleave = 1;
    mla.data_pack = PACK_DOCUMENTS;
    out[n++] = (named_config){.name = "multi-head latent attention", .c = mla};
    mt_config mla_q = mla; // q_proj, values wider than q and k (which the GPU refuses)
    mla_q.model.mla_q_rank = 0, mla_q.model.mla_v_dim = 56, mla_q.data_pack = PACK_NONE;
    out[n++] = (named_config){.name = "MLA without a query rank", .c = mla_q, .cpu_only = 1};
    for (int i = 0; i < n; i++) model_describe_layers(&out[i].c.model);
    return n;
}

// The backend's allocator at its start, then for 2 kept passes and 3 attention outputs.
static void check_backend(const char *name, const mt_config *c, int cuda, const backend_ops *ops,
                          backend *b) {
    size_t start = ops->allocated_bytes(b);
    uint64_t want = plan_backend_start_bytes(c, cuda);
    check(start == want, "%s (%s): %zu bytes allocated at start, the plan says %llu", name,
          ops->name, start, (unsigned long long)want);
    int kept = ops->keep_reserve(b, 2);
    size_t after_kept = ops->allocated_bytes(b);
    want = (uint64_t)kept * plan_kept_pass_bytes(c, cuda);
    check(after_kept - start == want, "%s (%s): %d kept passes took %zu bytes, the plan says %llu",
          name, ops->name, kept, after_kept - start, (unsigned long long)want);
    int att = ops->attention_reserve(b, 3);
    size_t after_att = ops->allocated_bytes(b);
    want = (uint64_t)att * plan_attention_slot_bytes(c, cuda);
    check(att == 3 && after_att - after_kept == want,
          "%s (%s): %d attention outputs took %zu bytes, the plan says %llu", name, ops->name, att,
          after_att - after_kept, (unsigned long long)want);
}

#ifdef MT_HAVE_CUDA
static size_t device_used(void) {
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
    return total - free_bytes;
}

// The counter against the device, on the first backend (later ones may reuse what the driver
// kept of the ones before): the memory it took is at least what it counted.
static int run_cuda(const named_config *cs, int n) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    for (int i = 0; i < n; i++) {
        if (cs[i].cpu_only) continue;
        size_t before = device_used();
        backend *b = backend_cuda_new(&cs[i].c, 0);
        if (!b) return printf("SKIPPED: no CUDA device\n"), 77;
        const backend_ops *ops = backend_cuda_ops();
        size_t taken = device_used() - before, counted = ops->allocated_bytes(b);
        if (i == 0)
            check(taken >= counted, "%s (cuda): the device lost %zu bytes, the counter says %zu",
                  cs[i].name, taken, counted);
        size_t host = backend_cuda_host_bytes(b);
        uint64_t want = plan_cuda_backend_host_bytes(&cs[i].c);
        check(host == want, "%s (cuda): %zu bytes of host memory allocated, the plan says %llu",
              cs[i].name, host, (unsigned long long)want);
        check_backend(cs[i].name, &cs[i].c, 1, ops, b);
        ops->destroy(b);
    }
    return tests_summary();
}
#endif

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "cuda") && strcmp(argv[1], "cpu")))
        return fprintf(stderr, "usage: test_plan_allocation cuda|cpu\n"), 2;
    named_config cs[16];
    int n = configs(cs);
    if (strcmp(argv[1], "cuda") == 0) {
#ifdef MT_HAVE_CUDA
        return run_cuda(cs, n);
#else
        printf("SKIPPED: no CUDA device (a build without the CUDA backend)\n");
        return 77;
#endif
    }
    for (int i = 0; i < n; i++) {
        backend *b = backend_cpu_new(&cs[i].c);
        check_backend(cs[i].name, &cs[i].c, 0, backend_cpu_ops(), b);
        backend_cpu_ops()->destroy(b);
    }
    return tests_summary();
}
