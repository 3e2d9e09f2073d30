"""Workloads from libraries beyond transformers, tiny random-init configs: `WORKLOADS[name]` is
(library, build, output), `build()` -> (callable, args) and `output(result)` -> the tensor to compare."""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Dict, NamedTuple, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

VOCAB = 128


class Workload(NamedTuple):
    library: str  # the module to import (the case is skipped where it is missing)
    build: Callable[[], Tuple[Any, tuple]]
    output: Callable[[Any], torch.Tensor]


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1)


def _same(result: Any) -> torch.Tensor:
    return result


def _sample(result: Any) -> torch.Tensor:
    return result.sample


def _logits(result: Any) -> torch.Tensor:
    return result.logits


# ---- diffusers ----

def _diffusers(make: Callable[[Any], torch.nn.Module], inputs: Callable[[], tuple]) -> Callable:
    def build():
        return make(importlib.import_module("diffusers")), inputs()
    return build


_UNET2D = _diffusers(lambda d: d.UNet2DModel(
    sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(32, 64),
    down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    norm_num_groups=8), lambda: (torch.randn(2, 3, 16, 16, generator=_gen()), torch.tensor([3, 7])))
_UNET2D_CONDITION = _diffusers(lambda d: d.UNet2DConditionModel(
    sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8),
    lambda: (torch.randn(2, 4, 8, 8, generator=_gen()), torch.tensor(5), torch.randn(2, 6, 32, generator=_gen())))
_VAE = _diffusers(lambda d: d.AutoencoderKL(
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=8, latent_channels=4),
    lambda: (torch.randn(2, 3, 16, 16, generator=_gen()),))
_DIT = _diffusers(lambda d: d.DiTTransformer2DModel(
    num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2,
    sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=8),
    lambda: (torch.randn(2, 4, 8, 8, generator=_gen()), torch.tensor([3, 7]), torch.tensor([1, 4])))


# ---- peft over transformers ----

def _peft(base: Callable[[Any], torch.nn.Module], config: Callable[[Any], Any]) -> Callable:
    def build():
        peft, transformers = importlib.import_module("peft"), importlib.import_module("transformers")
        model = peft.get_peft_model(base(transformers), config(peft))
        for name, p in model.named_parameters():  # adapters start as the identity: make them count
            if "lora_B" in name or "ia3_l" in name:
                torch.nn.init.normal_(p, 1.0, 0.1)
        return model, (torch.randint(0, VOCAB, (2, 8), generator=_gen()),)
    return build


def _llama(T: Any) -> torch.nn.Module:
    return T.LlamaForCausalLM(T.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                            num_key_value_heads=2, intermediate_size=128, vocab_size=VOCAB))


def _gpt2(T: Any) -> torch.nn.Module:
    return T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=32))


def _bert(T: Any) -> torch.nn.Module:
    return T.BertForSequenceClassification(T.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=VOCAB,
        max_position_embeddings=32))


# ---- einops, kornia, MONAI, torchmetrics, torch-geometric, gpytorch ----

def _einops():
    layers = importlib.import_module("einops.layers.torch")
    model = torch.nn.Sequential(layers.Rearrange("b c h w -> b (h w) c"), torch.nn.Linear(3, 8),
                                layers.Reduce("b n c -> b c", "mean"))
    return model, (torch.randn(2, 3, 4, 4, generator=_gen()),)


def _kornia_filters():
    kornia = importlib.import_module("kornia")

    def blur_edges(x):
        gray = kornia.color.rgb_to_grayscale(x)
        return kornia.filters.gaussian_blur2d(gray, (3, 3), (1.5, 1.5)) + kornia.filters.sobel(x).mean(1, keepdim=True)
    return blur_edges, (torch.rand(2, 3, 16, 16, generator=_gen()),)


def _kornia_rotate():
    kornia = importlib.import_module("kornia")
    return (lambda x: kornia.geometry.transform.rotate(x, torch.tensor([30.0, 45.0]))), (
        torch.rand(2, 3, 16, 16, generator=_gen()),)


def _monai_unet():
    monai = importlib.import_module("monai")
    net = monai.networks.nets.UNet(spatial_dims=2, in_channels=1, out_channels=2, channels=(4, 8, 16),
                                   strides=(2, 2), num_res_units=1)
    return net, (torch.randn(2, 1, 16, 16, generator=_gen()),)


