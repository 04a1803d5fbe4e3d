// The control plane over UCX active messages. Each message travels as the AM *header* with no
// data, so the receive callback always has it inline and never needs a rendezvous. Received
// messages go into a local FIFO; control_recv sleeps on the worker's event fd while it is empty.
#include "runtime/job/control.h"
#include "runtime/base/base.h"
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

enum { CONTROL_AM_ID = 7 };

// A safety net, not the wake-up mechanism: the event fd wakes a blocked rank as soon as a
// message arrives. If a transport ever failed to signal, a sleeper would still look again
// this often instead of hanging forever; the cost is a few microseconds of CPU per timeout.
enum { CONTROL_POLL_MS = 100 };

// What travels on the wire. seq counts messages from one sender to one receiver: seq 0 is the
// hello of control_init, so the receiver can check the order that control_send promises.
typedef struct {
    int32_t src;
    uint32_t seq;
    control_msg msg;
} wire_msg;

typedef struct {
    int src;
    control_msg msg;
} fifo_item;

typedef struct {
    mt_control *ctl;
    ucp_ep_h ep; // NULL for ranks we have no endpoint to
    int rank;
    int same_node;
    int failed; // the error handler fired: close with FORCE, a flush would never finish
    uint32_t send_seq, recv_seq;
} peer;

// A send that did not complete at once keeps its header here until UCX is done with it.
typedef struct {
    mt_control *ctl;
    wire_msg wire;
} pending_send;

struct mt_control {
    MPI_Comm comm;
    int rank, size;
    ucp_context_h context;
    ucp_worker_h worker;
    int efd;
    peer *peers;     // indexed by rank
    fifo_item *fifo; // ring buffer of received messages
    size_t head, count, cap;
    int inflight;    // sends not yet completed
    int hellos;      // hellos received during control_init
    int closing;     // control_finalize has begun: peers going away is expected
    unsigned events; // bumped by every callback, so a wait notices work done in progress
    long backoff_ns; // current sleep of back_off; 0 after any progress
};

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) mt_die("control: out of memory (%zu bytes)", n);
    return p;
}

static void fifo_push(mt_control *ctl, int src, const control_msg *msg) {
    if (ctl->count == ctl->cap) {
        // Grow and unwrap: the items move to the front of the new buffer in order.
        size_t cap = ctl->cap ? 2 * ctl->cap : 64;
        fifo_item *items = xmalloc(cap * sizeof *items);
        for (size_t i = 0; i < ctl->count; i++) items[i] = ctl->fifo[(ctl->head + i) % ctl->cap];
        free(ctl->fifo);
        ctl->fifo = items, ctl->cap = cap, ctl->head = 0;
    }
    ctl->fifo[(ctl->head + ctl->count) % ctl->cap] = (fifo_item){.src = src, .msg = *msg};
    ctl->count++;
}

static int fifo_pop(mt_control *ctl, control_msg *msg) {
    fifo_item *item = &ctl->fifo[ctl->head];
    *msg = item->msg;
    ctl->head = (ctl->head + 1) % ctl->cap;
    ctl->count--;
    return item->src;
}

// Runs inside ucp_worker_progress. The header is copied out because UCX gives no alignment.
static ucs_status_t am_recv(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param) {
    mt_control *ctl = arg;
    wire_msg w;
    if (header_length != sizeof w || length != 0)
        mt_die("control: malformed message (%zu+%zu bytes)", header_length, length);
    // A message still on its way when control_finalize began was never going to be received,
    // and its sender's endpoint may already be closed here.
    if (ctl->closing) return UCS_OK;
    memcpy(&w, header, sizeof w);
    if (w.src < 0 || w.src >= ctl->size || !ctl->peers[w.src].ep)
        mt_die("control: rank %d got a message from unexpected rank %d", ctl->rank, (int)w.src);
    peer *p = &ctl->peers[w.src];
    if (w.seq != p->recv_seq)
        mt_die("control: rank %d got message %u from rank %d, expected %u", ctl->rank,
               (unsigned)w.seq, p->rank, (unsigned)p->recv_seq);
    p->recv_seq++;
    if (w.seq == 0)
        ctl->hellos++;
    else
        fifo_push(ctl, w.src, &w.msg);
    ctl->events++;
    return UCS_OK;
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    peer *p = arg;
    p->failed = 1;
    if (!p->ctl->closing)
        mt_die("control: rank %d lost its connection to rank %d: %s", p->ctl->rank, p->rank,
               ucs_status_string(status));
}

