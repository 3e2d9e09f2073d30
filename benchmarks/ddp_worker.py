"""Run in a subprocess by tests/test_ddp.py and bench_ddp.py: 2 gloo processes on 127.0.0.1 train a compiled model under
DistributedDataParallel next to an eager DDP copy; rank 0 prints one JSON line of results."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import minidynamo  # noqa: E402
from minidynamo.backends import lookup_backend  # noqa: E402


def make_model(width: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU())
                                 for _ in range(layers)])


def counting(backend: str, parts: list):
    inner = lookup_backend(backend)

    def compile_part(gm, example_inputs):
        parts.append(sum(1 for n in gm.graph.nodes if n.op == "call_function"))
        return inner(gm, example_inputs)
    return compile_part


def compiled_ddp(spec: dict, parts: list) -> torch.nn.Module:
    kwargs = {"bucket_cap_mb": spec["bucket_cap_mb"]} if spec.get("bucket_cap_mb") else {}
    model = make_model(spec["width"], spec["layers"])
    if spec.get("system") == "torch":  # torch.compile, for comparison (its DDP optimizer splits too)
        return torch.compile(DDP(model, **kwargs), backend=spec["backend"])
    backend = counting(spec["backend"], parts)
    if spec["wrap"] == "compile_inside":  # DDP(compile(model))
        return DDP(minidynamo.compile(model, backend=backend), **kwargs)
    return minidynamo.compile(DDP(model, **kwargs), backend=backend)


def all_reduce_starts(ddp: DDP, starts: list) -> None:
    def hook(state, bucket):
        starts.append(time.perf_counter())
        return allreduce_hook(state, bucket)
    ddp.register_comm_hook(None, hook)


def train(spec: dict, rank: int) -> dict:
    minidynamo.config.optimize_ddp = spec.get("optimize_ddp", True)
    kwargs = {"bucket_cap_mb": spec["bucket_cap_mb"]} if spec.get("bucket_cap_mb") else {}
    reference, parts, starts = DDP(make_model(spec["width"], spec["layers"]), **kwargs), [], []
    compiled = compiled_ddp(spec, parts)
    inner = compiled if isinstance(compiled, DDP) else compiled._orig_mod
    all_reduce_starts(inner, starts)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (reference, compiled)]
    losses, spans, step_ms = [], [], []
    for step in range(spec["steps"]):
        torch.manual_seed(1000 * step + rank)
        x = torch.randn(spec["batch"], spec["width"])
        step_losses = []
        for model, opt in zip((reference, compiled), optimizers):
            del starts[:]
            start = time.perf_counter()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            step_ms.append(1000 * (time.perf_counter() - start))
            step_losses.append(loss.item())
        spans.append(1000 * (max(starts) - min(starts)) if starts else 0.0)
        losses.append(step_losses)
    equal = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(reference.parameters(), compiled.parameters()))
    return {"equal": equal, "losses": losses, "parts": parts, "compiled": minidynamo.stats()["compiled"],
            "buckets": len(inner.reducer._get_zeros_like_grad_buckets()), "first_to_last_ms": spans,
            "eager_step_ms": step_ms[0::2], "compiled_step_ms": step_ms[1::2],
            "fallbacks": minidynamo.stats()["backend_fallbacks"]}


def worker(rank: int, world: int, port: int, specs: list) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for spec in specs:
            minidynamo.reset()
            result = train(spec, rank)
            if rank == 0:
                print(json.dumps({"spec": spec, **result}), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    port, specs = int(sys.argv[1]), json.loads(sys.argv[2])
    mp.spawn(worker, args=(2, port, specs), nprocs=2)


def run(specs: list, timeout: float) -> list:
    """Each spec's results (rank 0's), from a fresh pair of processes."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, os.path.abspath(__file__), str(port), json.dumps(specs)],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"DDP workers failed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
