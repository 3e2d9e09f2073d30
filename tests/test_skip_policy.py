"""The skip policy: which code objects minidynamo converts and which it leaves alone, and why."""
import collections
import importlib.util
import json
import os
import posixpath
import site
import sys
import textwrap
import types

import torch

import minidynamo
from minidynamo import _C, eval_frame, skip_policy, verify
from minidynamo.skip_policy import frame_skip_reason, skip_reason

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.dirname(os.path.abspath(minidynamo.__file__))


def user_fn(x):
    return x + 1


def code_at(filename, name="f"):
    return compile(f"def {name}(): pass", filename, "exec").co_consts[0]


def test_user_code_is_converted():
    assert skip_reason(user_fn.__code__, user_fn.__globals__) is None
    # code typed or exec'd by the user, torch.fx's generated forward code, doctest examples, any other exec
    for filename in ("<string>", "<stdin>", "<ipython-input-3-0123>", "<eval_with_key>.7", "<doctest m.f[0]>",
                     "<generated>"):
        assert skip_reason(code_at(filename), {"__name__": "__main__"}) is None


def test_the_demo_is_user_code_without_a_special_case():
    spec = importlib.util.spec_from_file_location("demo_under_test", os.path.join(ROOT, "examples", "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # defines; main() runs only as a script
    assert skip_reason(demo.toy.__code__, vars(demo)) is None
    assert skip_reason(demo.Block.forward.__code__, vars(demo)) is None
    # a file inside the package is library code, whatever its name
    assert skip_reason(code_at(os.path.join(PACKAGE_DIR, "demo.py")), {"__name__": "minidynamo.demo"}) == "library code"


def test_minidynamo_itself_is_skipped():
    assert skip_reason(minidynamo.optimize.__code__, vars(eval_frame)) == "library code"
    assert skip_reason(skip_policy.skip_reason.__code__, vars(skip_policy)) == "library code"


def test_minidynamo_modules_running_under_a_callback_are_marked_in_c():
    """Context-manager exits and verify's wrappers run while a callback is set: marked once, in C."""
    assert _C.is_skipped(eval_frame._CallbackContext.__exit__.__code__)
    assert _C.is_skipped(verify.Verified.__call__.__code__)
    minidynamo.reset()
    assert _C.is_skipped(eval_frame._CallbackContext.__exit__.__code__)  # reset() keeps these marks


def test_torch_internals_are_skipped_but_module_forwards_are_converted():
    linear_globals = vars(sys.modules[torch.nn.Linear.__module__])
    assert skip_reason(torch.nn.functional.relu.__code__, vars(torch.nn.functional)) == "library code"
    assert skip_reason(torch.nn.Linear.forward.__code__, linear_globals) is None
    resumed = torch.nn.Linear.forward.__code__.replace(co_name="__resume_at_12_in_forward")
    assert skip_reason(resumed, linear_globals) is None
    assert skip_reason(torch.nn.Linear.reset_parameters.__code__, linear_globals) == "library code"
    # nn.Module's own machinery (__call__, hooks) is not a forward, even if named like one
    module_file_forward = torch.nn.Linear.forward.__code__.replace(co_filename=torch.nn.modules.module.__file__)
    assert skip_reason(module_file_forward, vars(torch.nn.modules.module)) == "library code"
    assert skip_reason(torch.nn.Module._call_impl.__code__, vars(torch.nn.modules.module)) == "library code"


def test_the_standard_library_is_skipped_but_packages_installed_beside_it_are_not():
    assert skip_reason(textwrap.dedent.__code__, vars(textwrap)) == "library code"
    assert skip_reason(json.dumps.__code__, vars(json)) == "library code"
    installed = os.path.join(site.getsitepackages()[0], "somepackage", "mod.py")
    assert skip_reason(code_at(installed), {"__name__": "somepackage.mod"}) is None


def test_listed_third_party_libraries_and_namedtuple_internals_are_skipped():
    installed = os.path.join(site.getsitepackages()[0], "numpy", "core", "mod.py")
    assert skip_reason(code_at(installed), {"__name__": "numpy.core.mod"}) == "a library that is not traced"
    assert skip_reason(user_fn.__code__, {"__name__": "sympy"}) == "a library that is not traced"
    point = collections.namedtuple("Point", "x y")
    assert skip_reason(point.__new__.__code__, point.__new__.__globals__) == "namedtuple internals"


def test_frozen_standard_library_modules_are_skipped():
    assert skip_reason(posixpath.join.__code__, vars(posixpath)) == "library code"  # <frozen posixpath>
    assert skip_reason(code_at("<frozen importlib._bootstrap>"), {"__name__": "importlib._bootstrap"}) == "library code"


def test_frames_with_no_tensors_in_reach_are_skipped():
    def frame(fn, args, f_globals=None):
        f_locals = dict(zip(fn.__code__.co_varnames, args))
        return types.SimpleNamespace(f_code=fn.__code__, f_locals=f_locals, f_globals=f_globals or fn.__globals__)

    assert frame_skip_reason(frame(user_fn, [1])) == "no tensors in reach"
    assert frame_skip_reason(frame(user_fn, [torch.ones(1)])) is None
    assert frame_skip_reason(frame(user_fn, [[torch.ones(1)]])) is None  # in a list argument
    uses_torch = compile("def f(x):\n    return torch.ones(x)", __file__, "exec").co_consts[0]
    fn = types.FunctionType(uses_torch, {"torch": torch})
    assert frame_skip_reason(frame(fn, [2])) is None  # names the torch module as a global
    assert frame_skip_reason(frame(json.dumps, [1])) == "library code"


def test_user_code_for_verify_mode():
    assert skip_policy.is_user_function(user_fn)
    assert not skip_policy.is_user_function(json.dumps)
    assert skip_policy.is_user_module(__name__) and skip_policy.is_user_module("not_imported_anywhere")
    assert not skip_policy.is_user_module("json") and not skip_policy.is_user_module("torch.nn.functional")


def test_the_hook_leaves_skipped_code_alone():
    """End to end: library code and tensor-free frames run under a callback get the C skip mark
    (until reset); user code with tensors is compiled."""

    def no_tensors(n):
        return n * 2

    compiled_dedent = minidynamo.optimize("eager")(textwrap.dedent)
    assert compiled_dedent("  a") == "a"
    assert _C.is_skipped(textwrap.dedent.__code__)
    assert minidynamo.optimize("eager")(no_tensors)(3) == 6 and _C.is_skipped(no_tensors.__code__)
    assert minidynamo.optimize("eager")(user_fn)(torch.ones(2)).tolist() == [2.0, 2.0]
    assert not _C.is_skipped(user_fn.__code__) and len(_C.get_cache_entries(user_fn.__code__)) == 1
    minidynamo.reset()
    assert not _C.is_skipped(textwrap.dedent.__code__) and not _C.is_skipped(no_tensors.__code__)
