"""Smoke test of `python -m benchmarks`: one tiny case of each section, then the report files.

The kernels section is `benchmarks/bench_kernels.py` (its inductor compiles take too long here), so
it is stood in for by rows of the shape it returns; every other section runs for real (compile
latency with one subprocess, minidynamo's).
"""
import json

import pytest
import torch

from benchmarks import __main__ as cli
from benchmarks import bench_compile, bench_models, bench_overhead, bench_scaling, bench_zoo

KERNEL_ROWS = [
    {"workload": "bandwidth", "threads": 1, "triad_torch": 10.0, "triad_ours": 9.0, "copy_torch": 11.0},
    {"workload": "chain6 1M", "threads": 1, "eager_ms": 2.0, "inductor_ms": 1.0, "cpp_ms": 1.0,
     "speedup_vs_eager": 2.0, "speedup_vs_inductor": 1.0, "cpp_gbps": 12.0, "cpp_pct_of_bandwidth": 100.0},
]

TINY = {
    "overhead": lambda quick, threads: bench_overhead.run(True, only=("int and float arguments",)),
    "compile": lambda quick, threads: {"rows": (rows := bench_compile.measure(
        [("pointwise", "minidynamo eager", "cold")], 1, threads)),
        "aims": bench_compile.aims(rows)},
    "kernels": lambda quick, threads: {"rows": KERNEL_ROWS},
    "models": lambda quick, threads: bench_models.run(True, models=("cnn",), modes=(False,)),
    "scaling": lambda quick, threads: bench_scaling.run(True, ops=(10,), entries=(2,)),
}


def _checked_rows(results: dict):
    yield from results["overhead"]["rows"]
    yield from results["compile"]["rows"]
    for row in results["models"]["rows"]:
        yield from (t for t in row["systems"].values() if "skipped" not in t)
    yield from results["scaling"]["graph_size"]
    yield from results["scaling"]["cache_entries"]


