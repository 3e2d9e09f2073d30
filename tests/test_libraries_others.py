"""Libraries beyond transformers: einops layers, kornia ops, MONAI networks and losses, torchmetrics,
torch-geometric layers and a gpytorch ExactGP, as a user compiles them. Each case is compared with
eager, with gradients too, and its graph count is pinned: minidynamo's, and torch._dynamo's in
reference mode (`MINIDYNAMO_TEST_REFERENCE=torch`). A library that is not installed is skipped."""
import pytest
import torch

from translator_harness import REFERENCE, CompileCounter, fresh_dynamo, optimize  # noqa: F401


def _lib(name):
    return pytest.importorskip(name)


def _einops():
    layers = _lib("einops.layers.torch")
    model = torch.nn.Sequential(layers.Rearrange("b c h w -> b (h w) c"), torch.nn.Linear(3, 8),
                                layers.Reduce("b n c -> b c", "mean"))
    return model, (torch.randn(2, 3, 4, 4),)


def _kornia_filters():
    kornia = _lib("kornia")

    def blur_edges(x):
        gray = kornia.color.rgb_to_grayscale(x)
        return kornia.filters.gaussian_blur2d(gray, (3, 3), (1.5, 1.5)) + kornia.filters.sobel(x).mean(1, keepdim=True)
    return blur_edges, (torch.rand(2, 3, 16, 16),)


def _kornia_rotate():
    kornia = _lib("kornia")
    return (lambda x: kornia.geometry.transform.rotate(x, torch.tensor([30.0, 45.0]))), (torch.rand(2, 3, 16, 16),)


def _monai_unet():
    monai = _lib("monai")
    net = monai.networks.nets.UNet(spatial_dims=2, in_channels=1, out_channels=2, channels=(4, 8, 16),
                                   strides=(2, 2), num_res_units=1)
    return net, (torch.randn(2, 1, 16, 16),)


def _monai_dice():
    monai = _lib("monai")
    loss = monai.losses.DiceLoss(sigmoid=True)
    return loss, (torch.randn(2, 1, 8, 8), (torch.rand(2, 1, 8, 8) > 0.5).float())


def _torchmetrics():
    tmf = _lib("torchmetrics.functional")

    def metrics(p, t):
        return (tmf.accuracy(p, t, task="multiclass", num_classes=4)
                + tmf.mean_squared_error(p.softmax(-1), torch.nn.functional.one_hot(t, 4).float()))
    return metrics, (torch.randn(8, 4), torch.randint(0, 4, (8,)))


_EDGES = torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]])


def _pyg(layer):
    def build():
        gnn = _lib("torch_geometric.nn")
        module = {"gcn": lambda: gnn.GCNConv(8, 16), "gat": lambda: gnn.GATConv(8, 16, heads=2),
                  "sage": lambda: gnn.SAGEConv(8, 16)}[layer]()
        return module, (torch.randn(5, 8), _EDGES)
    return build


def _gpytorch():
    gpytorch = _lib("gpytorch")

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
    holder = torch.nn.ModuleList([gp, likelihood])  # its parameters, for the gradient check
    fn = lambda x, y: -mll(gp(x), y)  # noqa: E731
    fn.parameters = holder.parameters
    return fn, (x, y)


# name: (build, graphs with minidynamo, graphs with torch._dynamo 2.13)
CASES = {
    "einops_layers": (_einops, 1, 1),
    "kornia_filters": (_kornia_filters, 1, 1),
    "kornia_rotate": (_kornia_rotate, 1, 1),
    "monai_unet": (_monai_unet, 1, 1),
    "monai_dice_loss": (_monai_dice, 2, 2),  # Tensor.tolist() of the reduced dims breaks both
    "torchmetrics_accuracy_mse": (_torchmetrics, 1, 1),
    "pyg_gcn": (_pyg("gcn"), 4, 4),  # nonzero (a data-dependent shape) breaks both
    "pyg_gat": (_pyg("gat"), 3, 3),
    "pyg_sage": (_pyg("sage"), 1, 1),
    "gpytorch_exact_mll": (_gpytorch, 18, 18),  # linear operators: the graph breaks at each, in both
}


def _build(name):
    torch.manual_seed(0)
    fn, args = CASES[name][0]()
    return fn, args


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_with_the_pinned_graph_count(name):
    fn, args = _build(name)
    with torch.no_grad():
        expected = fn(*args)
        counter = CompileCounter()
        compiled = optimize(counter)(fn)
        for _ in range(3):
            torch.testing.assert_close(compiled(*args), expected, rtol=1e-4, atol=1e-5)
    assert counter.frame_count == CASES[name][2 if REFERENCE else 1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_eager(name):
    fn, args = _build(name)
    params = list(fn.parameters()) if hasattr(fn, "parameters") else []
    leaves = [a.clone().requires_grad_() if a.is_floating_point() else a for a in args]
    inputs = [a for a in leaves if a.requires_grad] + params

    def grads(run):
        out = run(*leaves)
        return torch.autograd.grad(out.float().square().sum(), inputs, allow_unused=True)

    expected = grads(fn)
    got = grads(optimize(CompileCounter())(fn))
    for g, e in zip(got, expected):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g, e, rtol=1e-3, atol=1e-5)
