"""The CPU check of Liger-Kernel 0.8.2's fused linear cross-entropy under autocast
(crates/core/src/estimate/liger.rs, `autocast_transient`; docs/allocator-stream.md, "Chunked
losses"): `fused_linear_cross_entropy_forward` (liger_kernel/ops/fused_linear_cross_entropy.py at
v0.8.2) copied line for line as it runs for the HF loss (reduction mean, no bias, no softcap,
accum_dtype None) inside an `autograd.Function` under `@torch.amp.custom_fwd`, with CUDA's
autocast lists on the CPU (../shared/measure/cuda_autocast.py), on an fp32 head of 8192 x 256
over 64 fp32 rows (chunks of next_power_of_2(ceil(64 / ceil(8192/256))) = 2 rows). Stand-ins:
the Triton cross-entropy kernel writes the logits' gradient in place (here `mul_`, which
allocates nothing); `torch.addmm(..., out_dtype=torch.float32, out=grad_weight)` exists on CUDA
only, so `--addmm` makes the input cast it reads and writes nothing (in place on CUDA). Every
allocation of at least 512 B of one steady step (torch.profiler, profile_memory=True), in
order, as JSON.

usage: VENV/bin/python scripts/measure_liger_autocast_cpu.py [--addmm] [--frozen]
(torch 2.15.0 from PyPI, as `../shared/measure/README.md` installs it)"""
import json, sys, torch
from torch.profiler import ProfilerActivity, profile
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "../../shared/measure"))
import cuda_autocast; cuda_autocast.emulate()
ADDMM = "--addmm" in sys.argv
FROZEN = "--frozen" in sys.argv
BT, H, V = 64, 256, 8192
w = torch.nn.Parameter(torch.randn(V, H)); w.requires_grad_(not FROZEN)
x = torch.randn(BT, H, requires_grad=True)
tgt = torch.randint(0, V, (BT,))
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, _input, weight, target):
        inc = -(-V // H); cs = 1 << ((-(-BT // inc)) - 1).bit_length(); n = -(-BT // cs)
        grad_input = torch.zeros_like(_input)
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        loss_1d = torch.zeros(BT, dtype=torch.float32)
        m = target != -100; tot = m.sum().item()
        for c in range(n):
            s, e = c * cs, min((c + 1) * cs, BT)
            xc = _input[s:e]
            logits = xc @ weight.t()
            logits = logits.contiguous()
            logits.mul_(0.5)  # the kernel: the gradient written in place
            grad_input[s:e] = logits @ weight
            if grad_weight is not None:
                gt = logits.t()
                if ADDMM:
                    ic = xc.to(gt.dtype) if xc.dtype != gt.dtype else xc
                    del ic  # CUDA: torch.addmm(grad_weight, gt, ic, out_dtype=float32, out=grad_weight), in place (CUDA-only op)
                else:
                    grad_weight += torch.mm(logits.t(), xc).float()
        loss = torch.sum(loss_1d)
        grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
        ctx.save_for_backward(grad_input.detach(), grad_weight.detach() if grad_weight is not None else None)
        return loss
    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, g):
        gi, gw = ctx.saved_tensors
        return gi, gw, None
def step():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = x * 1.0
        loss = F.apply(h, w, tgt)
    loss.backward()
step(); x.grad = None; w.grad = None
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    step()
out = []
stack = list(prof.profiler.kineto_results.experimental_event_tree())
while stack:
    e = stack.pop(); stack.extend(e.children)
    if e.tag == torch._C._profiler._EventType.Allocation and e.typed[1].alloc_size != 0:
        p = e.parent
        out.append((e.start_time_ns, int(e.typed[1].alloc_size), p.name if p else ""))
out.sort(key=lambda x: (x[0], -x[1]))
print(json.dumps({
    "what": "Liger 0.8.2 fused linear cross-entropy under autocast, one steady step: allocations "
            "(+) and frees (-) of at least 512 B (scripts/measure_liger_autocast_cpu.py)",
    "torch": torch.__version__, "addmm": ADDMM, "head_trains": not FROZEN,
    "rows": BT, "hidden": H, "vocab": V,
    "events": [[d, op] for t, d, op in out if abs(d) >= 512]}))
