#!/usr/bin/env python3
"""vibeserve_http.py - a tiny PyTorch HTTP "LLM engine" with CUDA graphs, for serve-capture on a GPU machine.

Adapted from fixtures/src/vibeserve_gpu.py (same model: embedding, 2 layers, static KV cache, lm_head; same NVTX
range names), turned into a server:

  GET /health         503 while the model is built and the decode graph captured, then 200
  GET /v1/models      {"object": "list", "data": [{"id": "vibeserve-gpu"}]}
  GET /generate       one request: an eager prefill step, then DECODE decode steps, each a CUDA graph replay
                      (?tokens=N overrides DECODE); answers {"tokens": N}
  GET /start_profile  cudaProfilerStart (for nsys --capture-range=cudaProfilerApi), like vLLM's endpoint
  GET /stop_profile   cudaProfilerStop
  POST /start_profile, POST /stop_profile   the same, with vLLM's method (what pod-attach sends)

NVTX ranges per request (torch.cuda.nvtx push/pop):
  vibeserve.request
    vibeserve.engine.iteration            (one per engine step)
      vibeserve.engine.scheduling         (CPU only)
      vibeserve.engine.input_preparation  (H2D copy of the token ids)
      vibeserve.model.prefill | vibeserve.graph.replay
      vibeserve.sampling.d2h              (argmax + .cpu(): D2H copy + sync)

Iteration records: when NSYSKIT_ITERATION_RECORDS names a file (serve-capture --iteration-records sets it on the
nsys process), every engine iteration appends one JSON line (docs/iterations.md): CLOCK_MONOTONIC start/end in
ns taken just inside the iteration's NVTX range, phase, batch geometry, graph mode actually used, backend.

One process owns CUDA and serves HTTP (single-threaded: requests run one after another, which keeps the decode
steps regular). Usage: python3 vibeserve_http.py PORT [DECODE_STEPS] [--worker] [--worker-dies-after N]

--worker starts one engine worker process first (multiprocessing "spawn": fork+exec of python, as vLLM's engine
core is) that allocates 512 MiB on the GPU and idles; with --worker-dies-after N it exits 7 after the server has
served N requests, while the server keeps serving (serve-capture must reject that sample).
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 18080
DECODE = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 32
WORKER_DIES_AFTER = int(sys.argv[sys.argv.index("--worker-dies-after") + 1]) if "--worker-dies-after" in sys.argv else None
WORKER = "--worker" in sys.argv or WORKER_DIES_AFTER is not None
B, T_PROMPT, D, NH, NL, V, MAXLEN = 4, 64, 512, 8, 2, 4096, 4096
DH = D // NH

STATE = {"ready": False, "profiling": False}


class IterationRecords:
    """One JSON line per engine iteration, each written with one os.write on an O_APPEND descriptor."""

    def __init__(self):
        import os
        path = os.environ.get("NSYSKIT_ITERATION_RECORDS")
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self.n = 0

    def write(self, start_ns, end_ns, phase, prefill_chunks, decode_kv_lens, tokens, graph_mode):
        import os
        if self.fd is None:
            return
        rec = {"iteration": self.n, "rank": 0, "start_ns": start_ns, "end_ns": end_ns,
               "elapsed_ns": end_ns - start_ns, "phase": phase, "prefill_chunks": prefill_chunks,
               "decode_kv_lens": decode_kv_lens, "scheduled_tokens": tokens, "scheduled_requests": B,
               "batch_size": B, "graph_mode": graph_mode, "backend": "torch-sdpa-eager"}
        os.write(self.fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())
        self.n += 1


def build_engine():
    import torch
    import torch.nn.functional as F
    nvtx = torch.cuda.nvtx
    dev = torch.device("cuda")
    dt = torch.float16
    torch.manual_seed(0)

    nvtx.range_push("vibeserve.model.build")
    def w(*shape, scale=0.02):
        return (torch.randn(*shape, device=dev) * scale).to(dt)
    P = {"emb": w(V, D), "lnf_w": torch.ones(D, device=dev, dtype=dt),
         "lnf_b": torch.zeros(D, device=dev, dtype=dt), "lm_head": w(D, V)}
    layers = []
    for _ in range(NL):
        layers.append({
            "ln1_w": torch.ones(D, device=dev, dtype=dt), "ln1_b": torch.zeros(D, device=dev, dtype=dt),
            "wqkv": w(D, 3 * D), "wo": w(D, D),
            "ln2_w": torch.ones(D, device=dev, dtype=dt), "ln2_b": torch.zeros(D, device=dev, dtype=dt),
            "w1": w(D, 4 * D), "w2": w(4 * D, D)})
    k_cache = torch.zeros(NL, B, NH, MAXLEN, DH, device=dev, dtype=dt)
    v_cache = torch.zeros(NL, B, NH, MAXLEN, DH, device=dev, dtype=dt)
    ar = torch.arange(MAXLEN, device=dev)
    nvtx.range_pop()

    def forward(tokens, pos):
        """tokens [B,T] int64 on GPU, pos [T] int64 on GPU (absolute positions)."""
        x = P["emb"][tokens]
        mask = (ar[None, :] <= pos[:, None])
        bias = torch.zeros(mask.shape, device=dev, dtype=dt).masked_fill(~mask, float("-inf"))
        for l, L in enumerate(layers):
            h = F.layer_norm(x, (D,), L["ln1_w"], L["ln1_b"])
            q, k, v = (h @ L["wqkv"]).split(D, dim=-1)
            q = q.view(B, -1, NH, DH).transpose(1, 2)
            k = k.view(B, -1, NH, DH).transpose(1, 2)
            v = v.view(B, -1, NH, DH).transpose(1, 2)
            k_cache[l].index_copy_(2, pos, k)
            v_cache[l].index_copy_(2, pos, v)
            att = (q @ k_cache[l].transpose(-1, -2)) * (DH ** -0.5) + bias
            att = torch.softmax(att.float(), dim=-1).to(dt)
            o = (att @ v_cache[l]).transpose(1, 2).reshape(B, -1, D)
            x = x + o @ L["wo"]
            h = F.layer_norm(x, (D,), L["ln2_w"], L["ln2_b"])
            x = x + F.gelu(h @ L["w1"]) @ L["w2"]
        x = F.layer_norm(x[:, -1, :], (D,), P["lnf_w"], P["lnf_b"])
        return x @ P["lm_head"]

    # The decode step as one CUDA graph: static token and position inputs, replayed per step.
    static_tok = torch.zeros(B, 1, dtype=torch.int64, device=dev)
    static_pos = torch.full((1,), T_PROMPT, dtype=torch.int64, device=dev)
    nvtx.range_push("vibeserve.graph.warmup")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            forward(static_tok, static_pos)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    nvtx.range_pop()
    nvtx.range_push("vibeserve.graph.capture")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = forward(static_tok, static_pos)
    torch.cuda.synchronize()
    nvtx.range_pop()
    gen = torch.Generator().manual_seed(1)
    records = IterationRecords()
    mono = time.monotonic_ns
    pinned_tok = torch.empty(B, T_PROMPT, dtype=torch.int64).pin_memory()

    def generate(n_tokens):
        nvtx.range_push("vibeserve.request")
        # prefill: one eager step over a fresh random prompt
        nvtx.range_push("vibeserve.engine.iteration")
        t0 = mono()
        nvtx.range_push("vibeserve.engine.scheduling")
        prompt = torch.randint(0, V, (B, T_PROMPT), generator=gen)
        nvtx.range_pop()
        nvtx.range_push("vibeserve.engine.input_preparation")
        pinned_tok.copy_(prompt)
        tokens = pinned_tok.to(dev, non_blocking=True)
        pos = torch.arange(T_PROMPT, device=dev)
        nvtx.range_pop()
        nvtx.range_push("vibeserve.model.prefill")
        logits = forward(tokens, pos)
        nvtx.range_pop()
        nvtx.range_push("vibeserve.sampling.d2h")
        tok = logits.argmax(dim=-1).cpu()
        nvtx.range_pop()
        t1 = mono()
        nvtx.range_pop()
        records.write(t0, t1, "prefill", [T_PROMPT] * B, [], B * T_PROMPT, "none")
        # decode: graph replays; the position stays fixed (a static shape), which is all the trace needs
        for i in range(n_tokens):
            nvtx.range_push("vibeserve.engine.iteration")
            t0 = mono()
            nvtx.range_push("vibeserve.engine.scheduling")
            sum(range(500))
            nvtx.range_pop()
            nvtx.range_push("vibeserve.engine.input_preparation")
            static_tok.copy_(tok.view(B, 1), non_blocking=True)
            nvtx.range_pop()
            nvtx.range_push("vibeserve.graph.replay")
            graph.replay()
            nvtx.range_pop()
            nvtx.range_push("vibeserve.sampling.d2h")
            tok = static_out.argmax(dim=-1).cpu()
            nvtx.range_pop()
            t1 = mono()
            nvtx.range_pop()
            records.write(t0, t1, "decode", [], [T_PROMPT + i + 1] * B, B, "full")
        nvtx.range_pop()
        return n_tokens

    # one throw-away request so that library initialisation happens before serving
    generate(2)
    torch.cuda.synchronize()
    return generate, torch


def worker_main(conn, dies_after):
    """An engine worker: holds GPU memory, counts the server's requests, exits 7 after `dies_after` of them."""
    import os
    import torch
    buf = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    buf.fill_(1)
    torch.cuda.synchronize()
    conn.send("ready")
    seen = 0
    while True:
        try:
            conn.recv()
        except EOFError:
            os._exit(0)
        seen += 1
        if dies_after is not None and seen >= dies_after:
            print(f"vibeserve_http worker {os.getpid()}: exiting 7 after {seen} requests", flush=True)
            os._exit(7)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, code, body, ctype="application/json"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def log_message(self, fmt, *args):  # keep the nsys console log small
        pass

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/health":
            self.reply(200 if STATE["ready"] else 503, "ok" if STATE["ready"] else "starting", "text/plain")
        elif url.path == "/v1/models":
            self.reply(200, json.dumps({"object": "list", "data": [{"id": "vibeserve-gpu"}]}))
        elif not STATE["ready"] and url.path in ("/generate", "/start_profile", "/stop_profile"):
            self.reply(503, "{}")
        elif url.path == "/generate":
            n = int(parse_qs(url.query).get("tokens", [DECODE])[0])
            self.reply(200, json.dumps({"tokens": STATE["generate"](n)}))
            if STATE.get("worker") is not None:
                try:
                    STATE["worker"].send(1)
                except (BrokenPipeError, OSError):
                    STATE["worker"] = None
        elif url.path == "/start_profile":
            STATE["torch"].cuda.synchronize()
            STATE["torch"].cuda.profiler.start()  # cudaProfilerStart
            STATE["profiling"] = True
            self.reply(200, "{}")
        elif url.path == "/stop_profile":
            STATE["torch"].cuda.synchronize()
            STATE["torch"].cuda.profiler.stop()  # cudaProfilerStop
            STATE["profiling"] = False
            self.reply(200, "{}")
        else:
            self.reply(404, "{}")

    def do_POST(self):
        # vLLM's /start_profile and /stop_profile are POSTs (pod-attach's endpoint strategy sends POST)
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if urlparse(self.path).path in ("/start_profile", "/stop_profile"):
            self.do_GET()
        else:
            self.reply(404, "{}")


