from .base import VariableTracker
from .builder import VariableBuilder, wrap_constant_result
from .builtin import BuiltinVariable
from .constant import ConstantVariable
from .dicts import ConstDictVariable
from .functions import BaseUserFunctionVariable, NestedUserFunctionVariable, UserFunctionVariable, UserMethodVariable
from .lists import (BaseListVariable, IteratorVariable, ListIteratorVariable, ListVariable, NamedTupleVariable,
                    SetVariable, TupleVariable)
from .misc import CellVariable, GradModeVariable, NullVariable, PythonModuleVariable, WithExitVariable
from .nn_module import NNModuleVariable
from .sym import SymNodeVariable
from .tensor import TensorVariable
from .torch import TorchVariable
from .user_defined import UserDefinedClassVariable, UserDefinedObjectVariable

__all__ = [
    "BaseListVariable",
    "BaseUserFunctionVariable",
    "BuiltinVariable",
    "CellVariable",
    "ConstDictVariable",
    "ConstantVariable",
    "GradModeVariable",
    "IteratorVariable",
    "ListIteratorVariable",
    "ListVariable",
    "NNModuleVariable",
    "NamedTupleVariable",
    "NestedUserFunctionVariable",
    "NullVariable",
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
    "wrap_constant_result",
]
