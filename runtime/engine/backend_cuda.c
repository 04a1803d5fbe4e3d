// The CUDA backend: its buffers, all allocated here at start, one compute stream and the copy
// streams of the activation offload, and the operations the engine calls (the layer and the
// head are in layer_cuda.c).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/kernels_gdn_cuda.h"
#include "runtime/engine/alloc_cuda.h"
#include "runtime/engine/host_buffers.h"
#include "runtime/engine/layer_cuda.h"
#include "runtime/engine/layer_parts_cuda.h"
#include "runtime/engine/moe_cuda.h"
#include "runtime/model/model.h"
#include "shm/syscheck.h"
#include <math.h>
#include <numa.h>
#include <stdlib.h>
#include <string.h>

static void cu_release(backend *b, void *p) {
    CUDA_CHECK(cudaFree(p));
}

static void cu_upload(backend *b, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
}
static void cu_download(backend *b, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
}

static void cu_load_tokens(backend *b, const int32_t *inputs, const int32_t *targets,
                           const int32_t *doc_start, int count) {
    size_t bytes = sizeof(int32_t) * count * tokens(b);
    CUDA_CHECK(cudaMemcpyAsync(b->inputs, inputs, bytes, cudaMemcpyHostToDevice, b->s));
    CUDA_CHECK(cudaMemcpyAsync(b->targets, targets, bytes, cudaMemcpyHostToDevice, b->s));
    // Tokens without document starts (sampling's context) hold one document a row: the last
    // batch's starts, of another shape, must not be read for them.
    if (b->has_docs) memset(b->has_docs, 0, (size_t)count);
    if (b->doc_start && doc_start) {
        CUDA_CHECK(cudaMemcpyAsync(b->doc_start, doc_start, bytes, cudaMemcpyHostToDevice, b->s));
        for (int m = 0; m < count; m++) {
            const int32_t *ds = doc_start + (size_t)m * tokens(b);
            for (int i = 0; i < tokens(b) && !b->has_docs[m]; i++) b->has_docs[m] = ds[i] != 0;
            if (b->gdn_chunks) b->gdn_chunks[m] = gdn_max_chunks(ds, b->B, b->T);
        }
    }
    // The host buffers are reused for the next batch: the copies must have read them.
    CUDA_CHECK(cudaStreamSynchronize(b->s));
}

static void cu_embed_forward(backend *b, float *out, const void *table, int m) {
    cuda_embedding_forward(out, b->inputs + (size_t)m * tokens(b), table, tokens(b),
                           b->c->model.dim, b->s);
}

static void cu_embed_backward(backend *b, float *dtable, const float *dout, int m) {
    cuda_embedding_backward(dtable, dout, b->inputs + (size_t)m * tokens(b), tokens(b),
                            b->c->model.dim, b->s);
}

