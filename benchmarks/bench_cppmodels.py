"""Eval (forward, no_grad) side by side: minidynamo `cpp` vs torch.compile inductor vs eager, on the
tiny GPT-2, BERT and CNN of benchmarks/models.py and four `transformers` families of benchmarks/zoo.py.

    python -m benchmarks --only cppmodels [--threads N]

Each model runs in a fresh `python -m benchmarks.bench_cppmodels --worker MODEL` process with empty
kernel caches (cold first calls): one eager call first (imports, lazy initialisation), then the first
compiled call of cpp and of inductor, each checked against eager, then eager, cpp and inductor
interleaved for the per-call medians. Aims (issue 17): cpp per call at most inductor's; cpp's first
call at most 1/5 of inductor's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, Tuple

from benchmarks.report import model_aims, ratio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("gpt2", "bert", "cnn", "llama", "t5", "vit", "wav2vec2")
SYSTEMS = ("eager", "cpp", "inductor")


def _build(name: str) -> Tuple[object, tuple, dict]:
    from benchmarks import models, zoo

    if name in models.MODELS:
        model, args = models.build(name)
        return model.eval(), tuple(args), {}
    return zoo.build(name)


def worker(name: str, repeat: int) -> dict:
    import torch

    import minidynamo
    from benchmarks.models import check_close
    from benchmarks.timing import interleaved_medians

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    model, args, kwargs = _build(name)
    calls: Dict[str, Callable[[], object]] = {"eager": lambda: model(*args, **kwargs)}
    row: Dict[str, object] = {}
    with torch.no_grad():
        expected = calls["eager"]()
        for system in SYSTEMS[1:]:
            compiled = torch.compile(model, backend="inductor") if system == "inductor" \
                else minidynamo.optimize(system)(model)
            start = time.perf_counter()
            got = compiled(*args, **kwargs)
            row[f"{system}_first_s"] = time.perf_counter() - start
            row[f"{system}_max_abs_err"] = check_close(got, expected)
            calls[system] = (lambda f: lambda: f(*args, **kwargs))(compiled)
        for call in calls.values():
            call()
        medians = interleaved_medians(calls, 10, repeat)
    row.update({f"{s}_ms": medians[s] / 1e6 for s in SYSTEMS})
    return row


def spawn(module: str, name: str, repeat: int, threads: int, timeout_s: int = 900) -> dict:
    """The row that `python -m benchmarks.MODULE --worker NAME` prints last (JSON), run in a fresh process
    with empty minidynamo and inductor caches; {"error": ...} when it fails."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{module}-") as cache:
        env = dict(os.environ, MINIDYNAMO_CACHE_DIR=os.path.join(cache, "md"), BENCH_THREADS=str(threads),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), PYTHONWARNINGS="ignore")
        cmd = [sys.executable, "-m", f"benchmarks.{module}", "--worker", name, "--repeat", str(repeat)]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:300] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


AIMS = [("issue 17: eval per call, {model}, cpp / inductor", "cpp_vs_inductor", 1.0),
        ("issue 17: first call, {model}, cpp / inductor", "first_call_ratio", 0.2)]


def run(quick: bool = False, threads: int = 1, only: tuple = ()) -> dict:
    repeat = 7 if quick else 21
    rows = [_measured(name, repeat, threads) for name in only or MODELS]
    return {"rows": rows, "aims": model_aims(rows, AIMS)}


def _measured(name: str, repeat: int, threads: int) -> Dict:
    row: Dict = {"model": name, "threads": threads, **spawn("bench_cppmodels", name, repeat, threads)}
    row["cpp_vs_inductor"] = ratio(row.get("cpp_ms"), row.get("inductor_ms"))
    row["first_call_ratio"] = ratio(row.get("cpp_first_s"), row.get("inductor_first_s"))
    print(f"[cppmodels] {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def cli(worker: Callable[[str, int], dict], run: Callable[[bool, int, tuple], dict]) -> None:
    """A model section's command line: `--worker MODEL` prints one row (see spawn), else the whole run."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", metavar="MODEL")
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("models", nargs="*")
    opts = parser.parse_args()
    if opts.worker:
        print(json.dumps(worker(opts.worker, opts.repeat)))
        return
    print(json.dumps(run(opts.quick, opts.threads, tuple(opts.models)), indent=1))


if __name__ == "__main__":
    cli(worker, run)
