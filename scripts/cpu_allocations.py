"""What a `torch.profiler` session (`profile_memory=True`) recorded of the c10 CPU allocator, read
as CUDA's caching allocator would count it: shared by `measure_generate_cpu.py` and
`measure_accum_cpu.py`, with the record's header (`print_record`)."""

import json
import platform

import torch
import transformers


def r512(n):
    """`allocated_bytes` counts each block rounded up to 512 B."""
    return 512 * ((abs(n) + 511) // 512)


def allocation_events(prof):
    """Every allocation (+bytes) and free (-bytes) the session recorded, in time order (an
    allocation before a free at the same nanosecond)."""
    raw = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag == torch._C._profiler._EventType.Allocation and e.typed[1].alloc_size != 0:
            raw.append((e.start_time_ns, int(e.typed[1].alloc_size)))
    raw.sort(key=lambda x: (x[0], -x[1]))
    return [d for _, d in raw]


def peak_over_start(prof):
    """The most bytes allocated at once during the session, over what was allocated when it
    began: every allocation and free in time order (`allocation_events`), each 512-rounded."""
    cur = peak = 0
    for d in allocation_events(prof):
        cur += r512(d) if d > 0 else -r512(d)
        peak = max(peak, cur)
    return peak


def print_record(what, **fields):
    """Prints a measurement record: what it is, the versions that made it, then `fields` in
    the order given."""
    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }
    print(json.dumps({"what": what, "versions": versions, **fields}, indent=1))
