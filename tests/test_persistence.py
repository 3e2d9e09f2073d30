"""A compiled module can be deep-copied, pickled and torch.save'd: it comes back compiled the same way."""
import copy
import io
import pickle

import pytest
import torch

import minidynamo


def plain_backend(gm, example_inputs):
    return gm.forward


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3), torch.nn.Dropout(0.0))


def _saved_and_loaded(module):
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


ROUND_TRIPS = {
    "deepcopy": copy.deepcopy,
    "pickle": lambda m: pickle.loads(pickle.dumps(m)),
    "torch.save": _saved_and_loaded,
}


@pytest.fixture(autouse=True)
def _fresh():
    minidynamo.reset()
    yield
    minidynamo.reset()


@pytest.mark.parametrize("trip", list(ROUND_TRIPS))
@pytest.mark.parametrize("how", [dict(backend="eager"), dict(backend="cpp"), dict(backend=plain_backend),
                                 dict(backend="eager", mode="max-autotune"), dict(backend="eager", fullgraph=True)])
def test_round_trip_gives_an_independent_compiled_module(trip, how):
    original = _model()
    compiled = minidynamo.compile(original, **how)
    x = torch.randn(2, 4)
    compiled(x)
    copied = ROUND_TRIPS[trip](compiled)
    assert type(copied) is type(compiled)
    assert copied._orig_mod is not original
    assert copied.state_dict().keys() == original.state_dict().keys()
    assert torch.equal(copied(x), original(x))
    compiled_before = minidynamo.stats()["compiled"]
    copied(x)
    assert minidynamo.stats()["compiled"] == compiled_before  # the copy runs its compiled code: no new compile
    with torch.no_grad():
        copied._orig_mod[0].weight.add_(1.0)
    assert not torch.equal(copied._orig_mod[0].weight, original[0].weight)  # no shared parameters
    assert torch.equal(copied(x), copied._orig_mod(x))
    assert torch.equal(compiled(x), original(x))


def test_copy_keeps_training_flag_and_attributes():
    original = _model().eval()
    original.note = "kept"
    copied = copy.deepcopy(minidynamo.compile(original))
    assert copied.training is False and copied._orig_mod.training is False
    assert copied.note == "kept"


def test_copy_compiles_like_the_original():
    compiled = minidynamo.compile(_model())
    copied = copy.deepcopy(compiled)
    x = torch.randn(2, 4)
    before = minidynamo.stats()["compiled"]
    copied(x)
    assert minidynamo.stats()["compiled"] > before  # the copy is compiled, not a plain module


def test_ema_average_of_a_compiled_module():
    compiled = minidynamo.compile(_model())
    ema = torch.optim.swa_utils.AveragedModel(compiled, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(3):
            for p in compiled.parameters():
                p.add_(0.1)
            ema.update_parameters(compiled)
    expected = _model()
    with torch.no_grad():
        for p_exp, p_ema, p_now in zip(expected.parameters(), ema.module.parameters(), compiled.parameters()):
            start = p_exp.clone()
            avg = start + 0.1  # the first update copies
            for step in range(2, 4):
                avg = 0.9 * avg + 0.1 * (start + 0.1 * step)
            assert torch.allclose(p_ema, avg, atol=1e-6)
            assert not torch.equal(p_ema, p_now)
    assert isinstance(ema.module, type(compiled))
    assert torch.allclose(ema(x), ema.module._orig_mod(x))


@pytest.mark.parametrize("make", [minidynamo.disable, minidynamo.run], ids=["disable", "run"])
def test_other_contexts_round_trip(make):
    wrapped = make(_model())
    copied = pickle.loads(pickle.dumps(wrapped))
    x = torch.randn(2, 4)
    assert torch.equal(copied(x), copied._orig_mod(x))


def test_unpicklable_backend_says_so():
    compiled = minidynamo.compile(_model(), backend=lambda gm, inputs: gm.forward)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(compiled)
