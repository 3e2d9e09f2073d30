"""`make demo`: the toy example from the README, compiled, checked against eager, and explained."""
import torch

import minidynamo
from minidynamo.testing import CompileCounter


def toy(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def my_compiler(gm: torch.fx.GraphModule, example_inputs):
    print(f"my_compiler() called with an FX graph of {len(gm.graph.nodes)} nodes:")
    print(gm.code.strip())
    return gm.forward


def main() -> None:
    torch.manual_seed(0)
    print("== toy compiled with a custom backend ==")
    compiled = minidynamo.optimize(my_compiler)(toy)
    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(compiled(a, b), toy(a, b))

    counter = CompileCounter()
    compiled = minidynamo.optimize(counter)(toy)
    for _ in range(100):
        a, b = torch.randn(10), torch.randn(10)
        torch.testing.assert_close(compiled(a, b), toy(a, b))
    print(f"\n100 random calls match eager; graphs compiled: {counter.frame_count} "
          "(the first graph, then one resume graph per branch taken)")

    print("\n== explain(toy) ==")
    print(minidynamo.explain(toy)(torch.randn(10), torch.randn(10)))
    minidynamo.reset()


if __name__ == "__main__":
    main()