// Summed on the host in token order: deterministic, and one small copy per step.
static double cu_take_loss(backend *b) {
    size_t count = (size_t)b->loss_micro * tokens(b);
    CUDA_CHECK(cudaMemcpyAsync(b->losses_host, b->losses, count * sizeof(float),
                               cudaMemcpyDeviceToHost, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
    double total = 0;
    for (size_t i = 0; i < count; i++) total += b->losses_host[i];
    b->loss_micro = 0;
    return total;
}

static void cu_head_moe(backend *b, const void *head_w, const void *cls_w, float *head_g,
                        float *cls_g, const float *x, float *dx, int m, float dloss, float daux) {
    cu_moe_head(b, m, daux);
    cu_head(b, head_w, cls_w, head_g, cls_g, x, dx, m, dloss);
}

static double cu_take_aux(backend *b, int64_t *load) {
    return b->moe.layers ? cu_moe_take_aux(b, load) : 0.0;
}

static void cu_set_shape(backend *b, int B, int T) {
    b->B = B, b->T = T;
}

static void cu_last_logits(backend *b, const void *head_w, const void *cls_w, const float *x,
                           int len, float *host_logits) {
    const mt_model *m = &b->c->model;
    const float *last = x + (size_t)(len - 1) * m->dim;
    cu_norm_forward(b, b->xf, b->rstd_f, last, head_w, 1, m->dim);
    cuda_linear_forward(b->gemm, b->logits, 1, 0, b->xf, cls_w, 1, m->dim, m->vocab, b->s);
    CUDA_CHECK(cudaMemcpyAsync(host_logits, b->logits, sizeof(float) * m->vocab,
                               cudaMemcpyDeviceToHost, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
}

// Kept slots fill the free device memory but for a margin, in one allocation: 1 GiB for the
// allocations the CUDA runtime and libraries may still make (MT_GPU_MARGIN_GIB sets another).
// A kept slot (whole) holds h, gate and up for the micro-batch, the working set for a chunk.
static int cu_keep_reserve(backend *b, int wanted) {
    mt_buffer_list l;
    mt_buffers_cuda_saved(&l, &b->shape, 1);
    size_t bytes = mt_buffer_list_bytes(&l), free_bytes, total;
    if (b->seq_chunk < b->max_tokens) wanted = 0; // chunked: the backward recomputes by chunk
    if (!plan_cuda_keeps_passes(&b->c->model))
        wanted = 0; // a kept slot lacks what their backward reads
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    const char *env = getenv("MT_GPU_MARGIN_GIB");
    double gib = env && atof(env) > 0 ? atof(env) : 1.0;
    size_t margin = (size_t)(gib * 1073741824.0);
    long fit = free_bytes > margin ? (long)((free_bytes - margin) / bytes) : 0;
    int n = wanted < fit ? wanted : (int)fit;
    while (n > 0 && cudaMalloc(&b->kept_arena, bytes * n) != cudaSuccess) {
        cudaGetLastError(); // not sticky: try a little less
        n = n * 9 / 10;
    }
    if (n > 0) b->allocated += bytes * n;
    b->kept = calloc(n + 1, sizeof *b->kept);
    if (!b->kept) mt_die("out of memory");
    for (int i = 0; i < n; i++) {
        void **slots[] = {MT_CUDA_SAVED(MT_BUFFER_SLOT, &b->kept[i], _, _)};
        cu_point_parts(&l, (char *)b->kept_arena + bytes * i, slots);
    }
    return b->n_kept = n;
}

// Kept attention outputs: slots of the list MT_CUDA_ATTENTION_SLOT, in one allocation.
static int cu_attention_reserve(backend *b, int slots) {
    mt_buffer_list l;
    mt_buffers_cuda_attention_slot(&l, &b->shape);
    size_t bytes = mt_buffer_list_bytes(&l);
    while (slots > 0 && cudaMalloc(&b->att_arena, bytes * slots) != cudaSuccess) {
        cudaGetLastError(); // not sticky: try fewer (the caller says how many it got)
        slots--;
    }
    if (slots > 0) b->allocated += bytes * slots;
    b->att = calloc(slots + 1, sizeof *b->att);
    b->lse = calloc(slots + 1, sizeof *b->lse);
    if (!b->att || !b->lse) mt_die("out of memory");
    for (int i = 0; i < slots; i++) {
#define SLOT_I(o, type, name, count) (void **)(1 ? &(o)->name[i] : (type **)0),
        void **parts[] = {MT_CUDA_ATTENTION_SLOT(SLOT_I, b, _)};
#undef SLOT_I
        cu_point_parts(&l, (char *)b->att_arena + bytes * i, parts);
    }
    return b->n_att = slots;
}

// The layer's working set (buffers.h): its saved tensors for a chunk in one allocation, the
// rest of its buffers, qk_norm's, the output gate's, Gated DeltaNet's and the latent attention's.
static void alloc_layer_set(backend *b) {
    mt_buffer_list l;
    mt_buffers_cuda_saved(&l, &b->shape, 0);
    void **saved[] = {MT_CUDA_SAVED(MT_BUFFER_SLOT, &b->work, _, _)};
    cu_carve(b, &l, CU_SLOTS(saved));
    mt_buffers_cuda_layer(&l, &b->shape);
    void **layer[] = {MT_CUDA_LAYER(MT_BUFFER_SLOT, b, _)};
    cu_carve(b, &l, CU_SLOTS(layer));
    mt_buffers_cuda_qk_norm(&l, &b->shape);
    void **qk[] = {MT_CUDA_QK_NORM(MT_BUFFER_SLOT, b, _)};
    cu_carve(b, &l, CU_SLOTS(qk));
    mt_buffers_cuda_gate(&l, &b->shape);
    void **gate[] = {MT_CUDA_GATE(MT_BUFFER_SLOT, b, _)};
    cu_carve(b, &l, CU_SLOTS(gate));
    mt_buffers_cuda_gdn(&l, &b->shape);
    void **gdn[] = {MT_CUDA_GDN(MT_BUFFER_SLOT, b, _)};
    cu_carve(b, &l, CU_SLOTS(gdn));
    mt_buffers_cuda_mla(&l, &b->shape);
    void **mla[] = {MT_CUDA_MLA(MT_BUFFER_SLOT, b, _)};
    cu_carve(b, &l, CU_SLOTS(mla));
}

static void alloc_head_set(backend *b) {
    b->chunk = (int)b->shape.cls_chunk;
    mt_buffer_list l;
    mt_buffers_cuda_head(&l, &b->shape);
    void **head[] = {MT_CUDA_HEAD(MT_BUFFER_SLOT, b, _)};
    cu_carve(b, &l, CU_SLOTS(head));
}

// The backend's host memory (buffers.h): pinned (counted in b->host_allocated), then plain.
static void alloc_host_set(backend *b) {
    mt_buffer_list l;
    mt_buffers_cuda_pinned(&l, &b->shape);
    void **pinned[] = {MT_CUDA_PINNED(MT_BUFFER_SLOT, b, _)};
    for (int i = 0; i < l.n; i++) {
        *pinned[i] = NULL;
        if (!l.bytes[i]) continue;
        CUDA_CHECK(cudaMallocHost(pinned[i], l.bytes[i]));
        b->host_allocated += l.bytes[i];
    }
    mt_buffers_cuda_host(&l, &b->shape);
    void **host[] = {MT_CUDA_HOST(MT_BUFFER_SLOT, b, _)};
    b->host_allocated += host_buffers_new(&l, HOST_SLOTS(host), "the CUDA backend's host buffers");
}

static void free_host_set(backend *b) {
    void **pinned[] = {MT_CUDA_PINNED(MT_BUFFER_SLOT, b, _)};
    for (size_t i = 0; i < sizeof pinned / sizeof *pinned; i++)
        if (*pinned[i]) CUDA_CHECK(cudaFreeHost(*pinned[i]));
    void **host[] = {MT_CUDA_HOST(MT_BUFFER_SLOT, b, _)};
    host_buffers_free(HOST_SLOTS(host));
}

static size_t cu_device_free(backend *b) {
    size_t free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
}

static void *cu_host_alloc(backend *b, size_t bytes) {
    void *p = NULL;
    cudaError_t rc = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (rc != cudaSuccess)
        mt_die("out of pinned host memory allocating %zu MiB for offloaded activations (%s)",
               bytes >> 20, cudaGetErrorString(rc));
    return p;
}
static void cu_host_release(backend *b, void *p) {
    CUDA_CHECK(cudaFreeHost(p));
}

// The copy stream s waits for the compute queued so far.
static void after_compute(backend *b, cudaStream_t s) {
    CUDA_CHECK(cudaEventRecord(b->queued, b->s));
    CUDA_CHECK(cudaStreamWaitEvent(s, b->queued, 0));
}
static void cu_to_host(backend *b, void *dst, const void *src, size_t bytes, int slot) {
    after_compute(b, b->to_host_s);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, b->to_host_s));
    CUDA_CHECK(cudaEventRecord(b->slot_done[slot], b->to_host_s));
}
static void cu_from_host(backend *b, void *dst, const void *src, size_t bytes, int slot) {
    after_compute(b, b->from_host_s);
    CUDA_CHECK(cudaStreamWaitEvent(b->from_host_s, b->slot_done[slot], 0));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->from_host_s));
    CUDA_CHECK(cudaEventRecord(b->slot_done[slot], b->from_host_s));
}
static void cu_slot_wait(backend *b, int slot) {
    CUDA_CHECK(cudaStreamWaitEvent(b->s, b->slot_done[slot], 0));
}