static void send_done(void *request, ucs_status_t status, void *user_data) {
    pending_send *s = user_data;
    mt_control *ctl = s->ctl;
    if (status != UCS_OK && !ctl->closing)
        mt_die("control: send from rank %d failed: %s", ctl->rank, ucs_status_string(status));
    ctl->inflight--;
    ctl->events++;
    free(s);
    ucp_request_free(request);
}

// Sends queued in UCX because the receiver's shared-memory FIFO is full complete only once the
// receiver drains it, and nothing signals the sender then: ucp_worker_arm keeps returning BUSY.
// Rather than spin, such a sender sleeps for a growing while (10 us to 1 ms) between tries.
static void back_off(mt_control *ctl) {
    ctl->backoff_ns = ctl->backoff_ns ? 2 * ctl->backoff_ns : 10000;
    if (ctl->backoff_ns > 1000000) ctl->backoff_ns = 1000000;
    struct timespec t = {0, ctl->backoff_ns};
    if (nanosleep(&t, NULL) == -1 && errno != EINTR) SYS_CHECK(-1);
}

// One step of a blocking wait: make progress if there is any to make, otherwise sleep in the
// kernel until the worker's event fd says a transport has something for us. The caller loops
// until its condition holds. ucp_worker_arm returns BUSY when events are still unprocessed
// (progress again at once) or while sends are queued (see back_off).
static void wait_step(mt_control *ctl) {
    unsigned events = ctl->events;
    if (ucp_worker_progress(ctl->worker) || ctl->events != events) {
        ctl->backoff_ns = 0;
        return;
    }
    ucs_status_t status = ucp_worker_arm(ctl->worker);
    if (status == UCS_ERR_BUSY) {
        if (ctl->inflight > 0) back_off(ctl);
        return;
    }
    UCS_CHECK(status);
    struct pollfd pfd = {.fd = ctl->efd, .events = POLLIN};
    int n = poll(&pfd, 1, CONTROL_POLL_MS);
    if (n == -1 && errno == EINTR) return;
    SYS_CHECK(n);
}

static void send_wire(mt_control *ctl, peer *p, const control_msg *msg) {
    // UCX 1.13 has no UCP_AM_SEND_FLAG_COPY_HEADER: the header must outlive the request.
    pending_send *s = xmalloc(sizeof *s);
    s->ctl = ctl;
    s->wire = (wire_msg){.src = ctl->rank, .seq = p->send_seq++};
    if (msg) s->wire.msg = *msg;
    ucp_request_param_t param = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_EAGER, // a few bytes: rendezvous would only add round trips
        .cb.send = send_done,
        .user_data = s,
    };
    ucs_status_ptr_t req =
        ucp_am_send_nbx(p->ep, CONTROL_AM_ID, &s->wire, sizeof s->wire, NULL, 0, &param);
    if (req == NULL) {
        free(s);
        return;
    }
    if (UCS_PTR_IS_ERR(req)) UCS_CHECK(UCS_PTR_STATUS(req));
    ctl->inflight++;
}

static void create_context(mt_control *ctl) {
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, // WAKEUP: only transports with events
        .estimated_num_eps = ctl->rank == 0 ? (size_t)ctl->size : 1,
    };
    UCS_CHECK(ucp_init(&params, NULL, &ctl->context));
    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    UCS_CHECK(ucp_worker_create(ctl->context, &wparams, &ctl->worker));
    UCS_CHECK(ucp_worker_get_efd(ctl->worker, &ctl->efd));
    ucp_am_handler_param_t am = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = CONTROL_AM_ID,
        .cb = am_recv,
        .arg = ctl,
    };
    UCS_CHECK(ucp_worker_set_am_recv_handler(ctl->worker, &am));
}

