/* vibeserve_http.c - a tiny CPU-only HTTP "inference server" with NVTX ranges, for serve-capture tests.
 *
 * Build: gcc -O1 -I<nsys>/target-linux-x64/nvtx/include vibeserve_http.c -o vibeserve_http -ldl
 *   (NVTX v3 is header-only: without nsys the calls are no-ops; under `nsys profile --trace=nvtx` nsys injects
 *    its NVTX library through NVTX_INJECTION64_PATH.)
 * Run:   vibeserve_http PORT [--die-after N] [--never-ready] [--ready-after-ms MS]
 *        vibeserve_http --client PORT SECONDS [PATH] [--profile-range]
 *                       (a load client: GET PATH, default /generate, in a loop for SECONDS; with --profile-range
 *                       GET /start_profile after SECONDS/4 and /stop_profile at 3*SECONDS/4; prints
 *                       {"requests":N,"failed":F}; exit 1 when a request failed)
 *   GET /health      200 "ok" (503 before --ready-after-ms, always 503 with --never-ready)
 *   GET /v1/models   200 {"data":[{"id":"vibeserve-cpu"}]}
 *   GET /generate    one "request": vibeserve.request > N x (vibeserve.engine.iteration >
 *                    vibeserve.engine.scheduling, vibeserve.model.decode), ~3 ms of CPU work, 200 JSON
 *   GET /start_profile  opens the start/end NVTX range "vibeserve.capture" (for nsys --capture-range=nvtx
 *                    --nvtx-capture=vibeserve.capture, with NSYS_NVTX_PROFILER_REGISTER_ONLY=0 on nsys)
 *   GET /stop_profile   closes it
 *   --die-after N    exit(3) after serving N /generate requests (a server that dies mid-run)
 *   --worker         fork one worker process at start (an engine's worker: it idles until signalled); the server
 *                    reaps its children at once (SIGCHLD handler), as a real engine's process manager does
 *   --worker-dies-after N   the worker ends after the server served N /generate requests (mid-load), with
 *                    --worker-exit CODE (default 7) or --worker-signal SIG (e.g. 11); the server keeps running
 *   --load-module PATH    dlopen(PATH) at start (repeatable): a generated/JIT module the engine loads (for
 *                    serve-capture --module); a failed dlopen exits 4
 *   NSYSKIT_ITERATION_RECORDS=FILE (environment)   append one JSON line per engine iteration to FILE (the format of
 *                    docs/iterations.md: CLOCK_MONOTONIC start_ns/end_ns, phase, geometry, rank 0, backend "cpu")
 * Single-threaded, loopback only, HTTP/1.0-style (one request per connection, Connection: close).
 */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <stdint.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void busy_us(long us) {
    double end = now_ms() + us / 1e3;
    volatile double x = 0;
    while (now_ms() < end)
        for (int i = 0; i < 200; i++) x += i * 0.5;
}

static void reply(int fd, int code, const char *type, const char *body) {
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     code, code == 200 ? "OK" : code == 404 ? "Not Found" : "Service Unavailable", type,
                     strlen(body));
    if (write(fd, head, n) < 0 || write(fd, body, strlen(body)) < 0) perror("write");
}

/* One GET on 127.0.0.1:port; returns the HTTP status or -1. */
static int get(int port, const char *path) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) { close(s); return -1; }
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", path, port);
    if (write(s, req, n) != n) { close(s); return -1; }
    char buf[4096];
    ssize_t got = 0, k;
    while (got < (ssize_t)sizeof buf - 1 && (k = read(s, buf + got, sizeof buf - 1 - got)) > 0) got += k;
    close(s);
    buf[got] = 0;
    int code = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1) return -1;
    return code;
}