static void offload_streams_new(backend *b) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&b->to_host_s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&b->from_host_s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&b->queued, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&b->slot_done[i], cudaEventDisableTiming));
}

static void offload_streams_free(backend *b) {
    CUDA_CHECK(cudaStreamSynchronize(b->to_host_s));
    CUDA_CHECK(cudaStreamSynchronize(b->from_host_s));
    CUDA_CHECK(cudaStreamDestroy(b->to_host_s));
    CUDA_CHECK(cudaStreamDestroy(b->from_host_s));
    CUDA_CHECK(cudaEventDestroy(b->queued));
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaEventDestroy(b->slot_done[i]));
}

static void cu_destroy(backend *b) {
    CUDA_CHECK(cudaStreamSynchronize(b->s));
    cuda_ktime_report(stdout);
    cuda_ktime_disable();
    for (int i = 0; i < b->n_owned; i++) CUDA_CHECK(cudaFree(b->owned[i]));
    CUDA_CHECK(cudaFree(b->kept_arena)); // NULL: no-op
    CUDA_CHECK(cudaFree(b->att_arena));
    free_host_set(b);
    free(b->kept), free(b->att), free(b->lse);
    cuda_gemm_free(b->gemm);
    offload_streams_free(b);
    CUDA_CHECK(cudaStreamDestroy(b->s));
    free(b);
}

// Every buffer is allocated at start and none inside a step, so what the device has in use
// now (context and cuBLAS workspace included) is the run's peak.
static size_t cu_device_bytes(backend *b) {
    size_t free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return total - free_bytes;
}

