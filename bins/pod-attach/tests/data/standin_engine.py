"""Stand-in inference engine for pod-attach's tests (CPU only).

serve MARKER PORTFILE OUTDIR REPORT LIBCUDA [stop]: an HTTP server with POST /start_profile and /stop_profile (like
vLLM's), which starts a child `core LIBCUDA EngineCore MARKER` that maps a file named libcuda.so.1 (so it is
the "CUDA-owning" process pod-attach must pick). On /stop_profile it places REPORT, a real nsys report, into
OUTDIR as nsys --capture-range-end=repeat would write a new report: a CPU-only machine cannot produce a
cudaProfilerApi capture. With `stop` it behaves like --capture-range-end=stop instead: the first /stop_profile
writes OUTDIR/run.nsys-rep, later ranges write nothing. Every request is appended to OUTDIR/../engine-hits.log.
"""
import http.server, mmap, os, shutil, subprocess, sys, time

if sys.argv[1] == "core":
    f = open(sys.argv[2], "rb")
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    parent, t0 = os.getppid(), time.time()
    while os.getppid() == parent and time.time() - t0 < 600:
        time.sleep(0.5)
    sys.exit(0)

marker, portfile, outdir, report, libcuda = sys.argv[2:7]
stop_mode = sys.argv[7:8] == ["stop"]
# STANDIN_SET_CUDA_INJECTION64_PATH: set CUDA_INJECTION64_PATH for the CUDA-owning child, as a zymtrace-style
# launcher between nsys and the engine would (nsys itself replaces an inherited value with its own library)
child_env = dict(os.environ)
if os.environ.get("STANDIN_SET_CUDA_INJECTION64_PATH"):
    child_env["CUDA_INJECTION64_PATH"] = os.environ["STANDIN_SET_CUDA_INJECTION64_PATH"]
child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "core", libcuda, "EngineCore", marker], env=child_env)
hits = os.path.join(os.path.dirname(outdir.rstrip("/")), "engine-hits.log")
n = [0]


class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        with open(hits, "a") as h:
            h.write(self.path + "\n")
        if self.path == "/start_profile":
            code = 200
        elif self.path == "/stop_profile":
            n[0] += 1
            if not (stop_mode and n[0] > 1):
                tmp = os.path.join(outdir, ".writing")
                shutil.copyfile(report, tmp)
                os.rename(tmp, os.path.join(outdir, "run.nsys-rep" if stop_mode else "run.%d.nsys-rep" % n[0]))
            code = 200
        else:
            code = 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()

    def log_message(self, *a):
        pass


import threading


def watchdog():
    time.sleep(600)
    child.kill()
    os._exit(0)


threading.Thread(target=watchdog, daemon=True).start()
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(portfile + ".tmp", "w") as p:
    p.write(str(srv.server_address[1]))
os.rename(portfile + ".tmp", portfile)
try:
    srv.serve_forever()
finally:
    child.kill()
