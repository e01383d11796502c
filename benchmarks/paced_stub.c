/* paced_stub.c: a paced streaming stub of an SGLang server, for measuring HTTP load-generator clients.
 *
 * One thread, epoll, non-blocking sockets, 127.0.0.1 only. Every streamed event is due at an absolute time
 * (R + ttft + (k-1)*itl, R = when the request's body was complete, CLOCK_MONOTONIC) and is sent in exactly one
 * send() holding its whole HTTP chunk frame; a timerfd (TFD_TIMER_ABSTIME, ns) is armed at the earliest due stream
 * of a min-heap. The lateness of every event write (clock just before the write minus its due time) goes into a
 * log-linear histogram (64 sub-buckets per power of two: under 1.6 % relative error) served at GET /stats.
 *
 *   gcc -O2 -Wall -Wextra -o paced_stub benchmarks/paced_stub.c
 *   ./paced_stub --port 0 --ttft-ms 20 --itl-ms 10 [--chunks 256] [--burst] [--stats FILE]
 *
 * Routes: POST /generate (SGLang-native SSE, cumulative text and output_ids), POST /v1/completions and
 * POST /v1/chat/completions (OpenAI SSE, stream_options include_usage / continuous_usage_stats), GET /health,
 * /health_generate, /v1/models, /get_model_info, /model_info, /get_server_info, /server_info, /stats;
 * POST /flush_cache, /stats/reset. Anything else: 404.
 *
 * Stats: `writes` counts event writes (one per event; one per response with --burst), `events` the events in them.
 * A write that would block keeps its rest for EPOLLOUT, and later events of that connection queue behind it
 * (no send until it drains); each such write counts in `blocked_writes`, and its lateness is taken when it is
 * issued or queued: a slow reader shows in blocked_writes, not in the stub's own lateness.
 *
 * --burst: each whole response (every event, [DONE] and the chunked terminator) in one write at its TTFT time:
 * the client parser's ceiling, with no pacing. With --stats FILE, SIGTERM/SIGINT writes the stats JSON to FILE
 * (FILE.tmp, then rename) and exits 0.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define PROMPT_TOKENS 128
#define MAX_HEADER_BYTES (64 * 1024)
#define MAX_REQUEST_BYTES (64 * 1024 * 1024)
#define MAX_TOKENS_CAP 1000000
#define MAX_EVENTS 1024

/* ---------------------------------------------------------------- growable byte buffers */

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static void die(const char *what) {
    fprintf(stderr, "paced_stub: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void buf_reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + extra) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) die("realloc");
    b->p = np;
    b->cap = nc;
}

static void buf_put(buf_t *b, const void *s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void buf_puts(buf_t *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_u64(buf_t *b, uint64_t v) {
    char tmp[24];
    int i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    buf_put(b, tmp + i, (size_t)(24 - i));
}

static void buf_printf(buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* one HTTP chunk frame: <hex len>\r\n<data>\r\n */
static void buf_frame(buf_t *b, const char *data, size_t n) {
    char hex[24];
    int h = snprintf(hex, sizeof hex, "%zx\r\n", n);
    buf_put(b, hex, (size_t)h);
    buf_put(b, data, n);
    buf_put(b, "\r\n", 2);
}

/* ---------------------------------------------------------------- clock and options */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t g_ttft_ns = 20000000, g_itl_ns = 10000000;
static uint32_t g_chunks = 256;
static bool g_burst = false;
static const char *g_stats_path = NULL;

/* ---------------------------------------------------------------- stats */

#define SUB_BITS 6
#define SUB (1 << SUB_BITS)
#define NBUCKETS (SUB * 40)

static struct {
    uint64_t hist[NBUCKETS];
    uint64_t writes, events, requests, http_requests, blocked_writes, over_1ms, bytes;
    uint64_t late_max, late_sum;
    int64_t t0;
    double cpu0;
} S;

static uint64_t g_open_conns = 0, g_next_id = 0;

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void stats_reset(void) {
    memset(&S, 0, sizeof S);
    S.t0 = now_ns();
    S.cpu0 = cpu_now();
}

static int bucket_of(uint64_t v) {
    if (v < SUB) return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int shift = msb - SUB_BITS;
    int idx = SUB + shift * SUB + (int)((v >> shift) - SUB);
    return idx < NBUCKETS ? idx : NBUCKETS - 1;
}

static uint64_t bucket_hi(int idx) { /* exclusive upper edge, ns */
    if (idx < SUB) return (uint64_t)idx + 1;
    int shift = (idx - SUB) / SUB, sub = (idx - SUB) % SUB;
    return (uint64_t)(SUB + sub + 1) << shift;
}

static void record_lateness(int64_t late) {
    uint64_t v = late > 0 ? (uint64_t)late : 0;
    S.hist[bucket_of(v)]++;
    S.writes++;
    S.late_sum += v;
    if (v > S.late_max) S.late_max = v;
    if (v > 1000000) S.over_1ms++;
}

static double late_pct_us(double p) {
    if (!S.writes) return 0.0;
    uint64_t rank = (uint64_t)(p * (double)S.writes);
    if ((double)rank < p * (double)S.writes) rank++;
    if (rank < 1) rank = 1;
    uint64_t cum = 0;
    for (int i = 0; i < NBUCKETS; i++) {
        cum += S.hist[i];
        if (cum >= rank) {
            uint64_t hi = bucket_hi(i);
            if (hi > S.late_max) hi = S.late_max;
            return (double)hi / 1000.0;
        }
    }
    return (double)S.late_max / 1000.0;
}

static void stats_json(buf_t *b) {
    double up = (double)(now_ns() - S.t0) / 1e9;
    buf_printf(b,
               "{\"writes\":%" PRIu64 ",\"events\":%" PRIu64 ",\"late_p50_us\":%.3f,\"late_p99_us\":%.3f,"
               "\"late_p999_us\":%.3f,\"late_max_us\":%.3f,\"late_mean_us\":%.3f,\"late_over_1ms\":%" PRIu64
               ",\"requests\":%" PRIu64 ",\"http_requests\":%" PRIu64 ",\"blocked_writes\":%" PRIu64
               ",\"bytes_sent\":%" PRIu64 ",\"open_connections\":%" PRIu64 ",\"cpu_s\":%.6f,\"uptime_s\":%.6f}",
               S.writes, S.events, late_pct_us(0.50), late_pct_us(0.99), late_pct_us(0.999),
               (double)S.late_max / 1000.0, S.writes ? (double)S.late_sum / (double)S.writes / 1000.0 : 0.0,
               S.over_1ms, S.requests, S.http_requests, S.blocked_writes, S.bytes, g_open_conns,
               cpu_now() - S.cpu0, up);
}

static void write_stats_file(void) {
    if (!g_stats_path) return;
    buf_t b = {0};
    stats_json(&b);
    buf_put(&b, "\n", 1);
    size_t n = strlen(g_stats_path) + 8;
    char *tmp = malloc(n);
    if (!tmp) die("malloc");
    snprintf(tmp, n, "%s.tmp", g_stats_path);
    FILE *f = fopen(tmp, "w");
    if (!f) die("open stats file");
    if (fwrite(b.p, 1, b.len, f) != b.len || fclose(f) != 0) die("write stats file");
    if (rename(tmp, g_stats_path) != 0) die("rename stats file");
    free(tmp);
    free(b.p);
}

/* ---------------------------------------------------------------- shared event text */

/* " tok" repeated, and "1001,1002,...": the native stream's cumulative text and output_ids are prefixes */
static buf_t g_text, g_ids;
static size_t *g_ids_end = NULL; /* g_ids_end[k]: length of the first k ids joined by commas */
static uint32_t g_ids_n = 0;

static void ensure_prefixes(uint32_t k) {
    while (g_text.len < 4 * (size_t)k) buf_put(&g_text, " tok", 4);
    if (k <= g_ids_n) return;
    size_t *ne = realloc(g_ids_end, ((size_t)k + 1) * sizeof *ne);
    if (!ne) die("realloc");
    g_ids_end = ne;
    g_ids_end[0] = 0;
    while (g_ids_n < k) {
        if (g_ids_n) buf_put(&g_ids, ",", 1);
        buf_u64(&g_ids, 1001 + (uint64_t)g_ids_n);
        g_ids_n++;
        g_ids_end[g_ids_n] = g_ids.len;
    }
}

/* ---------------------------------------------------------------- connections */

enum kind { K_NATIVE, K_CMPL, K_CHAT };

typedef struct conn {
    int fd;
    int heap_idx; /* -1: not in the heap */
    buf_t rbuf;
    size_t roff;
    buf_t wbuf; /* output that would have blocked */
    size_t woff;
    bool want_out;
    /* the request being parsed */
    size_t hdr_len, clen;
    bool keep_alive, expect_100, sent_100;
    /* the stream */
    bool streaming, close_after, closing;
    enum kind kind;
    bool usage_final, usage_each;
    uint32_t n, k;
    uint64_t id;
    int64_t t0, due;
    struct conn *next_dead;
} conn_t;

static int g_ep;
static conn_t *g_dead = NULL;
static buf_t g_out, g_ev; /* scratch */

/* min-heap of streaming connections by due time */
static conn_t **g_heap = NULL;
static size_t g_heap_n = 0, g_heap_cap = 0;

static void heap_swap(size_t a, size_t b) {
    conn_t *t = g_heap[a];
    g_heap[a] = g_heap[b];
    g_heap[b] = t;
    g_heap[a]->heap_idx = (int)a;
    g_heap[b]->heap_idx = (int)b;
}

static void heap_up(size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (g_heap[p]->due <= g_heap[i]->due) break;
        heap_swap(i, p);
        i = p;
    }
}

static void heap_down(size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < g_heap_n && g_heap[l]->due < g_heap[m]->due) m = l;
        if (r < g_heap_n && g_heap[r]->due < g_heap[m]->due) m = r;
        if (m == i) break;
        heap_swap(i, m);
        i = m;
    }
}

static void heap_push(conn_t *c) {
    if (g_heap_n == g_heap_cap) {
        g_heap_cap = g_heap_cap ? 2 * g_heap_cap : 1024;
        conn_t **nh = realloc(g_heap, g_heap_cap * sizeof *nh);
        if (!nh) die("realloc");
        g_heap = nh;
    }
    g_heap[g_heap_n] = c;
    c->heap_idx = (int)g_heap_n;
    g_heap_n++;
    heap_up(g_heap_n - 1);
}

static void heap_remove(conn_t *c) {
    size_t i = (size_t)c->heap_idx;
    c->heap_idx = -1;
    g_heap_n--;
    if (i == g_heap_n) return;
    g_heap[i] = g_heap[g_heap_n];
    g_heap[i]->heap_idx = (int)i;
    heap_up(i);
    heap_down((size_t)g_heap[i]->heap_idx);
}

static void conn_close(conn_t *c) {
    if (c->fd < 0) return;
    if (c->heap_idx >= 0) heap_remove(c);
    close(c->fd); /* leaves the epoll set */
    c->fd = -1;
    c->next_dead = g_dead; /* freed after this epoll batch: later events of the batch may still name it */
    g_dead = c;
    g_open_conns--;
}

static void conn_want_out(conn_t *c, bool on) {
    if (c->want_out == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &ev) != 0) die("epoll_ctl mod");
    c->want_out = on;
}

