"""Translator: guards (what explain() reports) and recompiles on changed inputs: shape, dtype,
requires_grad, global values, object and module attributes; same inputs hit the cache.  Also the
opcode-coverage check for minidynamo's translator."""
import dis
import sys

import torch
from torch import nn

from translator_harness import (  # noqa: F401
    MODULE_GUARD_KINDS,
    OBJECT_GUARD_KINDS,
    REFERENCE,
    CompileCounter,
    assert_equal,
    assert_guard,
    assert_same,
    explain,
    fresh_dynamo,
    guard_kinds,
    minidynamo_only,
    optimize,
    rand,
)

SCALE = 2.0
LIMIT = 3


def g_helper(t):
    return t * 3


class Cfg:
    def __init__(self, k):
        self.k = k


GLOBAL_CFG = Cfg(4)


# ---------------------------------------------------------------------------------------------
# recompiles on changed inputs
# ---------------------------------------------------------------------------------------------
def simple(x, y):
    return (x * y).sum(0) + 1


def compile_and_track(fn):
    cnt = CompileCounter()
    cf = optimize(cnt, nopython=True)(fn)

    def call(*args):
        assert_equal(cf(*args), fn(*args))
        return cnt.frame_count

    return call


def test_same_inputs_hit_cache():
    call = compile_and_track(simple)
    x, y = rand(3, 2), rand(3, 2)
    assert call(x, y) == 1
    for _ in range(5):
        assert call(x, y) == 1
    assert call(rand(3, 2), rand(3, 2)) == 1  # new values, same metadata


def test_shape_change_recompiles():
    call = compile_and_track(simple)
    assert call(rand(3, 2), rand(3, 2)) == 1
    assert call(rand(4, 2), rand(4, 2)) == 2
    assert call(rand(3, 2), rand(3, 2)) == 2  # back to the first shape: cached
    assert call(rand(4, 2), rand(4, 2)) == 2


def test_rank_change_recompiles():
    call = compile_and_track(simple)
    assert call(rand(3), rand(3)) == 1
    assert call(rand(3, 2), rand(3, 2)) == 2


def test_dtype_change_recompiles():
    call = compile_and_track(simple)
    assert call(rand(3), rand(3)) == 1
    assert call(rand(3, dtype=torch.float64), rand(3, dtype=torch.float64)) == 2
    assert call(rand(3, dtype=torch.int64), rand(3, dtype=torch.int64)) == 3
    assert call(rand(3), rand(3)) == 3


def test_requires_grad_change_recompiles():
    call = compile_and_track(simple)
    assert call(rand(3), rand(3)) == 1
    assert call(rand(3, requires_grad=True), rand(3)) == 2
    assert call(rand(3), rand(3)) == 2


def test_int_argument_change_recompiles():
    def f(x, n):
        for _ in range(n):
            x = x * 2
        return x

    call = compile_and_track(f)
    assert call(rand(2), 2) == 1
    assert call(rand(2), 2) == 1
    assert call(rand(2), 3) == 2


def test_float_argument_change_recompiles():
    def f(x, s):
        return x * s

    call = compile_and_track(f)
    assert call(rand(2), 0.5) == 1
    assert call(rand(2), 1.5) == 2


def test_argument_type_change_recompiles():
    def f(x, s):
        return x * s

    call = compile_and_track(f)
    assert call(rand(2), 2) == 1
    assert call(rand(2), 2.0) == 2  # int 2 and float 2.0 compare equal but are different constants
    assert call(rand(2), rand(2)) == 3


def scaled_global(x):
    return x * SCALE


def test_global_value_change_recompiles(monkeypatch):
    call = compile_and_track(scaled_global)
    assert call(rand(2)) == 1
    monkeypatch.setattr(__import__(__name__), "SCALE", 3.0)
    assert call(rand(2)) == 2
    monkeypatch.setattr(__import__(__name__), "SCALE", 2.0)
    assert call(rand(2)) == 2


def uses_global_cfg(x):
    return x + GLOBAL_CFG.k


