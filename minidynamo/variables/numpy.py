"""NumPy in a compiled frame: arrays traced as tensors, their functions as graph ops through torch's
NumPy layer (torch._numpy), results turned back into ndarrays where the frame hands them out."""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch
import torch._numpy as tnp
from torch.utils._pytree import tree_map

from ..exc import unimplemented
from ..source import ChainedSource
from .base import KnownObjectVariable, VariableTracker
from .constant import ConstantVariable
from .lists import BaseListVariable, TupleVariable
from .tensor import METHODS_ELSEWHERE, TensorVariable

# NumPy's namespaces and torch._numpy's counterparts. numpy.random is not here: torch's generator
# would draw other numbers than NumPy's.
_TORCH_NUMPY = {"numpy": tnp, "numpy.linalg": tnp.linalg, "numpy.fft": tnp.fft}
# Called on constants while tracing: answers that are facts of the types named.
_INFO_FUNCTIONS = (np.finfo, np.iinfo)


def is_numpy_callable(value: Any) -> bool:
    """A function or ufunc of NumPy's namespaces, or finfo/iinfo (its scalar types make scalars: not here)."""
    module = getattr(value, "__module__", None)
    if any(value is info for info in _INFO_FUNCTIONS):
        return True
    return callable(value) and not isinstance(value, type) and isinstance(module, str) and module.split(".")[0] == "numpy"


def is_traceable_ndarray(value: Any) -> bool:
    """A plain ndarray a tensor can view: not a subclass (np.matrix's `*`, a masked array's sum, a
    recarray's fields, a memmap's file all differ from the tensor's), a numeric dtype, no negative strides."""
    return (type(value) is np.ndarray and value.dtype.kind in "biufc" and value.dtype.isnative
            and all(stride >= 0 for stride in value.strides))


def _to_torch_numpy(value: Any) -> Any:
    return tnp.ndarray(value) if isinstance(value, torch.Tensor) else value


def _to_tensor(value: Any) -> Any:
    return value.tensor if isinstance(value, tnp.ndarray) else value