// Ranks on one node share an id: the comm rank of the node's first rank.
static int node_id(MPI_Comm comm) {
    MPI_Comm node;
    int id;
    MPI_CHECK(MPI_Comm_rank(comm, &id));
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, id, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Bcast(&id, 1, MPI_INT, 0, node));
    MPI_CHECK(MPI_Comm_free(&node));
    return id;
}

// Every rank learns every worker address (rank 0 uses all of them, the others only rank 0's)
// and which ranks share its node. Returns the addresses back to back and sets offsets.
static char *exchange_addresses(mt_control *ctl, int **offsets) {
    ucp_address_t *addr;
    size_t len;
    UCS_CHECK(ucp_worker_get_address(ctl->worker, &addr, &len));
    int mine[2] = {(int)len, node_id(ctl->comm)};
    int *info = xmalloc(2 * ctl->size * sizeof *info), *lens = xmalloc(ctl->size * sizeof *lens);
    MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, info, 2, MPI_INT, ctl->comm));
    *offsets = xmalloc(ctl->size * sizeof **offsets);
    int total = 0;
    for (int r = 0; r < ctl->size; r++) {
        lens[r] = info[2 * r], (*offsets)[r] = total, total += lens[r];
        ctl->peers[r].same_node = info[2 * r + 1] == mine[1];
    }
    char *all = xmalloc(total);
    MPI_CHECK(MPI_Allgatherv(addr, mine[0], MPI_BYTE, all, lens, *offsets, MPI_BYTE, ctl->comm));
    ucp_worker_release_address(ctl->worker, addr);
    free(info);
    free(lens);
    return all;
}

// Error mode PEER makes a dead rank fail our requests and call ep_error instead of leaving us
// waiting. Across nodes the network transports support it natively. Shared memory offers it
// only when asked (UCX_MM_ERROR_HANDLING=y, off by default), and without it PEER would push
// on-node traffic onto TCP loopback; on one node mpirun's daemon notices a dead rank at once
// and ends the job anyway, so same-node endpoints use mode NONE and keep shared memory.
static void connect_peer(mt_control *ctl, int r, const void *addr) {
    peer *p = &ctl->peers[r];
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = p->same_node ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error, .arg = p},
    };
    UCS_CHECK(ucp_ep_create(ctl->worker, &params, &p->ep));
}

// Wire-up finishes asynchronously. Each side sends a hello (seq 0) on each endpoint and waits
// for the peer's, so the connection has carried traffic both ways before control_init returns.
static void handshake(mt_control *ctl) {
    int expected = 0;
    for (int r = 0; r < ctl->size; r++) {
        if (!ctl->peers[r].ep) continue;
        send_wire(ctl, &ctl->peers[r], NULL);
        expected++;
    }
    while (ctl->hellos < expected || ctl->inflight > 0) wait_step(ctl);
    MPI_CHECK(MPI_Barrier(ctl->comm));
}

// Diagnostics: MT_CONTROL_INFO=1 prints the transports UCX chose for each endpoint.
static void print_info(mt_control *ctl) {
    if (!getenv("MT_CONTROL_INFO")) return;
    for (int r = 0; r < ctl->size; r++) {
        if (!ctl->peers[r].ep) continue;
        fprintf(stderr, "control: rank %d -> rank %d:\n", ctl->rank, r);
        ucp_ep_print_info(ctl->peers[r].ep, stderr);
    }
}

mt_control *control_init(MPI_Comm comm) {
    mt_control *ctl = xmalloc(sizeof *ctl);
    *ctl = (mt_control){.comm = comm};
    MPI_CHECK(MPI_Comm_rank(comm, &ctl->rank));
    MPI_CHECK(MPI_Comm_size(comm, &ctl->size));
    ctl->peers = xmalloc(ctl->size * sizeof *ctl->peers);
    for (int r = 0; r < ctl->size; r++) ctl->peers[r] = (peer){.ctl = ctl, .rank = r};
    create_context(ctl);
    int *offsets;
    char *addrs = exchange_addresses(ctl, &offsets);
    for (int r = 0; r < ctl->size; r++)
        if (r != ctl->rank && (ctl->rank == 0 || r == 0)) connect_peer(ctl, r, addrs + offsets[r]);
    free(addrs);
    free(offsets);
    handshake(ctl);
    print_info(ctl);
    return ctl;
}