def test_global_object_attr_change_recompiles():
    call = compile_and_track(uses_global_cfg)
    old = GLOBAL_CFG.k
    try:
        assert call(rand(2)) == 1
        GLOBAL_CFG.k = 10
        assert call(rand(2)) == 2
    finally:
        GLOBAL_CFG.k = old


def calls_global_helper(x):
    return g_helper(x) + 1


def test_global_function_replaced_recompiles(monkeypatch):
    call = compile_and_track(calls_global_helper)
    assert call(rand(2)) == 1
    monkeypatch.setattr(__import__(__name__), "g_helper", lambda t: t - 100)
    assert call(rand(2)) == 2


def test_list_length_change_recompiles():
    def f(xs):
        return sum(t * i for i, t in enumerate(xs))

    call = compile_and_track(f)
    assert call([rand(2), rand(2)]) == 1
    assert call([rand(2), rand(2)]) == 1
    assert call([rand(2), rand(2), rand(2)]) == 2


def test_dict_keys_change_recompiles():
    def f(d):
        out = 0
        for k, v in d.items():
            out = out + v * len(k)
        return out

    call = compile_and_track(f)
    assert call({"a": rand(2), "bb": rand(2)}) == 1
    assert call({"a": rand(2), "bb": rand(2)}) == 1
    assert call({"a": rand(2), "ccc": rand(2)}) == 2


def test_module_attribute_change_recompiles():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.depth = 1

        def forward(self, x):
            for _ in range(self.depth):
                x = self.lin(x)
            return x

    m = M()

    def f(x):
        return m(x)

    call = compile_and_track(f)
    assert call(rand(2, 3)) == 1
    m.depth = 2
    assert call(rand(2, 3)) == 2
    assert call(rand(2, 3)) == 2


def test_swapped_module_recompiles_or_matches():
    m1, m2 = nn.Linear(3, 2), nn.Linear(3, 2)

    def f(m, x):
        return m(x).relu()

    call = compile_and_track(f)
    assert call(m1, rand(2, 3)) == 1
    n = call(m2, rand(2, 3))  # a different module: recompiled, or the same graph with other params
    assert n in (1, 2)
    assert call(m1, rand(2, 3)) == n


def test_aliased_inputs_stay_correct():
    def f(x, y):
        x.add_(1)
        return y * 2

    cf = optimize(CompileCounter(), nopython=True)(f)
    a = rand(3)
    b = rand(3)
    assert_equal(cf(a.clone(), b), f(a.clone(), b))
    a1, a2 = a.clone(), a.clone()
    assert_equal(cf(a1, a1), f(a2, a2))  # the same tensor passed twice
    assert_equal(a1, a2)


# ---------------------------------------------------------------------------------------------
# what explain() reports
# ---------------------------------------------------------------------------------------------
def guarded(x, xs, d, n, cfg, mode):
    if n > 1:
        x = x + 1
    y = g_helper(x) * SCALE + cfg.k
    for t in xs:
        y = y + t
    for k in d:
        y = y + d[k]
    if mode == "neg":
        y = -y
    return torch.relu(y)


def _guarded_args():
    return rand(2), [rand(2), rand(2)], {"a": rand(2)}, 3, Cfg(2), "neg"


def test_explain_fields():
    out = explain(guarded, *_guarded_args())
    assert out.graph_count == 1
    assert out.graph_break_count == 0
    assert len(out.graphs) == 1 and isinstance(out.graphs[0], torch.fx.GraphModule)
    assert out.break_reasons == []
    assert out.op_count >= 4
    assert len(out.ops_per_graph) == 1 and len(out.ops_per_graph[0]) == out.op_count


def test_guard_tensor_match_for_each_tensor_argument():
    guards = guard_kinds(explain(guarded, *_guarded_args()))
    assert_guard(guards, "x", "TENSOR_MATCH")
    assert_guard(guards, "xs", "TENSOR_MATCH")  # the list's elements
    assert_guard(guards, "d", "TENSOR_MATCH")  # the dict's value


def test_guard_equals_match_for_int_and_str_arguments():
    guards = guard_kinds(explain(guarded, *_guarded_args()))
    assert_guard(guards, "n", "EQUALS_MATCH")
    assert_guard(guards, "mode", "EQUALS_MATCH")


