"""Run by test_fsdp.py in a subprocess: 2 gloo processes train an FSDP2 (`fully_shard`) model whose
layers (or whole model) are compiled, next to an eager FSDP2 copy; rank 0 prints one JSON line."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import minidynamo  # noqa: E402
from minidynamo.backends import lookup_backend  # noqa: E402

LAYERS = 4


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
                                 for _ in range(LAYERS)])


def sharded(compile_how: str, backend) -> torch.nn.Module:
    model = make_model()
    for i, layer in enumerate(model):
        fully_shard(layer)
        if compile_how == "per_layer":
            model[i] = minidynamo.compile(layer, backend=backend)
    fully_shard(model)
    return minidynamo.compile(model, backend=backend) if compile_how == "whole" else model


def train(compile_how: str, backend_name: str, rank: int, steps: int = 5) -> dict:
    graphs = []
    inner = lookup_backend(backend_name)

    def backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return inner(gm, example_inputs)

    reference, compiled = sharded("none", None), sharded(compile_how, backend)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (reference, compiled)]
    losses, compiled_after = [], []
    for step in range(steps):
        torch.manual_seed(100 * step + rank)
        x = torch.randn(8, 32)
        pair = []
        for model, opt in zip((reference, compiled), optimizers):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            pair.append(loss.item())
        losses.append(pair)
        compiled_after.append(minidynamo.stats()["compiled"])
    equal = all(torch.allclose(a.full_tensor(), b.full_tensor(), atol=1e-6)
                for a, b in zip(reference.parameters(), compiled.parameters()))
    return {"losses": losses, "equal": equal, "graphs": len(graphs), "compiled_after_step": compiled_after,
            "fallbacks": minidynamo.stats()["backend_fallbacks"]}


def worker(rank: int, world: int, port: int, cases: list) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for how, backend in cases:
            minidynamo.reset()
            result = train(how, backend, rank)
            if rank == 0:
                print(json.dumps({"case": [how, backend], **result}), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1]), json.loads(sys.argv[2])), nprocs=2)
