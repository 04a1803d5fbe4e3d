// TensorBoard event files: every run also writes its scalars where `tensorboard --logdir runs/`
// finds them, as HF Trainer and torchtune runs do.
//
// A minimal writer, documented here rather than a protobuf library: the file holds only scalars,
// so three small messages of TensorFlow's public event format are encoded by hand.
//
//   file    <run folder>/events.out.tfevents.<unix time>.<host>.<pid>.mtc (TensorBoard reads any
//           file whose name holds "tfevents"; one per process start, so a resume adds one)
//   record  TFRecord framing: uint64 length (little-endian), uint32 masked CRC-32C of those 8
//           bytes, the data, uint32 masked CRC-32C of the data; masked(c) = ((c >> 15) |
//           (c << 17)) + 0xa282ead8
//   data    a tensorflow.Event protobuf: wall_time (field 1, double), step (2, int64 varint),
//           and either file_version (3, string "brain.Event:2", the first record) or
//           summary (5, message): repeated value (1, message) of tag (1, string) and
//           simple_value (2, float)
//
// TensorBoard reads simple_value as the scalars plugin's data. After a resume, steps repeat from
// the checkpoint's; TensorBoard drops the older points of those steps (purge_orphaned_data).
#include "runtime/observe/observe.h"
#include "runtime/base/base.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct tb_writer {
    FILE *f;
    char path[PATH_MAX];     // where it is written (the run folder held open)
    char shown[PATH_MAX];    // its name, for messages
    unsigned char buf[4096]; // one event being encoded
    size_t len, summary_at;  // where the summary's length goes once its values are in
    int64_t step;
};

// ---- CRC-32C (Castagnoli), the checksum TFRecord frames carry ----

static uint32_t crc32c(const unsigned char *p, size_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
    uint32_t c = 0xffffffffu;
    while (n--) c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t masked_crc(const unsigned char *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// ---- protobuf wire format: the few encodings the three messages need ----

static void put_bytes(tb_writer *w, const void *p, size_t n) {
    if (w->len + n <= sizeof w->buf) memcpy(w->buf + w->len, p, n);
    w->len += n; // past the buffer: the event is dropped at write_event
}

static void put_varint(tb_writer *w, uint64_t v) {
    unsigned char b[10];
    size_t n = 0;
    do {
        b[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put_bytes(w, b, n);
}

static void put_key(tb_writer *w, int field, int wire_type) {
    put_varint(w, (uint64_t)field << 3 | (uint64_t)wire_type);
}

static void put_string(tb_writer *w, int field, const char *s) {
    put_key(w, field, 2);
    put_varint(w, strlen(s));
    put_bytes(w, s, strlen(s));
}

// Little-endian, as protobuf's fixed64 / fixed32 and TFRecord's lengths are on every host here.
static void put_le(unsigned char *out, uint64_t v, int n) {
    for (int i = 0; i < n; i++) out[i] = (unsigned char)(v >> (8 * i));
}

static void begin_event(tb_writer *w, int64_t step) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    uint64_t bits;
    memcpy(&bits, &wall, sizeof bits);
    unsigned char b[8];
    w->len = 0;
    put_key(w, 1, 1), put_le(b, bits, 8), put_bytes(w, b, 8); // wall_time
    put_key(w, 2, 0), put_varint(w, (uint64_t)step);          // step
}

static void write_event(tb_writer *w) {
    if (w->len > sizeof w->buf) return; // more values than an event holds: not written
    unsigned char head[12], tail[4];
    put_le(head, w->len, 8);
    put_le(head + 8, masked_crc(head, 8), 4);
    put_le(tail, masked_crc(w->buf, w->len), 4);
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(w->buf, 1, w->len, w->f) != w->len ||
        fwrite(tail, 1, 4, w->f) != 4 || fflush(w->f) != 0) {
        fprintf(stderr, "tensorboard: %s: %s; no more events\n", mt_shown(w->shown),
                strerror(errno));
        fclose(w->f);
        w->f = NULL;
    }
}

// ---- the writer ----

tb_writer *tb_open(const char *dir, const char *shown_dir) {
    tb_writer *w = calloc(1, sizeof *w);
    if (!w) mt_die("out of memory");
    char host[64] = "host", name[160];
    gethostname(host, sizeof host - 1);
    snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d.mtc", (long long)time(NULL), host,
             (int)getpid());
    snprintf(w->path, sizeof w->path, "%s/%s", dir, name);
    snprintf(w->shown, sizeof w->shown, "%s/%s", shown_dir, name);
    w->f = fopen_nofollow(w->path, "x");
    if (!w->f) {
        // O_EXCL says EEXIST before O_NOFOLLOW can say ELOOP: a planted link is named as one.
        int err = errno;
        struct stat st;
        int link = err == EEXIST && lstat(w->path, &st) == 0 && S_ISLNK(st.st_mode);
        fprintf(stderr, "tensorboard: %s: %s; the run writes no events\n", mt_shown(w->shown),
                link ? "a symbolic link: not writing through it" : strerror(err));
        free(w);
        return NULL;
    }
    begin_event(w, 0);
    put_string(w, 3, "brain.Event:2"); // file_version: the reader's check of the format
    write_event(w);
    return w;
}

void tb_begin(tb_writer *w, int64_t step) {
    if (!w || !w->f) return;
    begin_event(w, step);
    put_key(w, 5, 2); // summary: its length, one byte for up to 127, is fixed at tb_end
    w->summary_at = w->len;
    put_varint(w, 0);
    w->step = step;
}

void tb_scalar(tb_writer *w, const char *tag, double value) {
    if (!w || !w->f || !isfinite(value)) return; // NaN or Inf: no point (JSON says null)
    size_t tag_len = strlen(tag);
    unsigned char f[4];
    float v = (float)value;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_le(f, bits, 4);
    put_key(w, 1, 2); // summary.value
    put_varint(w, 1 + 1 + tag_len + 1 + 4);
    put_string(w, 1, tag);
    put_key(w, 2, 5), put_bytes(w, f, 4); // simple_value
}

void tb_end(tb_writer *w) {
    if (!w || !w->f) return;
    size_t body = w->len - w->summary_at - 1; // the summary's bytes after its length byte
    if (body > 127) { // a longer length takes two bytes: move the values up by one
        if (w->len + 1 > sizeof w->buf) return;
        memmove(w->buf + w->summary_at + 2, w->buf + w->summary_at + 1, body);
        w->buf[w->summary_at] = (unsigned char)((body & 0x7f) | 0x80);
        w->buf[w->summary_at + 1] = (unsigned char)(body >> 7);
        w->len++;
        if (body >> 14) return; // 16 KiB of values: more than buf holds anyway
    } else {
        w->buf[w->summary_at] = (unsigned char)body;
    }
    write_event(w);
}

void tb_close(tb_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    free(w);
}