def test_guard_equals_match_for_global_scalar():
    guards = guard_kinds(explain(guarded, *_guarded_args()))
    assert_guard(guards, "SCALE", "EQUALS_MATCH")


def test_guard_container_lengths_and_keys():
    guards = guard_kinds(explain(guarded, *_guarded_args()))
    assert_guard(guards, "xs", "LIST_LENGTH")
    assert_guard(guards, "d", "DICT_KEYS")


def test_guard_objects_and_functions():
    guards = guard_kinds(explain(guarded, *_guarded_args()))
    assert_guard(guards, "cfg", OBJECT_GUARD_KINDS)
    assert_guard(guards, "k", "EQUALS_MATCH")  # cfg.k
    assert_guard(guards, "g_helper", "ID_MATCH")


def test_guard_global_object():
    guards = guard_kinds(explain(uses_global_cfg, rand(2)))
    assert_guard(guards, "GLOBAL_CFG", OBJECT_GUARD_KINDS)
    assert_guard(guards, "k", "EQUALS_MATCH")


def test_guard_module():
    mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU())

    def f(m, x):
        return m(x)

    guards = guard_kinds(explain(f, mlp, rand(2, 3)))
    assert_guard(guards, "m", MODULE_GUARD_KINDS)
    assert_guard(guards, "x", "TENSOR_MATCH")


def test_guard_bool_flag():
    def f(x, flag):
        return x + 1 if flag else x - 1

    guards = guard_kinds(explain(f, rand(2), True))
    assert_guard(guards, "flag", "EQUALS_MATCH")
    assert_guard(guards, "x", "TENSOR_MATCH")


def test_guard_none_argument():
    def f(x, bias=None):
        return x * 2 if bias is None else x * 2 + bias

    guards = guard_kinds(explain(f, rand(2), None))
    assert_guard(guards, "bias", {"EQUALS_MATCH", "ID_MATCH", "TYPE_MATCH"})


def test_explain_does_not_leave_state():
    x = rand(2)
    explain(guarded, *_guarded_args())
    cnt = CompileCounter()
    cf = optimize(cnt, nopython=True)(simple)
    assert_equal(cf(x, x), simple(x, x))
    assert cnt.frame_count == 1


# ---------------------------------------------------------------------------------------------
# opcode coverage of minidynamo's translator
# ---------------------------------------------------------------------------------------------
REQUIRED_OPCODES = [
    "NOP", "RESUME", "CACHE", "POP_TOP", "PUSH_NULL", "COPY", "SWAP",
    "LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_CONST", "LOAD_GLOBAL", "STORE_GLOBAL",
    "LOAD_NAME", "LOAD_DEREF", "STORE_DEREF", "LOAD_CLOSURE", "MAKE_CELL", "COPY_FREE_VARS",
    "LOAD_ATTR", "STORE_ATTR", "LOAD_METHOD",
    "BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP",
    "UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT", "UNARY_NOT",
    "BINARY_SUBSCR", "STORE_SUBSCR", "DELETE_SUBSCR",
    "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_SET", "BUILD_CONST_KEY_MAP", "BUILD_SLICE", "BUILD_STRING",
    "LIST_APPEND", "LIST_EXTEND", "LIST_TO_TUPLE", "SET_ADD", "SET_UPDATE", "MAP_ADD", "DICT_UPDATE", "DICT_MERGE",
    "UNPACK_SEQUENCE", "UNPACK_EX",
    "PRECALL", "CALL", "KW_NAMES", "CALL_FUNCTION_EX", "MAKE_FUNCTION",
    "RETURN_VALUE",
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP",
    "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE",
    "GET_ITER", "FOR_ITER",
    "FORMAT_VALUE",
    "BEFORE_WITH",
    "LOAD_ASSERTION_ERROR", "RAISE_VARARGS",
]
# What later versions drop from 3.11's list (LOAD_CLOSURE and LOAD_METHOD stay as pseudo-instructions,
# assembled as others), and what they add.
_CHANGED_BY_VERSION = {
    (3, 13): ({"PRECALL", "KW_NAMES", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP", "FORMAT_VALUE", "LIST_TO_TUPLE",
               "UNARY_POSITIVE", "LOAD_CLOSURE", "LOAD_METHOD",
               *(f"POP_JUMP_{way}_IF_{cond}" for way in ("FORWARD", "BACKWARD") for cond in ("TRUE", "FALSE", "NONE",
                                                                                         "NOT_NONE"))},
              ["CALL_KW", "CALL_INTRINSIC_1", "SET_FUNCTION_ATTRIBUTE", "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST",
               "STORE_FAST_STORE_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_SUPER_ATTR", "BINARY_SLICE",
               "STORE_SLICE", "RETURN_CONST", "END_FOR", "TO_BOOL", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE",
               "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE"]),
    (3, 14): ({"BEFORE_WITH", "BINARY_SUBSCR", "RETURN_CONST", "LOAD_ASSERTION_ERROR", "BUILD_CONST_KEY_MAP"},
              ["LOAD_SPECIAL", "LOAD_FAST_BORROW", "LOAD_FAST_BORROW_LOAD_FAST_BORROW", "LOAD_SMALL_INT",
               "LOAD_COMMON_CONSTANT", "POP_ITER", "NOT_TAKEN"]),
}
for _version, (_gone, _new) in sorted(_CHANGED_BY_VERSION.items()):
    if sys.version_info[:2] >= _version:
        REQUIRED_OPCODES = [op for op in REQUIRED_OPCODES if op not in _gone] + _new