/* one send() of the whole of data; what does not fit waits for EPOLLOUT. False: the connection is gone. */
static bool conn_send(conn_t *c, const char *data, size_t n, bool event) {
    if (c->wbuf.len > c->woff) { /* earlier output still waits: queue behind it */
        buf_put(&c->wbuf, data, n);
        if (event) S.blocked_writes++;
        return true;
    }
    ssize_t w;
    do {
        w = send(c->fd, data, n, MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            conn_close(c);
            return false;
        }
        w = 0;
    }
    S.bytes += (uint64_t)w;
    if ((size_t)w == n) return true;
    if (event) S.blocked_writes++;
    c->wbuf.len = 0;
    c->woff = 0;
    buf_put(&c->wbuf, data + w, n - (size_t)w);
    conn_want_out(c, true);
    return true;
}

static void conn_flush(conn_t *c) {
    while (c->wbuf.len > c->woff) {
        ssize_t w = send(c->fd, c->wbuf.p + c->woff, c->wbuf.len - c->woff, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            conn_close(c);
            return;
        }
        S.bytes += (uint64_t)w;
        c->woff += (size_t)w;
    }
    c->wbuf.len = c->woff = 0;
    if (c->wbuf.cap > 1 << 20) { /* a big backlog drained: give its memory back */
        free(c->wbuf.p);
        c->wbuf.p = NULL;
        c->wbuf.cap = 0;
    }
    conn_want_out(c, false);
    if (c->closing) conn_close(c);
}