def _monai_dice():
    monai = importlib.import_module("monai")
    return monai.losses.DiceLoss(sigmoid=True), (torch.randn(2, 1, 8, 8, generator=_gen()),
                                                 (torch.rand(2, 1, 8, 8, generator=_gen()) > 0.5).float())


def _torchmetrics():
    tmf = importlib.import_module("torchmetrics.functional")

    def metrics(p, t):
        return (tmf.accuracy(p, t, task="multiclass", num_classes=4)
                + tmf.mean_squared_error(p.softmax(-1), torch.nn.functional.one_hot(t, 4).float()))
    return metrics, (torch.randn(8, 4, generator=_gen()), torch.randint(0, 4, (8,), generator=_gen()))


def _pyg(layer: str) -> Callable:
    def build():
        gnn = importlib.import_module("torch_geometric.nn")
        module = {"gcn": lambda: gnn.GCNConv(8, 16), "gat": lambda: gnn.GATConv(8, 16, heads=2),
                  "sage": lambda: gnn.SAGEConv(8, 16)}[layer]()
        edges = torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]])
        return module, (torch.randn(5, 8, generator=_gen()), edges)
    return build


def _gpytorch():
    gpytorch = importlib.import_module("gpytorch")

    class GP(gpytorch.models.ExactGP):
        def __init__(self, x, y, likelihood):
            super().__init__(x, y, likelihood)
            self.mean = gpytorch.means.ConstantMean()
            self.cov = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean(x), self.cov(x))

    x = torch.linspace(0, 1, 10)
    y = torch.sin(x * 6)
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    gp = GP(x, y, likelihood)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, gp)
    gp.train()
    likelihood.train()
    fn = lambda x, y: -mll(gp(x), y)  # noqa: E731
    fn.parameters = torch.nn.ModuleList([gp, likelihood]).parameters  # for the gradient check
    return fn, (x, y)


WORKLOADS: Dict[str, Workload] = {
    "diffusers_unet2d": Workload("diffusers", _UNET2D, _sample),
    "diffusers_unet2d_condition": Workload("diffusers", _UNET2D_CONDITION, _sample),
    "diffusers_vae": Workload("diffusers", _VAE, _sample),
    "diffusers_dit": Workload("diffusers", _DIT, _sample),
    "peft_lora_llama": Workload("peft", _peft(_llama, lambda p: p.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])),
                                _logits),
    "peft_lora_gpt2": Workload("peft", _peft(_gpt2, lambda p: p.LoraConfig(r=4, target_modules=["c_attn"],
                                                                          fan_in_fan_out=True)), _logits),
    "peft_lora_llama_mlp": Workload("peft", _peft(_llama, lambda p: p.LoraConfig(
        r=4, lora_alpha=8, target_modules=["gate_proj", "up_proj", "down_proj"])), _logits),
    "peft_ia3_bert": Workload("peft", _peft(_bert, lambda p: p.IA3Config(
        target_modules=["key", "value", "output.dense"], feedforward_modules=["output.dense"], task_type="SEQ_CLS")),
        _logits),
    "einops_layers": Workload("einops", _einops, _same),
    "kornia_filters": Workload("kornia", _kornia_filters, _same),
    "kornia_rotate": Workload("kornia", _kornia_rotate, _same),
    "monai_unet": Workload("monai", _monai_unet, _same),
    "monai_dice_loss": Workload("monai", _monai_dice, _same),
    "torchmetrics_accuracy_mse": Workload("torchmetrics", _torchmetrics, _same),
    "pyg_gcn": Workload("torch_geometric", _pyg("gcn"), _same),
    "pyg_gat": Workload("torch_geometric", _pyg("gat"), _same),
    "pyg_sage": Workload("torch_geometric", _pyg("sage"), _same),
    "gpytorch_exact_mll": Workload("gpytorch", _gpytorch, _same),
}


def build(name: str, train: bool = False) -> Tuple[Any, tuple]:
    """The workload's callable (a module in train or eval mode) and its inputs, seeded."""
    torch.manual_seed(0)
    fn, args = WORKLOADS[name].build()
    if isinstance(fn, torch.nn.Module):
        fn.train(train)
    return fn, args
