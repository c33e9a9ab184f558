#!/usr/bin/env python3
"""Run every command's --json on the shared validation jobs and fixtures with one binary and
write each answer (stdout, stderr's first line, exit code) to a folder, so two builds can be
compared byte for byte (issue 17: behaviour must not change under the refactor).

    scripts/json_identity.py BIN OUTDIR        # e.g. before: target/debug/vramscope /tmp/before
    diff -r /tmp/before /tmp/after              # must print nothing

Jobs come from ../shared/validation/*.json and validation/cpu-measured-extra.json; records
from ../shared/fixtures and crates/measure/tests/fixtures/logs. Hub access is switched off
(HF_HUB_OFFLINE=1) so only local models resolve."""
import json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def cases():
    files = sorted((SHARED / "validation").glob("*.json")) + [ROOT / "validation/cpu-measured-extra.json"]
    for f in files:
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, list):
            for i, case in enumerate(data):
                job = case.get("job") if isinstance(case, dict) else None
                if isinstance(job, dict):
                    yield f"{f.stem}-{i:03}", job


def records():
    roots = [SHARED / "fixtures", ROOT / "crates/measure/tests/fixtures/logs"]
    for r in roots:
        for p in sorted(r.rglob("*")):
            if p.is_file() and p.suffix not in (".md", ".tsv", ".py") and p.stat().st_size < 64 << 20:
                yield p


def run(binary, args, out: Path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1")
    p = subprocess.run([binary, *args], capture_output=True, env=env, cwd=ROOT, timeout=600)
    err = p.stderr.decode(errors="replace").strip().splitlines()
    out.write_bytes(p.stdout + f"\n--- rc {p.returncode}; {err[0] if err else ''}\n".encode())


def main():
    binary, outdir = os.path.abspath(sys.argv[1]), Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    run(binary, ["models", "--json"], outdir / "models.json")
    run(binary, ["gpus", "--json"], outdir / "gpus.json")
    for f in sorted((SHARED / "validation").glob("*.json")):
        run(binary, ["validate", "--json", str(f)], outdir / f"validate-{f.stem}.json")
    for name, job in cases():
        jf = tmp / f"{name}.json"
        jf.write_text(json.dumps(job))
        run(binary, ["estimate", "--json", "--job", str(jf)], outdir / f"estimate-{name}.json")
        run(binary, ["estimate", "--json", "--advise", "--job", str(jf)], outdir / f"advise-{name}.json")
        gpu = [] if job.get("gpu") else ["--gpu", "h100-80gb"]
        run(binary, ["fit", "--json", *gpu, "--job", str(jf)], outdir / f"fit-{name}.json")
        if job.get("task", "train") == "train" and name.endswith(("0", "5")):
            run(binary, ["plan", "--json", "--gpus", "8", *gpu, "--job", str(jf)], outdir / f"plan-{name}.json")
    models = json.loads(subprocess.run([binary, "models", "--json"], capture_output=True).stdout or b"[]")
    names = [m.get("id") if isinstance(m, dict) else m for m in (models if isinstance(models, list) else models.get("models", []))]
    for m in names[:40]:
        if m:
            run(binary, ["inspect", "--json", m], outdir / f"inspect-{m}.json")
    for i, p in enumerate(records()):
        rel = str(p).replace("/", "_")[-80:]
        run(binary, ["analyze", "--json", str(p)], outdir / f"analyze-{i:03}-{rel}.json")
    first = next(cases(), None)
    if first:
        jf = tmp / "compare-job.json"
        jf.write_text(json.dumps(first[1]))
        for i, p in enumerate(list(records())[:12]):
            run(binary, ["compare", "--json", "--job", str(jf), str(p)], outdir / f"compare-{i:03}.json")


if __name__ == "__main__":
    main()
