"""The translator's symbolic values. Each module imports only modules listed above it here; a
tracker that needs something higher (wrapping a new real value, calling a builtin) asks the
translator it is handed (`tx.wrap`, `tx.wrap_constant`, `tx.call_operator`)."""
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import BaseListVariable, IteratorVariable, ListIteratorVariable, ListVariable, SetVariable, TupleVariable
from .deques import DequeVariable
from .dicts import ConstDictVariable
from .misc import BoundMethodCall, CellVariable, GradModeVariable, NullVariable, PythonModuleVariable, WithExitVariable
from .functions import BaseUserFunctionVariable, NestedUserFunctionVariable, UserFunctionVariable, UserMethodVariable
from .named_tuple import NamedTupleVariable
from .sym import SymNodeVariable
from .user_defined import UserDefinedClassVariable, UserDefinedObjectVariable
from .exceptions import ExceptionVariable
from .optimizer import OptimizerVariable
from .nn_module import NNModuleVariable, is_new_each_call
from .tensor import TensorVariable
from .foreach import MULTI_TENSOR_HANDLERS
from .numpy import NumpyNdarrayVariable
from .torch import TorchVariable
from .autograd_function import AutogradFunctionClassVariable
from .higher_order import CheckpointVariable, FunctionTransformVariable
from .stdlib import STDLIB_FUNCTIONS
from .object_protocol import OBJECT_PROTOCOL
from .builtin import BuiltinVariable
from .builder import VariableBuilder, wrap_constant_result

__all__ = [
    "AutogradFunctionClassVariable",
    "BaseListVariable",
    "BaseUserFunctionVariable",
    "BoundMethodCall",
    "BuiltinVariable",
    "CellVariable",
    "CheckpointVariable",
    "ConstDictVariable",
    "ConstantVariable",
    "DequeVariable",
    "ExceptionVariable",
    "FunctionTransformVariable",
    "GradModeVariable",
    "IteratorVariable",
    "ListIteratorVariable",
    "ListVariable",
    "NNModuleVariable",
    "NamedTupleVariable",
    "NestedUserFunctionVariable",
    "MULTI_TENSOR_HANDLERS",
    "NumpyNdarrayVariable",
    "OptimizerVariable",
    "NullVariable",
    "OBJECT_PROTOCOL",
    "PythonModuleVariable",
    "SetVariable",
    "SymNodeVariable",
    "TensorVariable",
    "TorchVariable",
    "TupleVariable",
    "UserDefinedClassVariable",
    "UserDefinedObjectVariable",
    "UserFunctionVariable",
    "UserMethodVariable",
    "VariableBuilder",
    "VariableTracker",
    "WithExitVariable",
    "is_new_each_call",
    "wrap_constant_result",
]