def main():
    # listen first (so /health answers 503 while the engine builds), then build, then serve
    srv = HTTPServer(("127.0.0.1", PORT), Handler)
    print(f"vibeserve_http: listening on 127.0.0.1:{PORT}, building the engine", flush=True)
    t0 = time.time()
    srv.timeout = 0.2
    import threading
    done = threading.Event()

    def build():
        if WORKER:
            import multiprocessing
            ctx = multiprocessing.get_context("spawn")
            mine, theirs = ctx.Pipe()
            w = ctx.Process(target=worker_main, args=(theirs, WORKER_DIES_AFTER), daemon=True)
            w.start()
            mine.recv()
            STATE["worker"] = mine
            print(f"vibeserve_http: worker pid {w.pid} holds 512 MiB on the GPU", flush=True)
        STATE["generate"], STATE["torch"] = build_engine()
        STATE["ready"] = True
        print(f"vibeserve_http: ready after {time.time() - t0:.1f} s", flush=True)
        done.set()

    # build on the main thread (CUDA context, graph capture); answer /health meanwhile from a helper thread
    health = threading.Thread(target=lambda: [srv.handle_request() for _ in iter(lambda: done.is_set(), True)], daemon=True)
    health.start()
    build()
    health.join()
    srv.timeout = None
    srv.serve_forever()


if __name__ == "__main__":
    main()
