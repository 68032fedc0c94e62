#!/usr/bin/env python3
"""load_client.py - a bounded load client for vibeserve_http.py (standard library only).

Usage: python3 load_client.py BASE_URL SECONDS [--profile-range] [--tokens N]
  GETs BASE_URL/generate in a loop for SECONDS; with --profile-range it first GETs /start_profile (the engine calls
  cudaProfilerStart) after a short lead-in and GETs /stop_profile before the end, so the nsys capture range
  (--capture-range=cudaProfilerApi) lies inside the load. Prints {"requests": N, "tokens": M} as its last line
  (serve-capture reads it as diagnostic throughput). Exit 1 when a request fails.
"""
import json
import sys
import time
import urllib.request

base, seconds = sys.argv[1].rstrip("/"), float(sys.argv[2])
profile = "--profile-range" in sys.argv
tokens = None
if "--tokens" in sys.argv:
    tokens = int(sys.argv[sys.argv.index("--tokens") + 1])


def get(path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        if r.status != 200:
            raise RuntimeError(f"GET {path} -> {r.status}")
        return json.loads(r.read() or b"{}")


requests = produced = 0
t0 = time.time()
lead = min(2.0, seconds / 5)  # load before the range opens and after it closes
started = stopped = False
try:
    while time.time() - t0 < seconds:
        now = time.time() - t0
        if profile and not started and now >= lead:
            get("/start_profile")
            started = True
        if profile and started and not stopped and now >= seconds - lead:
            get("/stop_profile")
            stopped = True
        out = get("/generate" + (f"?tokens={tokens}" if tokens else ""))
        requests += 1
        produced += int(out.get("tokens", 0))
    if profile and started and not stopped:
        get("/stop_profile")
except Exception as e:  # noqa: BLE001 - any failure fails the client
    print(f"load_client: {e}", file=sys.stderr)
    print(json.dumps({"requests": requests, "tokens": produced}))
    sys.exit(1)
print(json.dumps({"requests": requests, "tokens": produced}))
