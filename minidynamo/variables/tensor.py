"""Tensors: each is an fx node of the output graph plus a fake tensor carrying its metadata."""
from __future__ import annotations

import inspect
import operator
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.fx

from ..codegen.fx_functional import may_write_in_place  # noqa: F401 - imported from here too
from ..exc import unimplemented
from ..guards import Guard, GuardKind
from ..source import AttrSource, CallSource
from .base import VariableTracker
from .constant import ConstantVariable, is_constant_value
from .misc import BoundMethodCall
from .sym import SizeVariable, specialized_value

# Metadata read while tracing; the tensor guards make these constants safe (sizes, strides and
# numel are symbolic where a size is).
_CONSTANT_ATTRS = ("dtype", "device", "ndim", "requires_grad", "is_cuda", "layout", "is_leaf", "is_sparse",
                   "is_nested", "is_quantized", "is_meta", "is_cpu", "is_mkldnn")
_CONSTANT_METHODS = ("size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous",
                     "is_floating_point", "is_complex", "element_size", "get_device", "storage_offset")
# Other methods whose answer, when the graph's fake execution gives a Python value, follows from
# what the tensor guards check (dtype, sizes, dispatch keys).
_METADATA_METHODS = ("is_signed", "is_inference", "is_conj", "is_neg", "is_same_size", "__len__")
_DATA_DEPENDENT = {
    "item": "reading a tensor's value with .item()",
    "tolist": "converting a tensor to a list with .tolist()",
    "numpy": "converting a tensor to numpy with arguments",
    "__bool__": "the truth value of a tensor",
    "__int__": "converting a tensor to int",
    "__float__": "converting a tensor to float",
    "data_ptr": "reading a tensor's data pointer",
    "backward": "calling .backward() inside a compiled region",
}


# Tensor methods whose results are trackers of modules built on this one: name -> (tx, tensor, kwargs) -> tracker.
METHODS_ELSEWHERE: Dict[str, Callable[..., VariableTracker]] = {}


