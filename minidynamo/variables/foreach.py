"""Multi-tensor calls optimizers and gradient clipping make, traced without reading tensor values."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import ConstDictVariable
from .lists import ListVariable, TupleVariable
from .tensor import TensorVariable

# foreach ops taking one number per tensor, which eager reads out of a tensor (Adam's step sizes
# while compiling); fake tensors cannot run that overload. op -> how its two tensor lists combine.
_FOREACH_SCALED = {torch._foreach_addcdiv_: torch._foreach_div, torch._foreach_addcmul_: torch._foreach_mul}


def _foreach_scaled_by_tensor(fn: Callable) -> Callable[..., Optional[VariableTracker]]:
    """`_foreach_addcdiv_(xs, as, bs, scalars)` with a tensor of scalars as `_foreach_add_(xs,
    as / bs * scalars[i])`: the same update without reading the scalars in Python."""
    def handler(tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> Optional[VariableTracker]:
        if len(args) != 4 or kwargs or not isinstance(args[3], TensorVariable):
            return None

        def op(f: Callable, *op_args: VariableTracker) -> VariableTracker:
            return tx.output.call_graph_op(tx, "call_function", f, list(op_args), {})

        term = op(torch._foreach_mul, op(_FOREACH_SCALED[fn], args[1], args[2]), op(torch.unbind, args[3]))
        op(torch._foreach_add_, args[0], term)
        return ConstantVariable(None)

    return handler


def _group_by_device_and_dtype(tx, args: List[VariableTracker],
                               kwargs: Dict[str, VariableTracker]) -> Optional[VariableTracker]:
    """`torch._C._group_tensors_by_device_and_dtype(lists, with_indices)`, answered from the guarded
    metadata of the first list's tensors (groups in order of first appearance)."""
    if not args or kwargs:
        return None
    lists = [column.unpack_var_sequence(tx) for column in args[0].unpack_var_sequence(tx)]
    if not lists or not all(isinstance(t, TensorVariable) for t in lists[0]):
        return None
    groups: Dict[Tuple[Any, Any], List[int]] = {}
    for i, tensor in enumerate(lists[0]):
        groups.setdefault((tensor.example.device, tensor.example.dtype), []).append(i)
    with_indices = len(args) > 1 and bool(args[1].as_python_constant())
    result = {}
    for key, indices in groups.items():
        columns = ListVariable([ListVariable([column[i] for i in indices]) for column in lists])
        kept = ListVariable([ConstantVariable(i) for i in indices] if with_indices else [])
        result[key] = TupleVariable([columns, kept])
    return ConstDictVariable(result)


MULTI_TENSOR_HANDLERS: Dict[Any, Callable[..., Optional[VariableTracker]]] = {
    **{fn: _foreach_scaled_by_tensor(fn) for fn in _FOREACH_SCALED},
    torch._C._group_tensors_by_device_and_dtype: _group_by_device_and_dtype,
}