/* close once everything queued is out */
static void conn_finish_and_close(conn_t *c) {
    c->closing = true;
    if (c->wbuf.len <= c->woff) conn_close(c);
}

/* ---------------------------------------------------------------- responses */

static void send_simple(conn_t *c, int status, const char *reason, const char *ctype, const char *body,
                        size_t blen) {
    g_out.len = 0;
    buf_printf(&g_out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", status, reason,
               ctype, blen, c->keep_alive ? "" : "Connection: close\r\n");
    buf_put(&g_out, body, blen);
    conn_send(c, g_out.p, g_out.len, false);
}

static void send_json(conn_t *c, const char *body) {
    send_simple(c, 200, "OK", "application/json", body, strlen(body));
}

static void build_usage_obj(buf_t *b, uint32_t k) {
    buf_puts(b, "\"usage\":{\"prompt_tokens\":" "128" ",\"completion_tokens\":");
    buf_u64(b, k);
    buf_puts(b, ",\"total_tokens\":");
    buf_u64(b, PROMPT_TOKENS + (uint64_t)k);
    buf_put(b, "}", 1);
}

/* event k (1-based) of c's stream, as SSE bytes ("data: ...\n\n"), into b */
static void build_event(conn_t *c, buf_t *b, uint32_t k) {
    bool last = k == c->n;
    if (c->kind == K_NATIVE) {
        ensure_prefixes(k);
        buf_puts(b, "data: {\"text\":\"");
        buf_put(b, g_text.p, 4 * (size_t)k);
        buf_puts(b, "\",\"output_ids\":[");
        buf_put(b, g_ids.p, g_ids_end[k]);
        buf_puts(b, "],\"meta_info\":{\"id\":\"r");
        buf_u64(b, c->id);
        buf_puts(b, "\",\"finish_reason\":");
        if (last) {
            buf_puts(b, "{\"type\":\"length\",\"length\":");
            buf_u64(b, c->n);
            buf_put(b, "}", 1);
        } else {
            buf_puts(b, "null");
        }
        buf_puts(b, ",\"prompt_tokens\":128,\"completion_tokens\":");
        buf_u64(b, k);
        buf_puts(b, ",\"cached_tokens\":0}}\n\n");
        return;
    }
    if (c->kind == K_CMPL) {
        buf_puts(b, "data: {\"id\":\"cmpl-");
        buf_u64(b, c->id);
        buf_puts(b, "\",\"object\":\"text_completion\",\"created\":0,\"model\":\"stub\",\"choices\":[{\"index\":0,"
                    "\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":");
    } else {
        buf_puts(b, "data: {\"id\":\"chatcmpl-");
        buf_u64(b, c->id);
        buf_puts(b, "\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"stub\",\"choices\":[{"
                    "\"index\":0,\"delta\":{");
        if (k == 1) buf_puts(b, "\"role\":\"assistant\",");
        buf_puts(b, "\"content\":\" tok\"},\"finish_reason\":");
    }
    buf_puts(b, last ? "\"length\"}]" : "null}]");
    if (c->usage_each) {
        buf_put(b, ",", 1);
        build_usage_obj(b, k);
    }
    buf_puts(b, "}\n\n");
}

static void build_final_usage(conn_t *c, buf_t *b) {
    if (c->kind == K_CMPL) {
        buf_puts(b, "data: {\"id\":\"cmpl-");
        buf_u64(b, c->id);
        buf_puts(b, "\",\"object\":\"text_completion\"");
    } else {
        buf_puts(b, "data: {\"id\":\"chatcmpl-");
        buf_u64(b, c->id);
        buf_puts(b, "\",\"object\":\"chat.completion.chunk\"");
    }
    buf_puts(b, ",\"created\":0,\"model\":\"stub\",\"choices\":[],");
    build_usage_obj(b, c->n);
    buf_puts(b, "}\n\n");
}

static void process_input(conn_t *c);

static void stream_finish(conn_t *c) {
    c->streaming = false;
    if (c->close_after) {
        conn_finish_and_close(c);
        return;
    }
    process_input(c); /* a pipelined request may be waiting */
}

/* the stream's next write: one event (or, with --burst, all of them), [DONE] and the terminator after the last */
static void stream_emit(conn_t *c) {
    g_out.len = 0;
    uint32_t from = c->k + 1, to = g_burst ? c->n : c->k + 1;
    for (uint32_t k = from; k <= to; k++) {
        g_ev.len = 0;
        build_event(c, &g_ev, k);
        buf_frame(&g_out, g_ev.p, g_ev.len);
    }
    S.events += to - from + 1;
    c->k = to;
    bool last = c->k == c->n;
    if (last) {
        if (c->usage_final) {
            g_ev.len = 0;
            build_final_usage(c, &g_ev);
            buf_frame(&g_out, g_ev.p, g_ev.len);
        }
        buf_frame(&g_out, "data: [DONE]\n\n", 14);
        buf_put(&g_out, "0\r\n\r\n", 5);
    }
    record_lateness(now_ns() - c->due);
    if (!conn_send(c, g_out.p, g_out.len, true)) return;
    if (last) {
        stream_finish(c);
        return;
    }
    c->due = c->t0 + g_ttft_ns + (int64_t)c->k * g_itl_ns;
    heap_push(c);
}

/* ---------------------------------------------------------------- request bodies */

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* the value after the first `"key"` + optional spaces + ':' + optional spaces: where it starts, or NULL */
static const char *find_value(const char *body, size_t len, const char *key) {
    size_t kl = strlen(key);
    const char *end = body + len, *p = body;
    while (p < end) {
        const char *hit = memmem(p, (size_t)(end - p), key, kl);
        if (!hit) return NULL;
        const char *q = skip_ws(hit + kl, end);
        if (q < end && *q == ':') return skip_ws(q + 1, end);
        p = hit + kl;
    }
    return NULL;
}

static bool find_int(const char *body, size_t len, const char *key, long *out) {
    const char *end = body + len, *v = find_value(body, len, key);
    if (!v || v >= end || *v < '0' || *v > '9') return false;
    long x = 0;
    while (v < end && *v >= '0' && *v <= '9') {
        if (x < MAX_TOKENS_CAP) x = x * 10 + (*v - '0');
        v++;
    }
    *out = x;
    return true;
}

static bool find_true(const char *body, size_t len, const char *key) {
    const char *end = body + len, *v = find_value(body, len, key);
    return v && end - v >= 4 && memcmp(v, "true", 4) == 0;
}

static void start_stream(conn_t *c, enum kind kind, const char *body, size_t blen, int64_t t_body) {
    long n = -1;
    if (kind == K_NATIVE) {
        find_int(body, blen, "\"max_new_tokens\"", &n);
    } else if (!find_int(body, blen, "\"max_tokens\"", &n)) {
        find_int(body, blen, "\"max_completion_tokens\"", &n);
    }
    if (n < 0) n = g_chunks;
    if (n < 1) n = 1;
    if (n > MAX_TOKENS_CAP) n = MAX_TOKENS_CAP;
    c->kind = kind;
    c->n = (uint32_t)n;
    c->k = 0;
    c->id = ++g_next_id;
    c->usage_final = kind != K_NATIVE && find_true(body, blen, "\"include_usage\"");
    c->usage_each = c->usage_final && find_true(body, blen, "\"continuous_usage_stats\"");
    c->t0 = t_body;
    c->due = t_body + g_ttft_ns;
    c->streaming = true;
    c->close_after = !c->keep_alive;
    S.requests++;
    g_out.len = 0;
    buf_printf(&g_out,
               "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
               "Transfer-Encoding: chunked\r\n%s\r\n",
               c->keep_alive ? "" : "Connection: close\r\n");
    if (!conn_send(c, g_out.p, g_out.len, false)) return;
    heap_push(c);
}

static void dispatch(conn_t *c, const char *method, size_t ml, const char *path, size_t pl, const char *body,
                     size_t blen, int64_t t_body) {
#define IS(m, p) (ml == strlen(m) && memcmp(method, m, ml) == 0 && pl == strlen(p) && memcmp(path, p, pl) == 0)
    S.http_requests++;
    if (IS("POST", "/generate")) {
        start_stream(c, K_NATIVE, body, blen, t_body);
    } else if (IS("POST", "/v1/completions")) {
        start_stream(c, K_CMPL, body, blen, t_body);
    } else if (IS("POST", "/v1/chat/completions")) {
        start_stream(c, K_CHAT, body, blen, t_body);
    } else if (IS("GET", "/health") || IS("GET", "/health_generate")) {
        send_json(c, "{}");
    } else if (IS("GET", "/v1/models")) {
        send_json(c, "{\"object\":\"list\",\"data\":[{\"id\":\"stub\",\"object\":\"model\",\"owned_by\":\"stub\","
                     "\"created\":0}]}");
    } else if (IS("GET", "/get_model_info") || IS("GET", "/model_info")) {
        send_json(c, "{\"model_path\":\"stub\",\"is_generation\":true}");
    } else if (IS("GET", "/get_server_info") || IS("GET", "/server_info")) {
        send_json(c, "{\"version\":\"0.5.23\",\"internal_states\":[{}]}");
    } else if (IS("POST", "/flush_cache")) {
        send_simple(c, 200, "OK", "text/plain", "Cache flushed.\n", 15);
    } else if (IS("GET", "/stats")) {
        buf_t b = {0};
        stats_json(&b);
        send_simple(c, 200, "OK", "application/json", b.p, b.len);
        free(b.p);
    } else if (IS("POST", "/stats/reset")) {
        stats_reset();
        send_json(c, "{}");
    } else {
        send_simple(c, 404, "Not Found", "application/json", "{\"error\":\"not found\"}", 21);
    }
#undef IS
}

static bool ieq(const char *a, size_t al, const char *b) {
    size_t bl = strlen(b);
    return al == bl && strncasecmp(a, b, bl) == 0;
}

static bool icontains(const char *s, size_t n, const char *needle) {
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= n; i++)
        if (strncasecmp(s + i, needle, nl) == 0) return true;
    return false;
}

