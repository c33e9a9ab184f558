"""Which tensors AOTAutograd's min-cut partitioner saves for backward under torch.compile.

Usage: MEASURE_DIR=../shared/measure python scripts/compile_saved.py SPEC.json [-v]

The model of a measure.py spec (validation/specs/*-compile.json) is compiled with inductor's own
joint-graph passes and partition function (torch._inductor.compile_fx.compile_fx), but a custom
inner_compile replaces kernel compilation: it records each backward graph's inputs other than
tangents (the saved tensors and the parameters, "primals_*") and runs the graph as is. One
forward+backward then prints, per graph, the saved tensors by shape and dtype (-v: each one by
its FX name). Sizes are numel x element size: a saved view counts its own extent, not its base.
"""

import collections
import copy
import json
import os
import sys

import torch

sys.path.insert(0, os.environ.get("MEASURE_DIR", "../shared/measure"))


def main(spec_path, verbose):
    import cuda_autocast
    import measure
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor import compile_fx as cfx
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    with open(spec_path) as f:
        spec = json.load(f)
    measure.use_cuda_dropout_path()
    cfg = copy.deepcopy(spec["hf_config"])
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    masked = spec.get("head") == "masked-lm"
    auto = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    torch.manual_seed(0)
    model = auto.from_config(config, attn_implementation=spec["attention"], dtype=torch.float32)
    model.train()
    b, s = spec["batch"], spec["seq"]
    ids = torch.randint(0, config.vocab_size, (b, s))
    kw = {"input_ids": ids, "labels": ids.clone()}
    if not masked:
        kw["use_cache"] = False
    mixed = spec["precision"] == "bf16-mixed"
    if mixed:
        cuda_autocast.emulate()
    graphs = []

    def inner(gm, example_inputs, **k):
        if k.get("is_backward"):
            rows = []
            for n in gm.graph.nodes:
                v = n.meta.get("val")
                saved = n.op == "placeholder" and not n.name.startswith("tangents")
                if saved and isinstance(v, torch.Tensor):
                    rows.append(
                        (n.name, tuple(v.shape), str(v.dtype), v.numel() * v.element_size())
                    )
            graphs.append(rows)
        return make_boxed_func(gm.forward)

    model.compile(backend=lambda gm, ex: cfx.compile_fx(gm, ex, inner_compile=inner))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
        loss = model(**kw).loss
    loss.backward()
    for gi, rows in enumerate(graphs):
        print(f"graph {gi}: {len(rows)} saved, {sum(r[3] for r in rows)} B")
        c = collections.Counter((r[1], r[2]) for r in rows)
        for (shape, dt), n in sorted(c.items(), key=lambda x: -x[1]):
            print("  ", n, "x", shape, dt)
        if verbose:
            for r in rows:
                print("    ", r)


if __name__ == "__main__":
    main(sys.argv[1], "-v" in sys.argv)
