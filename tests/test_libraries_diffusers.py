"""Libraries beyond transformers, diffusers: UNets, the VAE and a DiT, small random-init configs, offline.

Each is compared with eager in eval and with gradients, compiles to one graph (as with torch._dynamo,
`MINIDYNAMO_TEST_REFERENCE=torch`), and its repeated calls compile nothing. ModelMixin reads its
config through a `__getattr__` of its own and asks `hasattr(module, "_hf_hook")` on every call."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

diffusers = pytest.importorskip("diffusers")

from translator_harness import REFERENCE, CompileCounter, explain, fresh_dynamo, optimize  # noqa: E402,F401


def _unet2d():
    return diffusers.UNet2DModel(
        sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8)


def _unet2d_condition():
    return diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)


def _vae():
    return diffusers.AutoencoderKL(
        block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=8, latent_channels=4)


def _dit():
    return diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2,
        sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=8)


def _inputs(name):
    g = torch.Generator().manual_seed(1)
    if name == "unet2d":
        return (torch.randn(2, 3, 16, 16, generator=g), torch.tensor([3, 7]))
    if name == "unet2d_condition":
        return (torch.randn(2, 4, 8, 8, generator=g), torch.tensor(5), torch.randn(2, 6, 32, generator=g))
    if name == "dit":
        return (torch.randn(2, 4, 8, 8, generator=g), torch.tensor([3, 7]), torch.tensor([1, 4]))
    return (torch.randn(2, 3, 16, 16, generator=g),)


MODELS = {"unet2d": _unet2d, "unet2d_condition": _unet2d_condition, "vae": _vae, "dit": _dit}


def _model(name, train):
    torch.manual_seed(0)
    return MODELS[name]().train(train)


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_eval_matches_eager_in_one_graph(name):
    model, inputs = _model(name, False), _inputs(name)
    with torch.no_grad():
        expected = model(*inputs).sample
        counter = CompileCounter()
        compiled = optimize(counter)(model)
        for _ in range(3):
            _close(compiled(*inputs).sample, expected)
    assert counter.frame_count == 1 and counter.op_count > 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradients_match_eager(name):
    model, inputs = _model(name, True), _inputs(name)
    model(*inputs).sample.square().mean().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    counter = CompileCounter()
    optimize(counter)(model)(*inputs).sample.square().mean().backward()
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    for n in expected:
        torch.testing.assert_close(got[n], expected[n], rtol=1e-3, atol=1e-5)
    assert counter.frame_count == 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_no_graph_break(name):
    model = _model(name, False)
    with torch.no_grad():
        out = explain(model, *_inputs(name))
    assert (out.graph_count, out.graph_break_count) == (1, 0), out.break_reasons