static void bad_request(conn_t *c, int status, const char *reason) {
    c->keep_alive = false;
    send_simple(c, status, reason, "text/plain", reason, strlen(reason));
    if (c->fd >= 0) conn_finish_and_close(c);
}

/* the request line and headers in [p, p+n) (the final CRLFCRLF excluded); false on a malformed request */
static bool parse_head(conn_t *c, const char *p, size_t n, const char **method, size_t *ml, const char **path,
                       size_t *pl) {
    const char *end = p + n, *eol = memmem(p, n, "\r\n", 2);
    if (!eol) eol = end;
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (!sp1) return false;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (!sp2) return false;
    *method = p;
    *ml = (size_t)(sp1 - p);
    *path = sp1 + 1;
    const char *q = memchr(*path, '?', (size_t)(sp2 - *path));
    *pl = (size_t)((q ? q : sp2) - *path);
    bool http10 = (size_t)(eol - sp2 - 1) == 8 && memcmp(sp2 + 1, "HTTP/1.0", 8) == 0;
    c->keep_alive = !http10;
    c->clen = 0;
    c->expect_100 = false;
    const char *line = eol + 2;
    while (line < end) {
        const char *le = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (!le) le = end;
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (colon) {
            size_t nl = (size_t)(colon - line);
            const char *v = skip_ws(colon + 1, le);
            size_t vl = (size_t)(le - v);
            while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) vl--;
            if (ieq(line, nl, "content-length")) {
                if (!vl) return false;
                size_t x = 0;
                for (size_t i = 0; i < vl; i++) {
                    if (v[i] < '0' || v[i] > '9') return false;
                    x = x * 10 + (size_t)(v[i] - '0');
                    if (x > MAX_REQUEST_BYTES) return false;
                }
                c->clen = x;
            } else if (ieq(line, nl, "connection")) {
                if (icontains(v, vl, "close")) c->keep_alive = false;
                else if (icontains(v, vl, "keep-alive")) c->keep_alive = true;
            } else if (ieq(line, nl, "transfer-encoding")) {
                return false; /* chunked request bodies are not supported */
            } else if (ieq(line, nl, "expect")) {
                c->expect_100 = icontains(v, vl, "100-continue");
            }
        }
        line = le + 2;
    }
    return true;
}