static int client_main(int port, double seconds, const char *path, int profile) {
    double start = now_ms(), end = start + seconds * 1e3;
    long ok = 0, failed = 0;
    int opened = 0, closed = 0;
    while (now_ms() < end) {
        double t = now_ms() - start;
        if (profile && !opened && t >= seconds * 250) {
            if (get(port, "/start_profile") != 200) { failed++; break; }
            opened = 1;
        }
        if (profile && opened && !closed && t >= seconds * 750) {
            if (get(port, "/stop_profile") != 200) { failed++; break; }
            closed = 1;
        }
        int code = get(port, path);
        if (code == 200) ok++;
        else {
            failed++;
            fprintf(stderr, "vibeserve_http client: GET %s -> %d\n", path, code);
            break;
        }
    }
    printf("{\"requests\":%ld,\"failed\":%ld}\n", ok, failed);
    return failed ? 1 : 0;
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
}

/* The worker: reads one byte per served request from the pipe; ends after `dies_after` of them. */
static void worker_main(int rfd, long dies_after, int exit_code, int sig) {
    long seen = 0;
    char b;
    while (read(rfd, &b, 1) == 1) {
        if (dies_after >= 0 && ++seen >= dies_after) {
            fprintf(stderr, "vibeserve_http worker %d: ending after %ld requests (%s %d)\n", getpid(), seen, sig ? "signal" : "exit", sig ? sig : exit_code);
            if (sig) {
                struct rlimit no_core = {0, 0};
                setrlimit(RLIMIT_CORE, &no_core);
                signal(sig, SIG_DFL);
                raise(sig);
            }
            _exit(exit_code);
        }
    }
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "--client")) {
        const char *path = "/generate";
        int profile = 0;
        for (int i = 4; i < argc; i++) {
            if (!strcmp(argv[i], "--profile-range")) profile = 1;
            else path = argv[i];
        }
        return client_main(atoi(argv[2]), atof(argv[3]), path, profile);
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [--die-after N] [--never-ready] [--ready-after-ms MS]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    long die_after = -1, ready_after_ms = 0, worker_dies_after = -1;
    int never_ready = 0, worker = 0, worker_exit = 7, worker_signal = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--die-after") && i + 1 < argc) die_after = atol(argv[++i]);
        else if (!strcmp(argv[i], "--never-ready")) never_ready = 1;
        else if (!strcmp(argv[i], "--ready-after-ms") && i + 1 < argc) ready_after_ms = atol(argv[++i]);
        else if (!strcmp(argv[i], "--worker")) worker = 1;
        else if (!strcmp(argv[i], "--worker-dies-after") && i + 1 < argc) worker_dies_after = atol(argv[++i]);
        else if (!strcmp(argv[i], "--worker-exit") && i + 1 < argc) worker_exit = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--worker-signal") && i + 1 < argc) worker_signal = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--load-module") && i + 1 < argc) {
            const char *m = argv[++i];
            if (!dlopen(m, RTLD_NOW | RTLD_GLOBAL)) { fprintf(stderr, "vibeserve_http: dlopen %s: %s\n", m, dlerror()); return 4; }
            fprintf(stderr, "vibeserve_http: loaded module %s\n", m);
        }
    }
    FILE *records = NULL;
    const char *records_path = getenv("NSYSKIT_ITERATION_RECORDS");
    if (records_path && *records_path && !(records = fopen(records_path, "a"))) { perror(records_path); return 1; }
    long iteration = 0;
    int wfd = -1;
    if (worker) {
        int p[2];
        if (pipe(p) < 0) { perror("pipe"); return 1; }
        struct sigaction sa = {0};
        sa.sa_handler = reap;
        sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
        sigaction(SIGCHLD, &sa, NULL);
        pid_t w = fork();
        if (w == 0) { close(p[1]); worker_main(p[0], worker_dies_after, worker_exit, worker_signal); }
        close(p[0]);
        wfd = p[1];
        fprintf(stderr, "vibeserve_http: worker pid %d\n", (int)w);
    }
    signal(SIGPIPE, SIG_IGN);
    nvtxNameOsThreadA((uint32_t)gettid(), "vibeserve.api_server");
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 64) < 0) {
        perror("bind/listen");
        return 1;
    }
    fprintf(stderr, "vibeserve_http: pid %d listening on 127.0.0.1:%d\n", getpid(), port);
    double t0 = now_ms();
    long served = 0;
    nvtxRangeId_t capture_id = 0;
    int capture_open = 0;
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) continue;
        char req[2048];
        ssize_t n = read(c, req, sizeof req - 1);
        if (n <= 0) { close(c); continue; }
        req[n] = 0;
        if (!strncmp(req, "GET /health ", 12)) {
            int ready = !never_ready && now_ms() - t0 >= ready_after_ms;
            reply(c, ready ? 200 : 503, "text/plain", ready ? "ok" : "starting");
        } else if (!strncmp(req, "GET /v1/models ", 15)) {
            reply(c, 200, "application/json", "{\"object\":\"list\",\"data\":[{\"id\":\"vibeserve-cpu\"}]}");
        } else if (!strncmp(req, "GET /start_profile ", 19)) {
            if (!capture_open) capture_id = nvtxRangeStartA("vibeserve.capture");
            capture_open = 1;
            reply(c, 200, "application/json", "{}");
        } else if (!strncmp(req, "GET /stop_profile ", 18)) {
            if (capture_open) nvtxRangeEnd(capture_id);
            capture_open = 0;
            reply(c, 200, "application/json", "{}");
        } else if (!strncmp(req, "GET /generate", 13)) {
            nvtxRangePushA("vibeserve.request");
            for (int it = 0; it < 4; it++) {
                uint64_t t_start = now_ns();
                nvtxRangePushA("vibeserve.engine.iteration");
                nvtxRangePushA("vibeserve.engine.scheduling");
                busy_us(150);
                nvtxRangePop();
                nvtxRangePushA("vibeserve.model.decode");
                busy_us(600);
                nvtxRangePop();
                nvtxRangePop();
                uint64_t t_end = now_ns();
                if (records) {
                    /* the first iteration of a request is its prefill (one 16-token chunk), then decode steps */
                    if (it == 0)
                        fprintf(records, "{\"iteration\":%ld,\"rank\":0,\"start_ns\":%llu,\"end_ns\":%llu,\"elapsed_ns\":%llu,"
                                "\"phase\":\"prefill\",\"prefill_chunks\":[16],\"decode_kv_lens\":[],\"scheduled_tokens\":16,"
                                "\"scheduled_requests\":1,\"batch_size\":1,\"graph_mode\":\"none\",\"backend\":\"cpu\"}\n",
                                iteration, (unsigned long long)t_start, (unsigned long long)t_end, (unsigned long long)(t_end - t_start));
                    else
                        fprintf(records, "{\"iteration\":%ld,\"rank\":0,\"start_ns\":%llu,\"end_ns\":%llu,\"elapsed_ns\":%llu,"
                                "\"phase\":\"decode\",\"prefill_chunks\":[],\"decode_kv_lens\":[%d],\"scheduled_tokens\":1,"
                                "\"scheduled_requests\":1,\"batch_size\":1,\"graph_mode\":\"none\",\"backend\":\"cpu\"}\n",
                                iteration, (unsigned long long)t_start, (unsigned long long)t_end, (unsigned long long)(t_end - t_start), 16 + it);
                    fflush(records);
                }
                iteration++;
            }
            nvtxRangePop();
            served++;
            if (wfd >= 0 && write(wfd, "r", 1) < 0) { close(wfd); wfd = -1; }
            reply(c, 200, "application/json", "{\"text\":\"vibe\",\"tokens\":4}");
            if (die_after >= 0 && served >= die_after) {
                close(c);
                fprintf(stderr, "vibeserve_http: dying after %ld requests (--die-after)\n", served);
                exit(3);
            }
        } else {
            reply(c, 404, "text/plain", "not found");
        }
        close(c);
    }
}
