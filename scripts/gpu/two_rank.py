#!/usr/bin/env python3
"""two_rank.py - two engine ranks as two processes on one GPU, for step-budget's per-rank view and the iteration join.

Each rank is its own process (multiprocessing "spawn": fork+exec of python, as a tensor-parallel engine starts its
workers) that owns CUDA on GPU 0 and runs PREFILL eager prefill steps, then STEPS decode steps, each one CUDA graph
replay (8 fp16 matmuls). After sampling, the ranks exchange their token over torch.distributed's gloo backend
(a host all_reduce on TCP 127.0.0.1: a stand-in for the tensor-parallel exchange, since NCCL refuses two ranks on
one device), so a rank that is late makes the other wait: every 10th step (index % 10 == 5) rank 1 sleeps 2 ms in
its scheduling phase and is the straggler of that step.

NVTX per rank: vibeserve.engine.iteration > vibeserve.engine.scheduling, vibeserve.model.prefill |
vibeserve.graph.replay, vibeserve.sampling.d2h, vibeserve.comm.all_reduce.
Iteration records (docs/iterations.md): when NSYSKIT_ITERATION_RECORDS names a file, each rank appends one JSON
line per iteration (one os.write on an O_APPEND descriptor), CLOCK_MONOTONIC start/end taken just inside the
iteration's range, with its rank.
Usage: python3 two_rank.py [STEPS] [PREFILL]
"""
import json
import os
import sys
import time

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 120
PREFILL = int(sys.argv[2]) if len(sys.argv) > 2 else 4
WORLD, B, D, T_PROMPT = 2, 8, 1024, 256


def rank_main(rank):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    nvtx = torch.cuda.nvtx
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29517", rank=rank, world_size=WORLD)
    torch.manual_seed(rank)
    ws = [torch.randn(D, D, device=dev, dtype=torch.float16) * 0.02 for _ in range(8)]

    def forward(x):
        for i, w in enumerate(ws):
            x = F.gelu(x @ w) if i % 2 == 0 else x @ w
        return x

    x_static = torch.zeros(B, D, device=dev, dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            forward(x_static)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = forward(x_static)
    torch.cuda.synchronize()
    path = os.environ.get("NSYSKIT_ITERATION_RECORDS")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
    tok = torch.zeros(1, dtype=torch.float32)
    dist.barrier()
    for it in range(PREFILL + STEPS):
        prefill = it < PREFILL
        nvtx.range_push("vibeserve.engine.iteration")
        t0 = time.monotonic_ns()
        nvtx.range_push("vibeserve.engine.scheduling")
        if rank == 1 and it % 10 == 5:
            time.sleep(0.002)
        nvtx.range_pop()
        if prefill:
            nvtx.range_push("vibeserve.model.prefill")
            y = forward(torch.randn(B * T_PROMPT // 8, D, device=dev, dtype=torch.float16))
        else:
            nvtx.range_push("vibeserve.graph.replay")
            graph.replay()
            y = out
        nvtx.range_pop()
        nvtx.range_push("vibeserve.sampling.d2h")
        tok[0] = y.float().sum().item()
        nvtx.range_pop()
        nvtx.range_push("vibeserve.comm.all_reduce")
        dist.all_reduce(tok)
        nvtx.range_pop()
        t1 = time.monotonic_ns()
        nvtx.range_pop()
        if fd is not None:
            rec = {"iteration": it, "rank": rank, "start_ns": t0, "end_ns": t1, "elapsed_ns": t1 - t0,
                   "phase": "prefill" if prefill else "decode",
                   "prefill_chunks": [T_PROMPT] * (B // 8) if prefill else [],
                   "decode_kv_lens": [] if prefill else [T_PROMPT + it - PREFILL + 1] * B,
                   "scheduled_tokens": T_PROMPT * (B // 8) if prefill else B, "scheduled_requests": B,
                   "batch_size": B, "graph_mode": "none" if prefill else "full", "backend": "torch-matmul"}
            os.write(fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp
    mp.spawn(rank_main, nprocs=WORLD, join=True)
    print(f"two_rank: {WORLD} ranks x {PREFILL} prefill + {STEPS} decode steps done", flush=True)