/* handle every complete request in c's input, one at a time: a stream holds the rest back until it ends */
static void process_input(conn_t *c) {
    while (c->fd >= 0 && !c->streaming && !c->closing) {
        const char *base = c->rbuf.p + c->roff;
        size_t avail = c->rbuf.len - c->roff;
        if (!c->hdr_len) {
            const char *e = avail >= 4 ? memmem(base, avail, "\r\n\r\n", 4) : NULL;
            if (!e) {
                if (avail > MAX_HEADER_BYTES) bad_request(c, 431, "Request Header Fields Too Large");
                break;
            }
            c->hdr_len = (size_t)(e - base) + 4;
            c->sent_100 = false;
        }
        const char *method, *path;
        size_t ml, pl;
        if (!parse_head(c, base, c->hdr_len - 4, &method, &ml, &path, &pl)) {
            bad_request(c, 400, "Bad Request");
            break;
        }
        if (avail < c->hdr_len + c->clen) {
            if (c->expect_100 && !c->sent_100) {
                c->sent_100 = true;
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                conn_send(c, cont, sizeof cont - 1, false);
            }
            break;
        }
        size_t used = c->hdr_len + c->clen;
        c->hdr_len = 0;
        dispatch(c, method, ml, path, pl, base + used - c->clen, c->clen, now_ns());
        if (c->fd < 0) return;
        c->roff += used;
        if (!c->streaming && !c->keep_alive) conn_finish_and_close(c);
    }
    if (c->fd < 0) return;
    if (c->roff == c->rbuf.len) {
        c->roff = c->rbuf.len = 0;
    } else if (c->roff > 0 && c->roff >= c->rbuf.len / 2) {
        memmove(c->rbuf.p, c->rbuf.p + c->roff, c->rbuf.len - c->roff);
        c->rbuf.len -= c->roff;
        c->roff = 0;
    }
}

