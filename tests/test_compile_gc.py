"""The collector during a compile: objects older than the compile are frozen (a full collection
does not walk the whole heap), everything is given back after, also when the compile fails, and a
program's own gc.freeze() or gc.disable() is left alone."""
import gc

import pytest
import torch

import minidynamo
from minidynamo.exc import BackendCompilerFailed


def _fn(x):
    return x.sin() + 1


def _compile_seeing_freeze_count(fail: bool = False) -> list:
    seen = []

    def backend(gm, example_inputs):
        seen.append(gc.get_freeze_count())
        if fail:
            raise RuntimeError("backend failed")
        return gm.forward

    minidynamo.optimize(backend)(_fn)(torch.ones(3))
    return seen


def test_objects_before_the_compile_are_frozen_while_it_runs_and_given_back_after():
    held = [object()]
    assert gc.get_freeze_count() == 0
    seen = _compile_seeing_freeze_count()
    assert seen and seen[0] > 0
    assert gc.get_freeze_count() == 0
    assert any(o is held for o in gc.get_objects())


def test_a_failing_compile_gives_the_frozen_objects_back():
    with pytest.raises(BackendCompilerFailed):
        _compile_seeing_freeze_count(fail=True)
    assert gc.get_freeze_count() == 0


def _is_frozen(obj) -> bool:
    return not any(o is obj for o in gc.get_objects())


def test_a_programs_own_freeze_is_left_alone():
    # Counts drift as frozen objects die, so the test follows objects, not counts: one frozen by
    # the program stays frozen, and one made after the program's freeze is not frozen by the compile.
    frozen_by_program = [object()]
    gc.freeze()
    try:
        made_after = [object()]
        seen = []

        def backend(gm, example_inputs):
            seen.append((_is_frozen(frozen_by_program), _is_frozen(made_after)))
            return gm.forward

        minidynamo.optimize(backend)(_fn)(torch.ones(3))
        assert seen == [(True, False)]
        assert _is_frozen(frozen_by_program) and not _is_frozen(made_after)
    finally:
        gc.unfreeze()


def test_a_disabled_collector_is_left_alone():
    gc.disable()
    try:
        assert _compile_seeing_freeze_count() == [0]
        assert not gc.isenabled()
    finally:
        gc.enable()