static peer *peer_of(mt_control *ctl, int rank) {
    if (rank < 0 || rank >= ctl->size || !ctl->peers[rank].ep)
        mt_die("control: rank %d has no endpoint to rank %d", ctl->rank, rank);
    return &ctl->peers[rank];
}

void control_send(mt_control *ctl, int dest, const control_msg *msg) {
    // Earlier sends still queued in UCX (the receiver's FIFO was full) move only when this
    // worker progresses: push them along, so a rank that computes between sends does not hold
    // back messages its peer is waiting for.
    if (ctl->inflight > 0) ucp_worker_progress(ctl->worker);
    send_wire(ctl, peer_of(ctl, dest), msg);
}

int control_recv(mt_control *ctl, control_msg *msg) {
    while (ctl->count == 0) wait_step(ctl);
    return fifo_pop(ctl, msg);
}

int control_recv_within(mt_control *ctl, control_msg *msg, double seconds) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (ctl->count == 0) {
        wait_step(ctl); // sleeps at most CONTROL_POLL_MS
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (ctl->count == 0 && (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > seconds)
            return -1;
    }
    return fifo_pop(ctl, msg);
}

int control_try_recv(mt_control *ctl, control_msg *msg) {
    if (ctl->count == 0) ucp_worker_progress(ctl->worker);
    return ctl->count ? fifo_pop(ctl, msg) : -1;
}

// Starts a close; returns the request to wait on, or NULL when it finished at once.
static void *close_ep(peer *p) {
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = p->failed ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    ucs_status_ptr_t req = ucp_ep_close_nbx(p->ep, &param);
    p->ep = NULL;
    // An error here means the peer is already gone; the endpoint is released either way.
    return UCS_PTR_IS_PTR(req) ? req : NULL;
}

// Closes every endpoint in flush mode at once, then waits for all of the closes together.
static void close_all(mt_control *ctl) {
    void **reqs = xmalloc(ctl->size * sizeof *reqs);
    for (int r = 0; r < ctl->size; r++)
        reqs[r] = ctl->peers[r].ep ? close_ep(&ctl->peers[r]) : NULL;
    for (int r = 0; r < ctl->size; r++) {
        if (!reqs[r]) continue;
        while (ucp_request_check_status(reqs[r]) == UCS_INPROGRESS) wait_step(ctl);
        ucp_request_free(reqs[r]);
    }
    free(reqs);
}

// Every rank's sends have completed. A rank keeps taking messages in while it waits for the
// others: a peer's last messages (rank 0 reads no one's after its last step) may still sit in
// the sender's queue, beyond what the transport's receive FIFO holds, and they complete only as
// the receiver progresses; a plain MPI_Barrier here deadlocked once a job's last step left more
// than UCX's shared-memory FIFO (64 entries) unread.
static void barrier_progressing(mt_control *ctl) {
    MPI_Request req;
    int done = 0;
    MPI_CHECK(MPI_Ibarrier(ctl->comm, &req));
    for (;;) {
        int progressed = ucp_worker_progress(ctl->worker) > 0;
        if (!done && ctl->inflight == 0) {
            MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
            if (done) return;
        }
        if (progressed)
            ctl->backoff_ns = 0;
        else
            back_off(ctl);
    }
}

// Messages that were sent but not yet received are discarded.
void control_finalize(mt_control *ctl) {
    // From here on a peer closing its side is expected, not an error.
    ctl->closing = 1;
    barrier_progressing(ctl);
    ctl->count = 0; // the unread messages
    close_all(ctl);
    // No rank destroys its worker while another may still be flushing towards it, and a flush
    // over TCP completes only as the far side progresses, so this barrier progresses too.
    barrier_progressing(ctl);
    ucp_worker_destroy(ctl->worker);
    ucp_cleanup(ctl->context);
    free(ctl->peers);
    free(ctl->fifo);
    free(ctl);
}