class TensorVariable(VariableTracker):
    def __init__(self, node: torch.fx.Node, example: torch.Tensor, source=None,
                 python_cls: Optional[type] = None) -> None:
        super().__init__(source)
        self.node = node
        self.example = example
        node.meta.setdefault("example_value", example)  # for subgraphs that read this node (higher_order)
        # the class of the real tensor an input stands for (nn.Parameter, a subclass), which its
        # tensor guard checks; results of ops are plain tensors
        self.python_cls = python_cls

    def python_type(self) -> type:
        if self.python_cls is not None:
            return self.python_cls
        return type(self.example) if not hasattr(self.example, "fake_mode") else torch.Tensor

    def describe(self) -> str:
        return f"tensor {self.node.name}"

    def as_python_constant(self) -> Any:
        unimplemented("using a tensor's value as a Python constant")

    def truthy(self, tx) -> bool:
        unimplemented("a branch on a tensor's value (data-dependent control flow)")

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "shape":
            return self.size_variable(tx)
        if name == "is_leaf" and self.source is not None:  # not among what tensor guards check
            tx.output.add_guard(Guard(AttrSource(self.source, "is_leaf"), GuardKind.EQUALS_MATCH, self.example.is_leaf))
        if name in _CONSTANT_ATTRS:
            return ConstantVariable(getattr(self.example, name))
        if name in ("T", "mT", "H", "mH", "real", "imag", "grad_fn"):
            if name == "grad_fn":
                unimplemented("reading .grad_fn of a tensor")
            return tx.output.call_graph_op(tx, "call_function", getattr, [self, ConstantVariable(name)], {})
        if name == "grad" and self.source is not None and real_input(tx, self) is not None:
            # an input's gradient: backward and zero_grad break the graph, so it is the one read here
            return tx.wrap(real_input(tx, self).grad, AttrSource(self.source, "grad"))
        if name in ("grad", "data"):
            unimplemented(f"reading .{name} of a tensor")
        if inspect.getattr_static(torch.Tensor, name, None) is None:
            return self._own_attribute(tx, name)
        return BoundMethodCall(self, name)

    def _own_attribute(self, tx, name: str) -> VariableTracker:
        """An attribute set on the tensor object itself (`x.tag = ...`): assigned in this trace, or
        read from the real input."""
        pending = tx.output.side_effects.pending_attr(self._object_identity(tx), name)
        if pending is not None:
            return pending
        real = real_input(tx, self)
        if real is None or name not in getattr(real, "__dict__", {}):
            unimplemented(f"reading attribute '{name}' of a tensor")
        return tx.wrap(real.__dict__[name], AttrSource(self.source, name))

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        """`x.tag = value`: an attribute of the tensor object's own __dict__, assigned once the graph has
        run (the tensor's own fields, `requires_grad`, `data`..., are not plain attributes)."""
        if inspect.getattr_static(torch.Tensor, name, None) is not None or \
                self.python_type().__setattr__ is not object.__setattr__:
            unimplemented(f"assigning attribute '{name}' of a tensor")
        tx.output.side_effects.store_attr(self, self._object_identity(tx), name, value)

    def _object_identity(self, tx) -> Any:
        """What stands for the tensor object across the trace: the real input, or the value the graph
        makes (one fake tensor per value, whichever tracker holds it)."""
        real = real_input(tx, self) if self.source is not None else None
        return real if real is not None else self.example

    def has_attribute(self, tx, name: str) -> bool:
        """hasattr(tensor, name): the tensor class's attributes, else the real input's own ones."""
        if inspect.getattr_static(torch.Tensor, name, None) is not None:
            return True
        if tx.output.side_effects.pending_attr(self._object_identity(tx), name) is not None:
            return True
        if self.source is None:
            return False  # made by the graph: nothing else was set on it
        real = real_input(tx, self)
        if real is None:
            unimplemented(f"hasattr on a tensor not passed to the graph ({self.source.name()})")
        present = name in getattr(real, "__dict__", {})
        tx.output.add_guard(Guard(self.source, GuardKind.HASATTR, (name, present)))
        return present

    def size_variable(self, tx, dim: Optional[int] = None) -> VariableTracker:
        """`tensor.size(dim)`, or the whole size: constants where static, the graph input of a
        symbolic size of an input tensor, else a `size` call recorded in the graph."""
        if dim is None:
            if is_constant_value(tuple(self.example.size())):
                return ConstantVariable(self.example.size())
            return SizeVariable([self.size_variable(tx, d) for d in range(self.example.dim())])
        size = specialized_value(self.example.size(dim))
        if isinstance(size, int):
            return ConstantVariable(size)
        lifted = tx.output.size_input(size)
        if lifted is not None:
            return lifted
        return tx.output.call_graph_op(tx, "call_method", "size", [self, ConstantVariable(dim)], {})

    def has_unpack_var_sequence(self, tx) -> bool:
        return self.example.dim() > 0

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        if self.example.dim() == 0:
            unimplemented("iterating over a 0-d tensor")
        return [
            tx.output.call_graph_op(tx, "call_function", operator.getitem, [self, ConstantVariable(i)], {})
            for i in range(self.example.shape[0])
        ]

    def _stride_is_kernels_choice(self, args: list, kwargs: dict) -> bool:
        """Whether `stride()` asks about a dimension of size 0 or 1 of a tensor the graph computes:
        there the stride is each kernel's choice, and the fake tensor's may not be eager's."""
        if self.node.op in ("placeholder", "get_attr"):
            return False
        return any(self.example.size(d) <= 1 for d in _dims_asked(self.example, args, kwargs))

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name in METHODS_ELSEWHERE and not args:
            return METHODS_ELSEWHERE[name](tx, self, dict(kwargs))
        if name in _DATA_DEPENDENT:
            unimplemented(_DATA_DEPENDENT[name])
        if name in _CONSTANT_METHODS and all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            const_args = [a.as_python_constant() for a in args]
            const_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
            if name == "size":
                return self.size_variable(tx, *const_args, **const_kwargs)
            if name == "stride" and self._stride_is_kernels_choice(const_args, const_kwargs):
                unimplemented("the stride of a size-0 or size-1 dimension of a tensor the graph computes "
                              "(each kernel chooses it)")
            if name == "storage_offset":
                guard_storage_offsets(tx, self)
            value = getattr(self.example, name)(*const_args, **const_kwargs)
            if is_constant_value(value):
                return ConstantVariable(value)
            return tx.output.call_graph_op(tx, "call_method", name, [self, *args], kwargs)
        if name == "type" and not args and not kwargs:
            return ConstantVariable(self.example.type())
        if name in ("register_hook", "retain_grad"):
            unimplemented(f"tensor.{name}()")
        scaled = _scaled_by_tensor(tx, self, name, args, kwargs)
        if scaled is not None:
            return scaled
        result = tx.output.call_graph_op(tx, "call_method", name, [self, *args], kwargs)
        if isinstance(result, ConstantVariable) and result.value is not None and name not in _METADATA_METHODS:
            unimplemented(f"tensor.{name}() answers from state the tensor guards do not check")
        return result


