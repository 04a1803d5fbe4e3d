#include "runtime/engine/stream.h"
#include "runtime/base/base.h"
#include "shm/syscheck.h"
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define STREAM_QUEUE 64

typedef struct {
    stream_job_fn fn;
    void *arg;
    trace_tag tag;
} stream_job;

struct copy_stream {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stream_job queue[STREAM_QUEUE];
    uint64_t submitted, completed;
    double busy_seconds;
    int stopping, trace_track;
};

#define PT_CHECK(call)                                                                             \
    do {                                                                                           \
        int pt_rc_ = (call);                                                                       \
        if (pt_rc_ != 0) mt_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, strerror(pt_rc_));     \
    } while (0)

static void *stream_main(void *p) {
    copy_stream *s = p;
    PT_CHECK(pthread_mutex_lock(&s->mu));
    for (;;) {
        while (s->completed == s->submitted && !s->stopping)
            PT_CHECK(pthread_cond_wait(&s->cv, &s->mu));
        if (s->completed == s->submitted) break;
        stream_job job = s->queue[s->completed % STREAM_QUEUE];
        PT_CHECK(pthread_mutex_unlock(&s->mu));
        double t0 = now_seconds();
        job.fn(job.arg);
        double dt = now_seconds() - t0;
        // Recorded here, on the worker, so the span is when the copy really ran.
        trace_record(s->trace_track, job.tag, t0 * 1e6, (t0 + dt) * 1e6);
        PT_CHECK(pthread_mutex_lock(&s->mu));
        s->busy_seconds += dt;
        s->completed++;
        PT_CHECK(pthread_cond_broadcast(&s->cv));
    }
    PT_CHECK(pthread_mutex_unlock(&s->mu));
    return NULL;
}

copy_stream *stream_new(const char *name, int trace_track) {
    copy_stream *s = calloc(1, sizeof *s);
    if (!s) mt_die("out of memory");
    s->trace_track = trace_track;
    PT_CHECK(pthread_mutex_init(&s->mu, NULL));
    PT_CHECK(pthread_cond_init(&s->cv, NULL));
    PT_CHECK(pthread_create(&s->thread, NULL, stream_main, s));
    pthread_setname_np(s->thread, name);
    return s;
}

uint64_t stream_submit(copy_stream *s, stream_job_fn fn, void *arg) {
    return stream_submit_tagged(s, fn, arg, (trace_tag){NULL, 0, 0, -1});
}

uint64_t stream_submit_tagged(copy_stream *s, stream_job_fn fn, void *arg, trace_tag tag) {
    PT_CHECK(pthread_mutex_lock(&s->mu));
    while (s->submitted - s->completed >= STREAM_QUEUE) PT_CHECK(pthread_cond_wait(&s->cv, &s->mu));
    s->queue[s->submitted % STREAM_QUEUE] = (stream_job){fn, arg, tag};
    uint64_t ticket = ++s->submitted;
    PT_CHECK(pthread_cond_broadcast(&s->cv));
    PT_CHECK(pthread_mutex_unlock(&s->mu));
    return ticket;
}

int stream_done(copy_stream *s, uint64_t ticket) {
    PT_CHECK(pthread_mutex_lock(&s->mu));
    int done = s->completed >= ticket;
    PT_CHECK(pthread_mutex_unlock(&s->mu));
    return done;
}

void stream_wait(copy_stream *s, uint64_t ticket) {
    PT_CHECK(pthread_mutex_lock(&s->mu));
    while (s->completed < ticket) PT_CHECK(pthread_cond_wait(&s->cv, &s->mu));
    PT_CHECK(pthread_mutex_unlock(&s->mu));
}

double stream_take_busy_seconds(copy_stream *s) {
    PT_CHECK(pthread_mutex_lock(&s->mu));
    double b = s->busy_seconds;
    s->busy_seconds = 0;
    PT_CHECK(pthread_mutex_unlock(&s->mu));
    return b;
}

void stream_free(copy_stream *s) {
    if (!s) return;
    PT_CHECK(pthread_mutex_lock(&s->mu));
    s->stopping = 1;
    PT_CHECK(pthread_cond_broadcast(&s->cv));
    PT_CHECK(pthread_mutex_unlock(&s->mu));
    PT_CHECK(pthread_join(s->thread, NULL));
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
