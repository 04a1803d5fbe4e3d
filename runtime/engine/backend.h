// A compute backend: where the engine's buffers live and how a layer, the head and the
// embedding run. The engine's schedule (what streams when, layer-major order, recompute) is
// the same for every backend; only these operations differ. Buffers are backend memory that
// the engine passes around but never dereferences.
#ifndef MT_BACKEND_H
#define MT_BACKEND_H

#include "kernels/adamw.h"
#include "runtime/model/model.h"
#include <stddef.h>
#include <stdint.h>

typedef struct backend backend;

// A layer pass's attention output (keep_attention): in the working set (slot < 0), or in slot
// `slot` of attention_reserve's, which the pass fills (ready = 0) or reads instead of running
// the attention kernel again (ready = 1: the same kernel on the same inputs gave those bits).
typedef struct {
    int slot, ready;
} att_ref;
#define ATT_NONE ((att_ref){-1, 0})

typedef struct {
    const char *name;
    int weight_bytes; // bytes per weight element in a fetched buffer: 4 (fp32) or 2 (bf16)
    int async;        // 1: compute calls only queue the work (CUDA); 0: they do it (CPU)
    void *(*alloc)(backend *b, size_t bytes);
    void (*release)(backend *b, void *p);
    void (*zero)(backend *b, void *p, size_t bytes);
    void (*copy)(backend *b, void *dst, const void *src, size_t bytes);
    void (*upload)(backend *b, void *dst, const void *host_src, size_t bytes);
    void (*download)(backend *b, void *host_dst, const void *src, size_t bytes); // waits
    // The step's tokens for `count` micro-batches, each [B * T], from host memory; doc_start
    // (data.pack "documents"): where each token's document starts in its row, or NULL.
    void (*load_tokens)(backend *b, const int32_t *inputs, const int32_t *targets,
                        const int32_t *doc_start, int count);
    void (*embed_forward)(backend *b, float *out, const void *table, int m);
    void (*embed_backward)(backend *b, float *dtable, const float *dout, int m);
    // Kept activations: room for up to `wanted` layer internals (one layer over one
    // micro-batch each) in memory the backend can spare; returns how many slots it reserved.
    int (*keep_reserve)(backend *b, int wanted);
    // Room for `slots` attention outputs (att_ref); returns how many it reserved.
    int (*attention_reserve)(backend *b, int slots);
    // Layer l over micro-batch m. keep >= 0: the internals go to that slot, for a backward that
    // then needs no recompute. A MoE layer records its routing for (m, l): the load-balancing
    // loss and the expert load (take_aux).
    void (*layer_forward)(backend *b, int l, int m, const void *w, const float *x, float *out,
                          int keep, att_ref att);
    // Accumulates dw and writes dx, from slot `keep`'s internals, or (keep < 0) recomputing
    // them from x (attention's output from att when it is ready). All give the same bits. dx
    // may be dout: a token's dx depends on its own dout only, read before it is written.
    void (*layer_backward)(backend *b, int l, int m, const void *w, float *dw, const float *x,
                           const float *dout, float *dx, int keep, att_ref att);
    // Final norm + classifier + cross-entropy for micro-batch m; adds its losses to the running
    // sum. With dloss != 0 also writes dx and accumulates head_g (norm) and cls_g (classifier).
    // A MoE model's load-balancing loss of micro-batch m (its layers' forwards are done) joins
    // take_aux's sum; daux is its weight in the step's loss, whose gradient the MoE layers'
    // backwards of m then add (0: none).
    void (*head)(backend *b, const void *head_w, const void *cls_w, float *head_g, float *cls_g,
                 const float *x, float *dx, int m, float dloss, float daux);
    double (*take_loss)(backend *b); // the sum since the last call; waits for the device
    // MoE: the load-balancing losses of the micro-batches since the last call, summed, and
    // load[moe layer * E + e] += the tokens each expert got in them. 0 for a dense model.
    double (*take_aux)(backend *b, int64_t *load);
    // For sampling: run one sequence of `len` tokens (tokens loaded as micro-batch 0).
    void (*set_shape)(backend *b, int B, int T);
    void (*last_logits)(backend *b, const void *head_w, const void *cls_w, const float *x, int len,
                        float *host_logits);
    void (*destroy)(backend *b);
    // Device memory in use once everything is allocated (the steady state's peak); 0 on the CPU.
    size_t (*device_bytes_in_use)(backend *b);
    size_t (*device_bytes_free)(backend *b); // SIZE_MAX on the CPU
    // Activation offload: host memory the copies below can use at full speed (pinned), and
    // copies on two numbered slots. A copy starts once the compute queued so far is done (and,
    // into the device, once the slot's previous copy is); slot_wait makes the compute that
    // follows wait for the slot's last copy.
    void *(*host_alloc)(backend *b, size_t bytes);
    void (*host_release)(backend *b, void *p);
    void (*to_host)(backend *b, void *host_dst, const void *src, size_t bytes, int slot);
    void (*from_host)(backend *b, void *dst, const void *host_src, size_t bytes, int slot);
    void (*slot_wait)(backend *b, int slot);
    // AdamW over a group the compute rank updates itself (runtime/engine/device_groups.h): master
    // p, moments m and v in place from the gradients g, and its weights w as a fetch would have
    // brought them (bf16 on CUDA; bf16-rounded fp32 on the CPU). The optimizer ranks' bits.
    void (*adamw)(backend *b, float *p, float *m, float *v, void *w, const float *g, size_t n,
                  const adamw_params *hp);
    // The weights w a fetch would bring for fp32 master p (such a group's first weights).
    void (*weights_of)(backend *b, void *w, const float *p, size_t n);
    // Layer l's frozen tensors in fp32 (its frozen image, model_frozen_numel floats: engine/
    // frozen.h), read from now on in place of the fetched weights' rounding of them. A backend
    // driven without a job (the layer checks) never gets them and reads the fetched weights.
    void (*set_frozen)(backend *b, int l, const float *image);
    // The bytes the backend's allocator has given since it started (device bytes on CUDA, the
    // working sets' host bytes on the CPU), counted as they are requested: what the plan says
    // the backend takes (ctest plan_matches_allocation).
    size_t (*allocated_bytes)(backend *b);
} backend_ops;

const backend_ops *backend_cpu_ops(void);
backend *backend_cpu_new(const mt_config *c);
#ifdef MT_HAVE_CUDA
const backend_ops *backend_cuda_ops(void);
// On GPU `device` of the host's (modulo their count: virtual nodes may share one); NULL when
// there is no usable GPU.
backend *backend_cuda_new(const mt_config *c, int device);
void *backend_cuda_compute_stream(backend *b); // the cudaStream_t transfers order against
// The host bytes the CUDA backend allocated for itself (plan_cuda_backend_host_bytes's).
size_t backend_cuda_host_bytes(backend *b);
#endif

#endif