@functools.lru_cache(maxsize=None)
def on_tensors(fn: Callable) -> Callable:
    """The graph op for torch._numpy's `fn`: takes and gives tensors where `fn` takes and gives arrays."""

    def numpy_op(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = tree_map(_to_torch_numpy, (args, kwargs))
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # NumPy's: integer arrays divide to float64, as in eager
        try:
            return tree_map(_to_tensor, fn(*args, **kwargs))
        finally:
            torch.set_default_dtype(previous)

    numpy_op.__name__ = numpy_op.__qualname__ = f"numpy_{getattr(fn, '__name__', 'op')}"
    return numpy_op


@functools.lru_cache(maxsize=None)
def ndarray_method(name: str) -> Callable:
    """`array.name(*args, **kwargs)` as a function of the array."""

    def method(array: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(array, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name.strip("_")
    return method


@dataclass(frozen=True)
class NumpyTensorSource(ChainedSource):
    """The tensor viewing the memory of the ndarray at `base`: what the graph takes for it."""

    def expression(self) -> str:
        return f"torch.as_tensor({self.base.name()})"

    def reconstruct(self, codegen: Any) -> None:
        codegen.load_function(torch.as_tensor)
        codegen.load_source(self.base)
        codegen.call(1)


class NumpyNdarrayVariable(VariableTracker):
    """An ndarray, traced as the tensor sharing its memory; handed out as that tensor's `.numpy()`."""

    def __init__(self, tensor: TensorVariable, source=None, scalar: bool = False) -> None:
        super().__init__(source)
        self.tensor = tensor
        self.scalar = scalar  # a 0-d result NumPy hands out as a scalar (np.sum(a) is an np.float32)

    def python_type(self) -> type:
        return np.dtype(str(self.tensor.example.dtype).split(".")[-1]).type if self.scalar else np.ndarray

    def describe(self) -> str:
        return f"ndarray of {self.tensor.describe()}"

    def subvalues(self) -> List[VariableTracker]:
        return [self.tensor]

    def reconstruct(self, codegen: Any) -> None:
        if self.source is not None:  # the argument itself
            self.source.reconstruct(codegen)
            return
        codegen.load_function(_numpy_scalar if self.scalar else torch.Tensor.numpy)
        codegen.reconstruct(self.tensor)
        codegen.call(1)

    def truthy(self, tx) -> bool:
        unimplemented("a branch on an ndarray's value (data-dependent control flow)")

    def var_getattr(self, tx, name: str) -> VariableTracker:
        example = self.tensor.example
        if name in ("shape", "ndim", "size", "itemsize", "nbytes"):
            value = getattr(tnp.ndarray(example), name)
            if not all(type(v) is int for v in (value if isinstance(value, tuple) else (value,))):
                unimplemented(f"ndarray.{name} of a symbolic size")
            return ConstantVariable(value)
        if name in ("T", "real", "imag"):
            return numpy_call(tx, ndarray_attribute(name), [self], {})
        return NumpyMethodVariable(self, name)

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name in ("tolist", "item", "tobytes", "__bool__", "__int__", "__float__", "__index__"):
            unimplemented(f"ndarray.{name}() reads the array's values")
        return numpy_call(tx, ndarray_method(name), [self, *args], kwargs)

    def has_unpack_var_sequence(self, tx) -> bool:
        return self.tensor.example.dim() > 0

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return [numpy_call(tx, ndarray_method("__getitem__"), [self, ConstantVariable(i)], {})
                for i in range(self.tensor.example.shape[0])]


@functools.lru_cache(maxsize=None)
def ndarray_attribute(name: str) -> Callable:
    def attribute(array: Any) -> Any:
        return getattr(array, name)

    attribute.__name__ = attribute.__qualname__ = name
    return attribute


class NumpyMethodVariable(VariableTracker):
    """`array.name`, looked up to be called."""

    def __init__(self, array: NumpyNdarrayVariable, name: str) -> None:
        super().__init__(None)
        self.array = array
        self.name = name

    def describe(self) -> str:
        return f"method ndarray.{self.name}"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        return self.array.call_method(tx, self.name, args, kwargs)


class NumpyInfoVariable(VariableTracker):
    """`np.finfo(...)` / `np.iinfo(...)` of a constant type: its fields are constants."""

    def __init__(self, value: Any) -> None:
        super().__init__(None)
        self.value = value

    def describe(self) -> str:
        return repr(self.value)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        value = getattr(self.value, name)
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, np.dtype):
            value = value.name
        if not isinstance(value, (bool, int, float, str)):
            unimplemented(f"reading {type(self.value).__name__}.{name}")
        return ConstantVariable(value)


class NumpyFunctionVariable(KnownObjectVariable):
    """A NumPy function or ufunc: called as torch._numpy's function of that name."""

    def describe(self) -> str:
        return f"numpy.{getattr(self.value, '__name__', self.value)}"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if self.value in _INFO_FUNCTIONS:
            constants = [a.as_python_constant() for a in args]
            return NumpyInfoVariable(self.value(*constants, **{k: v.as_python_constant() for k, v in kwargs.items()}))
        namespace = _TORCH_NUMPY.get(getattr(self.value, "__module__", ""))
        fn = getattr(namespace, getattr(self.value, "__name__", ""), None) if namespace is not None else None
        if fn is None:
            unimplemented(f"{self.describe()}(), which torch's NumPy layer does not have")
        return numpy_call(tx, fn, args, kwargs, numpy_fn=self.value)


def _graph_argument(value: VariableTracker) -> Any:
    """What an argument of a NumPy call is in the graph op: an array's tensor, a constant (NumPy
    dtypes by name), containers of those."""
    if isinstance(value, NumpyNdarrayVariable):
        return value.tensor
    if isinstance(value, TensorVariable):
        unimplemented("a tensor passed to a NumPy function")
    if isinstance(value, BaseListVariable):
        return type(value)([_graph_argument(v) for v in value.items])
    constant = value.as_python_constant()
    if isinstance(constant, type) and issubclass(constant, np.generic) or isinstance(constant, np.dtype):
        return ConstantVariable(np.dtype(constant).name)
    return value


# NumPy returns 0-d results as scalars, except from these, which make or reshape arrays: the rule
# where asking NumPy itself (`_numpy_result`) is too costly or fails
_ARRAY_RESULTS = frozenset({
    "array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray", "copy", "reshape", "view", "squeeze",
    "astype", "expand_dims", "transpose", "swapaxes", "moveaxis", "broadcast_to", "atleast_1d", "atleast_2d",
    "atleast_3d", "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like"})
# Arrays up to this many elements stand in for the traced ones when NumPy is asked what it returns
_STAND_IN_ELEMENTS = 1 << 16


class _NoStandIn(Exception):
    pass


def _numpy_scalar(tensor: torch.Tensor) -> Any:
    """A 0-d result as NumPy hands it out: a NumPy scalar."""
    return tensor.numpy()[()]


def _numpy_dtype(tensor: torch.Tensor) -> np.dtype:
    return np.dtype(str(tensor.dtype).split(".")[-1])


def _stand_in(value: VariableTracker) -> Any:
    """A small real value like `value` (an array of its shape and dtype, filled with ones) for NumPy to run on."""
    if isinstance(value, NumpyNdarrayVariable):
        example = value.tensor.example
        shape = tuple(example.shape)
        if not all(type(size) is int for size in shape) or example.numel() > _STAND_IN_ELEMENTS:
            raise _NoStandIn()
        array = np.ones(shape, _numpy_dtype(example))
        return array[()] if value.scalar else array
    if isinstance(value, BaseListVariable):
        return value.python_type()(_stand_in(v) for v in value.items)
    if not value.is_python_constant():
        raise _NoStandIn()
    return value.as_python_constant()


def _numpy_result(numpy_fn: Callable, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> Any:
    """What NumPy's own `numpy_fn` returns on stand-ins of the arguments, or _NoStandIn when it cannot be asked."""
    try:
        stand_ins = [_stand_in(a) for a in args], {k: _stand_in(v) for k, v in kwargs.items()}
    except (_NoStandIn, NotImplementedError):
        return _NoStandIn
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return numpy_fn(*stand_ins[0], **stand_ins[1])
    except Exception:  # an error of the stand-in values (a singular matrix): NumPy's types stay unknown
        return _NoStandIn


def _as_numpy_returns(value: VariableTracker, numpy_value: Any) -> VariableTracker:
    """The traced result `value` as NumPy's result `numpy_value` is: arrays or NumPy scalars, of its dtypes."""
    if isinstance(value, TensorVariable):
        if type(numpy_value) is not np.ndarray and not isinstance(numpy_value, np.generic):
            unimplemented(f"a NumPy call that returns {type(numpy_value).__name__}, not an array")
        if np.dtype(numpy_value.dtype) != _numpy_dtype(value.example):
            unimplemented(f"a NumPy call torch's NumPy layer computes in {_numpy_dtype(value.example)} "
                          f"where NumPy gives {numpy_value.dtype}")
        return NumpyNdarrayVariable(value, scalar=isinstance(numpy_value, np.generic))
    if isinstance(value, TupleVariable):
        if not isinstance(numpy_value, (tuple, list)) or len(numpy_value) != len(value.items):
            unimplemented(f"a NumPy call that returns {type(numpy_value).__name__}")
        return TupleVariable([_as_numpy_returns(v, n) for v, n in zip(value.items, numpy_value)])
    return value


def numpy_call(tx, fn: Callable, args: List[VariableTracker], kwargs: Dict[str, VariableTracker],
               numpy_fn: Optional[Callable] = None) -> VariableTracker:
    """`fn` (torch._numpy's) called on the arrays' tensors, one graph op; tensors in the result are
    arrays or NumPy scalars of the dtypes NumPy's own `numpy_fn` (`fn` where it takes NumPy's arrays
    too) gives."""
    graph_args = [_graph_argument(a) for a in args]
    graph_kwargs = {k: _graph_argument(v) for k, v in kwargs.items()}
    result = tx.output.call_graph_op(tx, "call_function", on_tensors(fn), graph_args, graph_kwargs)
    first = args[0] if args else None
    numpy_value = _numpy_result(numpy_fn or fn, args, kwargs)
    if isinstance(first, NumpyNdarrayVariable) and result is first.tensor and not first.scalar:
        return first  # in place: the same array
    if numpy_value is not _NoStandIn:
        return _as_numpy_returns(result, numpy_value)
    return as_arrays(result, getattr(fn, "__name__", "").strip("_") not in _ARRAY_RESULTS)


def as_arrays(value: VariableTracker, scalars: bool = False) -> VariableTracker:
    if isinstance(value, TensorVariable):
        return NumpyNdarrayVariable(value, scalar=scalars and value.example.dim() == 0)
    if isinstance(value, TupleVariable):
        return TupleVariable([as_arrays(v, scalars) for v in value.items])
    return value


def tensor_as_ndarray(tx, tensor: TensorVariable, kwargs: Dict[str, VariableTracker]) -> VariableTracker:
    """`tensor.numpy()`: the array sharing the tensor's memory."""
    force = kwargs.pop("force", ConstantVariable(False)).as_python_constant()
    if kwargs or (not force and (tensor.example.requires_grad or tensor.example.device.type != "cpu")):
        unimplemented("tensor.numpy() that eager refuses (gradients, another device) or with other arguments")
    if force:
        tensor = tx.output.call_graph_op(tx, "call_method", "detach", [tensor], {})
    return NumpyNdarrayVariable(tensor)


def ndarray_as_tensor(tx, fn: Any, array: NumpyNdarrayVariable) -> Optional[VariableTracker]:
    """`torch.from_numpy(a)` / `torch.as_tensor(a)` (a new tensor on the array's memory) or
    `torch.tensor(a)` (a copy); None for other functions."""
    if fn in (torch.from_numpy, torch.as_tensor):
        return tx.output.call_graph_op(tx, "call_method", "view_as", [array.tensor, array.tensor], {})
    if fn is torch.tensor:
        return tx.output.call_graph_op(tx, "call_method", "clone", [array.tensor], {})
    return None


METHODS_ELSEWHERE["numpy"] = tensor_as_ndarray