# In-place methods taking a Python number that eager reads out of a one-element tensor with .item():
# name -> (the number's keyword, the op combining the two tensor arguments, or None for `other` alone).
_SCALED_IN_PLACE = {"addcdiv_": ("value", torch.div), "addcmul_": ("value", torch.mul), "add_": ("alpha", None),
                    "sub_": ("alpha", None)}


def _scaled_by_tensor(tx, tensor: TensorVariable, name: str, args: List[VariableTracker],
                      kwargs: Dict[str, VariableTracker]) -> Optional[VariableTracker]:
    """`p.addcdiv_(a, b, value=t)` with a tensor `t` (an optimizer's step size, a tensor while
    compiling) as `p.add_(t * (a / b))`: the same update with no data-dependent read of `t`."""
    keyword, combine = _SCALED_IN_PLACE.get(name, (None, None))
    scale = kwargs.get(keyword) if keyword else None
    if not isinstance(scale, TensorVariable) or len(kwargs) != 1 or len(args) != (2 if combine else 1):
        return None
    term = tx.output.call_graph_op(tx, "call_function", combine, args, {}) if combine else args[0]
    term = tx.output.call_graph_op(tx, "call_function", torch.mul, [term, scale], {})
    op = "sub_" if name == "sub_" else "add_"
    return tx.output.call_graph_op(tx, "call_method", op, [tensor, term], {})


def _dims_asked(example: torch.Tensor, args: list, kwargs: dict) -> List[int]:
    dim = args[0] if args else kwargs.get("dim")
    return list(range(example.dim())) if dim is None else [dim]


def real_input(tx, tensor: TensorVariable) -> Optional[torch.Tensor]:
    """The real tensor behind a graph input, or None."""
    return next((arg.example for arg in tx.output.graphargs if arg.node is tensor.node), None)


def guard_storage_offsets(tx, tensor: TensorVariable) -> None:
    """The trace reads a storage offset, which tensor guards do not check: an input's own, or, for a
    tensor made in the graph (a view of some input, perhaps), every input's."""
    if tensor.source is not None:
        inputs = [(tensor.source, tensor.example)]
    else:
        inputs = [(arg.source, arg.example) for arg in tx.output.graphargs if isinstance(arg.example, torch.Tensor)]
    for source, example in inputs:
        offset = specialized_value(example.storage_offset())
        if not isinstance(offset, int):
            unimplemented("reading a symbolic storage offset")
        tx.output.add_guard(Guard(CallSource(AttrSource(source, "storage_offset")), GuardKind.EQUALS_MATCH, offset))
