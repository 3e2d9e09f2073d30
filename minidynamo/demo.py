"""`make demo`: the toy example from the README, compiled and explained."""
import torch

import minidynamo
from minidynamo import _C, GuardedCode
from minidynamo.eval_frame import optimize_with_callback


def toy(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def show_hook() -> None:
    print("== the eval-frame hook and its per-code cache ==")

    def callback(frame):
        print(f"  callback: converting {frame.f_code.co_name}({', '.join(frame.f_locals)})")
        shapes = {k: tuple(v.shape) for k, v in frame.f_locals.items()}
        return GuardedCode(frame.f_code, lambda L: {k: tuple(v.shape) for k, v in L.items()} == shapes)

    fn = optimize_with_callback(callback)(toy)
    for shape in [(4,), (4,), (8,), (4,)]:
        a, b = torch.randn(shape), torch.randn(shape)
        assert torch.allclose(fn(a, b), toy(a, b))
    print(f"  entries cached for toy: {len(_C.get_cache_entries(toy.__code__))}")
    print(f"  hook counters: {_C.stats()}")
    print(f"  hook installed now: {_C.hook_installed()}")


def main() -> None:
    show_hook()
    minidynamo.reset()


if __name__ == "__main__":
    main()
