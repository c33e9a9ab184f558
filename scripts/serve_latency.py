#!/usr/bin/env python3
"""Latency and CPU per request of `vramscope serve`'s /api/plan, /api/compare, /api/inspect and
/api/models on loopback, for one binary (BENCHMARKS.md, "Server routes without a child
process"). CPU is the server's utime + stime plus that of the children it waited for
(proc(5) fields 14-17), so a route that runs a child process pays for it here too.

    scripts/serve_latency.py BIN [N]       # N requests per route after one warm-up (default 20)
"""
import base64, http.client, json, os, statistics, subprocess, sys, time
from pathlib import Path

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
binary, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20
p = subprocess.Popen([binary, "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                     env={"NO_COLOR": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
host, port = p.stdout.readline().decode().strip().rsplit("http://", 1)[1].strip("/").split(":")
record = (SHARED / "fixtures/cpu_timeline.json").read_bytes()
tiny = str(SHARED / "fixtures/hf_tiny_llama")
ROUTES = {
    "/api/plan": ("POST", json.dumps({"model": "llama-3.1-8b", "batch": 1, "seq": 2048,
                                      "gpu": "h100-80gb", "parallel": {"gpus": 8}})),
    "/api/compare": ("POST", json.dumps({"job": {"model": tiny, "batch": 4, "seq": 128},
                                         "measurement_b64": base64.b64encode(record).decode()})),
    "/api/inspect": ("POST", json.dumps({"model": "llama-3.1-8b"})),
    "/api/models": ("GET", None),
}


def cpu_s():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def once(method, path, body):
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    t = time.perf_counter()
    c.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    assert r.status == 200, (path, r.status, data[:200])
    return time.perf_counter() - t


try:
    for path, (method, body) in ROUTES.items():
        first = once(method, path, body)  # warms the server's caches (models: computed once)
        c0 = cpu_s()
        times = [once(method, path, body) for _ in range(n)]
        cpu = (cpu_s() - c0) / n
        print(f"{path:13} first {first * 1e3:7.1f} ms  median {statistics.median(times) * 1e3:7.1f} ms  "
              f"min {min(times) * 1e3:7.1f} ms  cpu/request {cpu * 1e3:6.1f} ms  (n={n})")
finally:
    p.terminate()
    p.wait()
