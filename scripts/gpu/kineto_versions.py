#!/usr/bin/env python3
"""kineto_versions.py - a few CUDA ops under torch.profiler, run with KINETO_LOG_LEVEL=0 so that kineto
logs its own console lines (among them `CUDA versions. CUPTI: …; Runtime: …; Driver: …`)."""
import torch
from torch.profiler import ProfilerActivity, profile

x = torch.randn(1024, 1024, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        y = x @ x
    torch.cuda.synchronize()
print(f"[kineto_versions] {len(prof.events())} events", flush=True)
