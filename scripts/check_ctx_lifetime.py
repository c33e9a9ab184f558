#!/usr/bin/env python3
"""How long a tensor held as a custom autograd Function's ctx attribute lives (the mechanism
of bitsandbytes' `MatMul8bitLt`, whose forward sets `ctx.tensors = (CAt, subA, A)` instead of
calling `save_for_backward`). Runs on the CPU with PyTorch alone: three Functions in a chain,
each holding its input as a ctx attribute; a weak reference to each input is probed after
every node's backward and after the loss is dropped.

    /work/mvenv/bin/python scripts/check_ctx_lifetime.py

Printed (torch 2.15.0, CPU): held as a ctx attribute, every input is alive after each node's
backward and after the whole backward, and gone once the loss (the graph's root) is dropped;
through `save_for_backward`, each input is gone once its own node has run. Under
non-reentrant checkpointing (`use_reentrant=False`) the held input outlives the checkpointed
forward (True), the saved one does not; under reentrant checkpointing neither does. Followed
through a step of two checkpointed blocks (`through_the_step`): under non-reentrant
checkpointing each block's first-forward held input is alive after the whole backward and gone
once the loss is dropped, while the input the recompute holds is gone by the end of its
block's backward (the recomputed graph is discarded); under reentrant checkpointing no held
input, of either forward, outlives its block's backward. So autograd's release of
saved tensors (`PyNode::release_variables` clears `saved_variables` only) does not reach ctx
attributes: they live as long as the graph, i.e. until `training_step` drops the loss after
`backward` returns. (bitsandbytes' int8 kernels are CUDA's; this checks PyTorch's part.)"""
import gc
import weakref

import torch
from torch.utils.checkpoint import checkpoint


W = torch.randn(64, 64)


class Held(torch.autograd.Function):
    """`MatMul8bitLt`'s way: the input as a ctx attribute."""

    @staticmethod
    def forward(ctx, a, w):
        ctx.tensors = (None, None, a)
        return a @ w

    @staticmethod
    def backward(ctx, g):
        return g @ W.t(), None


class Saved(torch.autograd.Function):
    """The contrast: the input through `save_for_backward`."""

    @staticmethod
    def forward(ctx, a, w):
        ctx.save_for_backward(a)
        return a @ w

    @staticmethod
    def backward(ctx, g):
        (_a,) = ctx.saved_tensors
        return g @ W.t(), None


def run(fn):
    print(fn.__name__)
    x = torch.randn(8, 64, requires_grad=True)
    refs, seen = [], []
    h = x
    for i in range(3):
        a = h * 1.0  # the Function's input, read by nothing else
        refs.append(weakref.ref(a))
        h = fn.apply(a, W)
        # Fires once this Function's output gradient is ready: every later node has run.
        h.register_hook(lambda g, i=i: seen.append((f"  nodes after Function {i} done", alive(refs))))
        del a
    x.register_hook(lambda g: seen.append(("  whole backward done", alive(refs))))
    loss = h.sum()
    del h
    loss.backward()
    for what, state in seen:
        print(f"{what}: inputs alive {state}")
    del loss
    gc.collect()
    print(f"  loss dropped: inputs alive {alive(refs)}")


def checkpointed(fn, reentrant):
    """Whether a checkpointed block's input to `fn` outlives the block's first forward."""
    refs = []

    def block(h):
        a = h * 1.0
        refs.append(weakref.ref(a))
        return fn.apply(a, W)

    x = torch.randn(8, 64, requires_grad=True)
    y = checkpoint(block, x, use_reentrant=reentrant)
    alive_after = refs[0]() is not None
    y.sum().backward()
    kind = "reentrant" if reentrant else "non-reentrant"
    print(f"{fn.__name__} under {kind} checkpointing: input alive after the forward {alive_after}")


def through_the_step(reentrant):
    """Two checkpointed blocks in a chain, each feeding `Held` a fresh tensor: which held
    inputs (of the first forward, then of each block's recompute) are alive when block 0's
    backward starts (block 1's done), after the whole backward, and once the loss is dropped."""
    refs, seen = {}, []

    def block(k):
        def run_block(h):
            a = h * 1.0
            calls = refs.setdefault(k, [])
            calls.append(weakref.ref(a))
            # `sin` saves its input: the backward unpacks it, so the block is recomputed up to
            # it (non-reentrant's early stop ends the recompute at the last saved tensor).
            return torch.sin(Held.apply(a, W))

        return run_block

    x = torch.randn(8, 64, requires_grad=True)
    h0 = checkpoint(block(0), x, use_reentrant=reentrant)
    h0.register_hook(lambda g: seen.append(("  block 1's backward done", state(refs))))
    h1 = checkpoint(block(1), h0, use_reentrant=reentrant)
    x.register_hook(lambda g: seen.append(("  whole backward done", state(refs))))
    loss = h1.sum()
    del h0, h1
    loss.backward()
    kind = "reentrant" if reentrant else "non-reentrant"
    print(f"Held under {kind} checkpointing, inputs alive per block [first forward, recompute]:")
    for what, st in seen:
        print(f"{what}: {st}")
    del loss
    gc.collect()
    print(f"  loss dropped: {state(refs)}")


def state(refs):
    return {k: [r() is not None for r in calls] for k, calls in sorted(refs.items())}


def main():
    run(Held)
    run(Saved)
    for fn in (Held, Saved):
        for reentrant in (False, True):
            checkpointed(fn, reentrant)
    for reentrant in (False, True):
        through_the_step(reentrant)


def alive(refs):
    return [r() is not None for r in refs]


if __name__ == "__main__":
    main()