static void cu_adamw(backend *b, float *p, float *m, float *v, void *w, const float *g, size_t n,
                     const adamw_params *hp) {
    adamw_consts k;
    adamw_consts_init(&k, hp);
    cuda_adamw(p, m, v, (bf16 *)w, g, (long)n, &k, b->s);
}

static void cu_weights_of(backend *b, void *w, const float *p, size_t n) {
    cuda_float_to_bf16((bf16 *)w, p, (long)n, b->s);
}

static size_t cu_allocated_bytes(backend *b) {
    return b->allocated;
}

size_t backend_cuda_host_bytes(backend *b) {
    return b->host_allocated;
}

void *backend_cuda_compute_stream(backend *b) {
    return b->s;
}

// The same float frequencies as the CPU reference (and transformers), computed once on the host,
// into the layer set's inv_freq.
static void upload_inv_freq(backend *b) {
    int half = mt_rope_dim(&b->c->model) / 2;
    float *host = malloc(sizeof(float) * half);
    if (!host) mt_die("out of memory");
    b->rope_scale = model_rope_inv_freq(&b->c->model, host);
    CUDA_CHECK(cudaMemcpy(b->inv_freq, host, sizeof(float) * half, cudaMemcpyHostToDevice));
    free(host);
}

// The NUMA node the kernel reports for GPU dev's PCI device; -1 when it does not say.
static int gpu_numa_node(int dev) {
    char bus[32];
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
    return mt_pci_numa_node(bus);
}

// The compute rank runs, and takes its pinned host memory, on the NUMA node nearest its GPU
// (with several GPUs per host each compute rank's own): its copies then cross no socket link.
// mpirun bound it to a node by rank order, which knows nothing of GPUs.
static void run_near_gpu(int dev) {
    if (numa_available() < 0 || numa_num_configured_nodes() < 2) return;
    int node = gpu_numa_node(dev);
    if (node < 0) return;
    if (numa_run_on_node(node) < 0) { // e.g. a cpuset (Slurm, a container) without its cores
        printf("compute rank: GPU %d is on NUMA node %d, whose cores this process may not use "
               "(%s): running where mpirun placed it\n",
               dev, node, strerror(errno));
        return;
    }
    numa_set_preferred(node);
    printf("compute rank: GPU %d is on NUMA node %d: running and allocating there\n", dev, node);
}

backend *backend_cuda_new(const mt_config *c, int device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError(); // clear the sticky "no device" error
        return NULL;
    }
    cu_layers_check(&c->model);
    CUDA_CHECK(cudaSetDevice(device % count));
    run_near_gpu(device % count);
    backend *b = calloc(1, sizeof *b);
    if (!b) mt_die("out of memory");
    b->c = c;
    b->B = c->micro_batch, b->T = c->seq_len, b->max_tokens = b->B * b->T;
    b->seq_chunk = mt_chunk_of(c, b->max_tokens);
    mt_buffer_shape_of(&b->shape, c, b->B, b->T);
    for (int l = 0; l < c->model.layers; l++) {
        const mt_layer_kind *kind = mt_layer_kind_of(&c->model, l);
        model_layer_offsets(&c->model, l, b->offsets[kind->attention][kind->mlp]);
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking));
    cuda_ktime_enable(b->s);
    offload_streams_new(b);
    b->gemm = cuda_gemm_new(MT_CUDA_GEMM_WORKSPACE);
    b->allocated += MT_CUDA_GEMM_WORKSPACE; // the workspace cuda_gemm_new allocates
    alloc_layer_set(b);
    upload_inv_freq(b);
    alloc_host_set(b);
    cu_moe_alloc(b);
    alloc_head_set(b);
    return b;
}

const backend_ops *backend_cuda_ops(void) {
    static const backend_ops ops = {
        "cuda",
        2,
        1,
        cu_alloc,
        cu_release,
        cu_zero,
        cu_copy,
        cu_upload,
        cu_download,
        cu_load_tokens,
        cu_embed_forward,
        cu_embed_backward,
        cu_keep_reserve,
        cu_attention_reserve,
        cu_layer_forward,
        cu_layer_backward,
        cu_head_moe,
        cu_take_loss,
        cu_take_aux,
        cu_set_shape,
        cu_last_logits,
        cu_destroy,
        cu_device_bytes,
        cu_device_free,
        cu_host_alloc,
        cu_host_release,
        cu_to_host,
        cu_from_host,
        cu_slot_wait,
        cu_adamw,
        cu_weights_of,
        cu_moe_set_frozen,
        cu_allocated_bytes,
    };
    return &ops;
}