def test_required_opcodes_are_real_opcodes_here():
    missing = [op for op in REQUIRED_OPCODES if op not in dis.opmap]
    assert not missing, f"not CPython opcodes here: {missing}"


@minidynamo_only
def test_every_required_opcode_has_a_handler():
    from minidynamo.symbolic_convert import InstructionTranslatorBase

    # CACHE entries are skipped by the reader rather than handled
    missing = [op for op in REQUIRED_OPCODES if op != "CACHE" and not hasattr(InstructionTranslatorBase, op)]
    assert not missing, f"opcodes without a handler: {missing}"


def test_suite_functions_use_required_opcodes_only():
    """Every opcode in the functions of the translator suite is in REQUIRED_OPCODES (or belongs to the
    test scaffolding: exception handling, class bodies), so the handler test covers what the suite
    exercises."""
    import importlib
    import pathlib

    scaffolding = {"EXTENDED_ARG", "PUSH_EXC_INFO", "POP_EXCEPT", "RERAISE", "CHECK_EXC_MATCH",
                   "WITH_EXCEPT_START", "LOAD_BUILD_CLASS", "STORE_NAME", "IMPORT_NAME", "IMPORT_FROM",
                   "RETURN_GENERATOR", "YIELD_VALUE", "SETUP_ANNOTATIONS", "LOAD_CLASSDEREF", "DELETE_DEREF",
                   "LOAD_LOCALS", "LOAD_FROM_DICT_OR_GLOBALS"}  # 3.14's annotation scopes of class bodies
    seen = {}

    def walk(code, where):
        for ins in dis.get_instructions(code):
            seen.setdefault(ins.opname, where)
        for c in code.co_consts:
            if hasattr(c, "co_code"):
                walk(c, where)

    for path in sorted(pathlib.Path(__file__).parent.glob("test_translator_*.py")):
        mod = importlib.import_module(path.stem)
        for name, obj in vars(mod).items():
            code = getattr(obj, "__code__", None)
            if code is not None and getattr(obj, "__module__", None) == mod.__name__:
                walk(code, f"{path.stem}.{name}")
            if isinstance(obj, type) and obj.__module__ == mod.__name__:
                for attr in vars(obj).values():
                    fn = getattr(attr, "__func__", attr)
                    fn = getattr(fn, "fget", fn)
                    if hasattr(fn, "__code__"):
                        walk(fn.__code__, f"{path.stem}.{name}")
    unknown = {op: where for op, where in seen.items() if op not in REQUIRED_OPCODES and op not in scaffolding}
    assert not unknown, f"opcodes used by the suite but not in REQUIRED_OPCODES: {unknown}"
    assert len(seen) >= 60  # the suite really exercises a broad set
