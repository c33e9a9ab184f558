#!/usr/bin/env python3
"""Wall time of `vramscope estimate ORG/NAME --json` cold (fetched from the tests' mock Hub,
`--refresh`) and warm (vramscope's cache, HF_HUB_OFFLINE=1), mean of N runs of the release
binary; a preset as the baseline. Usage (after `cargo build --release -p vramscope --example
mock_hub`): scripts/bench_hub.py [N]"""
import os, statistics, subprocess, sys, tempfile, time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
exe = os.path.join(target, "release", "vramscope")
mock = subprocess.Popen([os.path.join(target, "release", "examples", "mock_hub")],
                        stdout=subprocess.PIPE, text=True)
url = mock.stdout.readline().strip()
tmp = tempfile.mkdtemp()
env = {k: v for k, v in os.environ.items()
       if not k.upper().startswith(("HF_", "HTTP", "ALL_PROXY", "HUGGINGFACE"))}
env.update(HF_ENDPOINT=url, HF_HOME=os.path.join(tmp, "hf"),
           VRAMSCOPE_CACHE=os.path.join(tmp, "cache"))


def timed(args, extra=None):
    e = dict(env, **(extra or {}))
    times = []
    for _ in range(N):
        t = time.perf_counter()
        subprocess.run([exe] + args, env=e, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t)
    return statistics.mean(times) * 1e3, statistics.median(times) * 1e3


model = "hf://meta-llama/Llama-3.1-8B"
rows = [
    ("preset `estimate llama-3.1-8b --json` (baseline)", timed(["estimate", "llama-3.1-8b", "--json"])),
    (f"cold: `estimate {model} --json --refresh` (mock Hub: listing, config, index, 4 shard headers)",
     timed(["estimate", model, "--json", "--refresh"])),
    (f"warm: `estimate {model} --json` (vramscope's cache, HF_HUB_OFFLINE=1)",
     timed(["estimate", model, "--json"], {"HF_HUB_OFFLINE": "1"})),
]
mock.kill()
for name, (mean, med) in rows:
    print(f"| {name} | {mean:.1f} ms | {med:.1f} ms |")