static void conn_read(conn_t *c) {
    for (;;) {
        buf_reserve(&c->rbuf, 16384);
        ssize_t r = recv(c->fd, c->rbuf.p + c->rbuf.len, c->rbuf.cap - c->rbuf.len, 0);
        if (r > 0) {
            c->rbuf.len += (size_t)r;
            if (c->rbuf.len - c->roff > MAX_REQUEST_BYTES + MAX_HEADER_BYTES) {
                conn_close(c);
                return;
            }
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        conn_close(c); /* EOF or error: the client is gone, and so is its stream */
        return;
    }
    if (!c->streaming && !c->closing) process_input(c);
}

/* ---------------------------------------------------------------- main loop */

static int g_listen_fd, g_timer_fd, g_sig_fd, g_reserve_fd = -1;
static char g_tag_listen, g_tag_timer, g_tag_signal;
static int64_t g_armed = -1;

static void accept_all(void) {
    for (;;) {
        int fd = accept4(g_listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if ((errno == EMFILE || errno == ENFILE) && g_reserve_fd >= 0) {
                /* out of descriptors: accept and drop one, so the listen socket does not stay readable forever */
                close(g_reserve_fd);
                int x = accept(g_listen_fd, NULL, NULL);
                if (x >= 0) close(x);
                g_reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                fprintf(stderr, "paced_stub: out of file descriptors, dropped a connection\n");
                continue;
            }
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn_t *c = calloc(1, sizeof *c);
        if (!c) die("calloc");
        c->fd = fd;
        c->heap_idx = -1;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(g_ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl add");
        g_open_conns++;
    }
}

/* every stream whose event is due, earliest first; after MAX_DUE_BATCH writes the loop goes back to epoll (the timer,
 * armed in the past, fires at once) so sockets are still served when ttft = itl = 0 */
#define MAX_DUE_BATCH 8192
static void run_due(void) {
    int64_t now = now_ns();
    for (int done = 0; done < MAX_DUE_BATCH && g_heap_n && g_heap[0]->due <= now; done++) {
        conn_t *c = g_heap[0];
        heap_remove(c);
        stream_emit(c);
        now = now_ns();
    }
}

static void arm_timer(void) {
    if (!g_heap_n) return; /* a stale expiry only wakes the loop once */
    int64_t due = g_heap[0]->due;
    if (due == g_armed) return;
    struct itimerspec its = {0};
    its.it_value.tv_sec = due / 1000000000LL;
    its.it_value.tv_nsec = due % 1000000000LL;
    if (timerfd_settime(g_timer_fd, TFD_TIMER_ABSTIME, &its, NULL) != 0) die("timerfd_settime");
    g_armed = due;
}

static void usage(void) {
    fprintf(stderr, "usage: paced_stub [--port N] [--ttft-ms F] [--itl-ms F] [--chunks N] [--burst] [--stats FILE]\n");
    exit(2);
}

static double parse_num(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < 0) usage();
    return v;
}

int main(int argc, char **argv) {
    int port = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--burst")) {
            g_burst = true;
            continue;
        }
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--port")) port = (int)parse_num(v);
        else if (!strcmp(a, "--ttft-ms")) g_ttft_ns = (int64_t)(parse_num(v) * 1e6 + 0.5);
        else if (!strcmp(a, "--itl-ms")) g_itl_ns = (int64_t)(parse_num(v) * 1e6 + 0.5);
        else if (!strcmp(a, "--chunks")) g_chunks = (uint32_t)parse_num(v);
        else if (!strcmp(a, "--stats")) g_stats_path = v;
        else usage();
    }
    if (port > 65535 || g_chunks < 1 || g_chunks > MAX_TOKENS_CAP) usage();

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* the default 50 us slack would blur the schedule */
    g_reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    /* an ignored signal is dropped even while blocked: a parent's SIG_IGN (a `cmd &` in a script) must not hide
     * SIGINT/SIGTERM from the signalfd */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    if (sigprocmask(SIG_BLOCK, &ss, NULL) != 0) die("sigprocmask");
    g_sig_fd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    if (g_sig_fd < 0) die("signalfd");

    g_listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (g_listen_fd < 0) die("socket");
    int one = 1;
    setsockopt(g_listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(g_listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0) die("bind");
    if (listen(g_listen_fd, 4096) != 0) die("listen");
    socklen_t sl = sizeof sa;
    if (getsockname(g_listen_fd, (struct sockaddr *)&sa, &sl) != 0) die("getsockname");

    g_timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (g_timer_fd < 0) die("timerfd_create");
    g_ep = epoll_create1(EPOLL_CLOEXEC);
    if (g_ep < 0) die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.ptr = &g_tag_listen;
    if (epoll_ctl(g_ep, EPOLL_CTL_ADD, g_listen_fd, &ev) != 0) die("epoll_ctl listen");
    ev.data.ptr = &g_tag_timer;
    if (epoll_ctl(g_ep, EPOLL_CTL_ADD, g_timer_fd, &ev) != 0) die("epoll_ctl timer");
    ev.data.ptr = &g_tag_signal;
    if (epoll_ctl(g_ep, EPOLL_CTL_ADD, g_sig_fd, &ev) != 0) die("epoll_ctl signal");

    stats_reset();
    printf("PORT %d\n", ntohs(sa.sin_port));
    fflush(stdout);

    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        run_due();
        arm_timer();
        int n = epoll_wait(g_ep, evs, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            uint32_t e = evs[i].events;
            if (p == &g_tag_listen) {
                accept_all();
            } else if (p == &g_tag_timer) {
                uint64_t exp;
                if (read(g_timer_fd, &exp, sizeof exp) < 0 && errno != EAGAIN) die("read timerfd");
                g_armed = -1;
                run_due();
            } else if (p == &g_tag_signal) {
                struct signalfd_siginfo si;
                if (read(g_sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
                    write_stats_file();
                    exit(0);
                }
            } else {
                conn_t *c = p;
                if (c->fd < 0) continue;
                if (e & EPOLLERR) {
                    conn_close(c);
                    continue;
                }
                if (e & EPOLLOUT) conn_flush(c);
                if (c->fd >= 0 && (e & (EPOLLIN | EPOLLHUP))) conn_read(c);
            }
        }
        while (g_dead) {
            conn_t *c = g_dead;
            g_dead = c->next_dead;
            free(c->rbuf.p);
            free(c->wbuf.p);
            free(c);
        }
    }
}