def test_tiny_run_writes_checked_results(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "SECTIONS", TINY)
    monkeypatch.setattr(bench_models, "systems", lambda: ["minidynamo eager", "torch eager"])
    paths = cli.main(["--quick", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text())
    rows = list(_checked_rows(results))
    assert rows and all(r.get("checked") is True for r in rows), [r for r in rows if not r.get("checked")]
    summary = (tmp_path / "summary.md").read_text()
    assert results["meta"]["commit"] in summary and "cores" in summary
    assert "aim: ≤ 1/4 of torch" in summary and "int and float arguments" in summary
    assert (tmp_path / "chart.png").stat().st_size > 1000
    assert set(paths) == {"json", "markdown", "chart"}


def test_failing_case_is_recorded_not_raised(monkeypatch):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(bench_scaling, "generated", broken)
    rows = bench_scaling.run(True, ops=(10,), entries=())["graph_size"]
    assert rows and all("boom" in r["error"] for r in rows)


def test_zoo_worker_measures_a_model_and_the_report_renders_it():
    pytest.importorskip("transformers")
    from benchmarks import report

    measured = bench_zoo.worker("convnext", "minidynamo", 1)
    assert measured["graphs"] == 1 and measured["breaks"] == 0
    assert measured["first_s"] > 0 and measured["compiled_us"] > 0 and measured["eager_us"] > 0
    row = {"model": "convnext", "family": "vision CNN", **{f"minidynamo_{k}": v for k, v in measured.items()},
           "torch_error": "not run"}
    text = "\n".join(report.SECTIONS["zoo"]({"rows": [row]}))
    assert "| convnext | vision CNN | 1 / 0 |" in text and "not run" in text


def test_ddp_section_renders_its_rows():
    from benchmarks import bench_ddp, report

    row = {"system": "minidynamo cpp, split per bucket", "parts": 8, "equal": True, "lead_ms": 116.9,
           "step_ms": 265.0, "eager_step_ms": 233.6}
    text = "\n".join(report.SECTIONS["ddp"]({"rows": [row], "model": bench_ddp.MODEL}))
    assert "| minidynamo cpp, split per bucket | 8 | True | 116.90 | 265.00 | 233.60 |" in text
    assert "bucket_cap_mb=1.0" in text


def test_train_section_checks_against_eager_and_renders_its_rows(monkeypatch):
    """The train section's check catches a system whose gradients differ from eager's, and the
    report renders measured and failed rows."""
    from benchmarks import bench_train, report

    monkeypatch.setattr(bench_train, "SYSTEMS", ("eager", "minidynamo eager"))
    monkeypatch.setattr(bench_train, "_cold_caches", lambda: None)  # leaves the caches as they are
    measured = bench_train.measure("cnn", "fwd+bwd", 2)
    assert set(measured["ms"]) == {"eager", "minidynamo eager"} and measured["first_s"]["eager"] >= 0
    model, args, kwargs = bench_train._build("cnn")
    runs = {"eager": bench_train._fwd_bwd(model, args, kwargs, "eager")}
    other, _, _ = bench_train._build("cnn")
    with torch.no_grad():
        list(other.parameters())[-1].add_(1.0)  # the output layer's bias
    runs["minidynamo eager"] = bench_train._fwd_bwd(other, args, kwargs, "minidynamo eager")
    with pytest.raises(AssertionError, match="minidynamo eager gradient"):
        bench_train._check("fwd+bwd", runs, {"eager": model, "minidynamo eager": other})
    row = {"model": "gpt2", "mode": "train step", "first_s": {"minidynamo cpp": 2.0, "torch inductor": 30.0},
           "ms": {"eager": 8.0, "minidynamo cpp": 4.0, "torch inductor": 5.0}}
    text = "\n".join(report.SECTIONS["train"]({"rows": [row, {"model": "bert", "mode": "fwd+bwd", "error": "boom"}],
                                                "source": "transformers"}))
    assert "| gpt2 | train step | 8.000 | 4.000 (2.00x) | 5.000 (1.60x) | 1.25 | 2.00 | 30.00 | 0.07 | - |" in text
    assert "error: boom" in text
    assert set(bench_train.MODELS) >= {"gpt2", "bert", "cnn", "llama", "t5", "vit", "wav2vec2"}
    assert bench_train._modes("llama") == ("fwd+bwd",) and bench_train._modes("cnn") == bench_train.MODES


def test_cppmodels_section_renders_its_rows_and_aims():
    from benchmarks import bench_cppmodels, report

    row = {"model": "gpt2", "threads": 1, "eager_ms": 1.0, "cpp_ms": 0.4, "inductor_ms": 0.5, "cpp_first_s": 0.5,
           "inductor_first_s": 10.0, "cpp_vs_inductor": 0.8, "first_call_ratio": 0.05}
    text = "\n".join(report.SECTIONS["cppmodels"]({"rows": [row, {"model": "t5", "threads": 1, "error": "boom"}]}))
    assert "| gpt2 | 1.000 | 0.400 | 0.500 | 2.50 | 2.00 | 0.80 | 0.500 | 10.000 |" in text
    assert "| t5 | error: boom |" in text
    assert set(bench_cppmodels.MODELS) >= {"gpt2", "bert", "cnn", "llama", "t5", "vit", "wav2vec2"}


def test_generate_section_checks_tokens_counts_compiles_and_renders(monkeypatch):
    """The generate section's worker times a compiled generate() (here minidynamo's eager backend, to stay
    quick) with its compile counts, refuses a model whose tokens differ from eager's, and the report
    renders measured and failed rows with the aims."""
    pytest.importorskip("transformers")
    from benchmarks import bench_generate, report, zoo

    monkeypatch.setattr(bench_generate, "BACKENDS", {"cpp": "eager"})
    measured = bench_generate.worker("gpt2", 1, systems=("eager", "cpp"))
    assert measured["tokens"] == bench_generate.PROMPT + bench_generate.NEW_TOKENS
    assert 1 <= measured["cpp_compiles"] <= 3 and measured["cpp_recompiles"] == measured["cpp_compiles"] - 1
    assert measured["cpp_fallbacks"] == 0 and measured["cpp_ms"] > 0 and measured["eager_ms"] > 0

    def wrong_weights(name, system):
        model, _, _ = zoo.build(name)
        with torch.no_grad():
            model.transformer.wte.weight.mul_(-1.0)
        return model
    monkeypatch.setattr(bench_generate, "_compiled_model", wrong_weights)
    with pytest.raises(AssertionError, match="cpp: tokens differ"):
        bench_generate.worker("gpt2", 1, systems=("eager", "cpp"))

    row = {"model": "llama", "threads": 1, "eager_ms": 100.0, "cpp_ms": 50.0, "inductor_ms": 60.0,
           "cpp_first_s": 2.0, "inductor_first_s": 40.0, "cpp_compiles": 3, "cpp_recompiles": 2, "cpp_fallbacks": 0,
           "inductor_compiles": 3, "inductor_recompiles": 2, "cpp_vs_inductor": 50 / 60}
    rows = [row, {"model": "bart", "threads": 1, "error": "boom"}]
    section = {"rows": rows, "new_tokens": 20, "prompt": 6, "aims": bench_generate.aims(rows)}
    text = "\n".join(report.SECTIONS["generate"](section) + report._aims({"generate": section}))
    assert "| llama | 100.00 | 50.00 | 60.00 | 5.000 / 2.500 / 3.000 | 2.00 | 1.20 | 2.00 / 40.00 | 3 / 2 | 3 / 2 | 0 |" \
        in text
    assert "| bart | error: boom |" in text
    assert "| issue 17: generate() recompiles, llama, cpp | 2 | aim: ≤ 3 | ✓ |" in text
    assert "| issue 17: generate() per call, llama, cpp / inductor | 0.833 | aim: ≤ 1 | ✓ |" in text
    assert "| issue 17: generate() per call, bart, cpp / inductor | not measured | aim: ≤ 1 | - |" in text


def test_libraries_section_counts_graphs_of_both_and_renders_them():
    pytest.importorskip("einops")
    from benchmarks import bench_libraries, report

    row = bench_libraries.measure("einops_layers", quick=True, timed=False)
    assert (row["minidynamo"], row["torch"]) == ("1 / 0", "1 / 0")
    text = "\n".join(report.SECTIONS["libraries"]({"rows": [row, {"case": "x", "library": "x", "error": "not installed"}],
                                                   "threads": 1}))
    assert "| einops_layers | 1 / 0 | 1 / 0 |" in text and "| x | not installed |" in text
