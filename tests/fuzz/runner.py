"""Running cases: one in this process, or a batch in a worker process that a crash or hang cannot take down."""
import collections
import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from . import repro
from .generator import ALL_FAMILIES, KNOWN_OPEN, Case, generate

_PROTOCOL = "@@fuzz "
CASE_TIMEOUT_S = 300


@dataclass
class Failure:
    """A case where compiled != eager (or the harness itself broke)."""

    seed: int
    what: str  # the aspect that differed: result, args, globals, exception, torch state, stdout, ...
    message: str
    path: str = ""  # the repro file, once written
    known: Tuple[str, ...] = ()  # KNOWN_OPEN classes whose features the case uses
    shared: bool = False  # torch.compile differs from eager in exactly the same way (not counted as ours)


def run_one(case: Case) -> Optional[Failure]:
    """Runs `case` in this process; None when every call matched."""
    from . import runtime
    try:
        runtime.run_case(case.program(), case.run_steps(), case.target, case.backend, case.exact)
    except runtime.Mismatch as e:
        return Failure(case.seed, e.what, str(e), shared=_torch_differs_alike(case, str(e)))
    except Exception as e:  # the harness or the program's setup broke: a fuzzer bug, reported as such
        return Failure(case.seed, "harness", f"{type(e).__name__}: {e}")
    return None


def _torch_differs_alike(case: Case, message: str) -> bool:
    """Whether torch.compile, run on the same case, gives the very same difference from eager (a limit
    of a library both use, such as aot_autograd's compiled backward running once)."""
    from . import runtime
    try:
        runtime.run_case(case.program(), case.run_steps(), case.target, case.backend, case.exact, front="torch")
    except runtime.Mismatch as e:
        return str(e) == message
    except Exception:
        return False
    return False


def minimized(case: Case, failure: Failure, budget: int = 80) -> Case:
    """The smallest case found that still fails the same way."""
    def still_fails(candidate: Case) -> bool:
        again = run_one(candidate)
        return again is not None and again.what == failure.what and again.shared == failure.shared
    return repro.minimize(case, still_fails, budget)


def run_and_record(case: Case, out_dir: Optional[str], minimize: str = "all") -> Optional[Failure]:
    """Runs `case`; on a failure writes its repro into `out_dir`, minimised (the original beside it) when
    `minimize` is "all", or "new" and the case uses no feature of a known open bug."""
    failure = run_one(case)
    if failure is None or out_dir is None:
        return failure
    failure.known = tuple(case.known_open())
    if minimize == "none" or (failure.known and minimize == "new"):
        failure.path = repro.write(case, out_dir, failure.message)
        return failure
    repro.write(case, out_dir, failure.message, suffix="_full")
    small = minimized(case, failure) if failure.what != "harness" else case
    again = run_one(small) or failure
    failure.path = repro.write(small, out_dir, again.message)
    failure.message = again.message
    return failure


# ------------------------------------------------------------------------------------------------
# batches: `python -m fuzz --seed S --n N --out DIR`
# ------------------------------------------------------------------------------------------------
def worker(seeds: Sequence[int], families: Sequence[str], out_dir: str, minimize: str, skip: Sequence[str]) -> None:
    """Runs the cases one after another, one protocol line each on stdout."""
    warnings.simplefilter("ignore")
    for seed in seeds:
        print(f"{_PROTOCOL}start {seed}", flush=True)
        failure = run_and_record(generate(seed, families, skip=skip), out_dir, minimize)
        record = {"seed": seed} if failure is None else dataclasses.asdict(failure)
        print(f"{_PROTOCOL}done {json.dumps(record)}", flush=True)


def batch(seed: int, n: int, out_dir: str, families: Sequence[str] = ALL_FAMILIES, minimize: str = "new",
          skip: Sequence[str] = ()) -> List[Failure]:
    """Runs cases seed .. seed+n-1 in worker processes (restarted after a crash or a hang); writes a repro
    per failing case into `out_dir`, the workers' stderr into worker.log and a summary; returns the failures."""
    indices = [str(i) for i, name in enumerate(KNOWN_OPEN) if name in skip]
    options = ["--minimize", minimize] + (["--skip-indices", ",".join(indices)] if indices else [])
    pending = list(range(seed, seed + n))
    failures: List[Failure] = []  # shared ones included, marked
    started = time.time()
    while pending:
        crashed = _run_worker(pending, families, out_dir, options, failures)
        if crashed is not None:
            pending.remove(crashed[0])
            case = generate(crashed[0], families, skip=skip)
            path = repro.write(case, out_dir, crashed[1])
            failures.append(Failure(case.seed, "crash", crashed[1], path))
            print(f"seed {case.seed}: crash: {crashed[1]} -> {path}", flush=True)
    _summary(seed, n, failures, out_dir, time.time() - started)
    return failures


def _run_worker(pending: List[int], families: Sequence[str], out_dir: str, options: List[str], failures: List[Failure]):
    """Runs a worker over `pending` (consumed as cases finish); returns (seed, reason) if it died mid-case."""
    cmd = [sys.executable, "-m", "fuzz", "--worker", "--families", ",".join(families), "--out", out_dir,
           "--seeds", ",".join(map(str, pending))] + options
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.getcwd()]))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "worker.log"), "a") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        return _follow(proc, pending, failures)


def _follow(proc: subprocess.Popen, pending: List[int], failures: List[Failure]):
    """Reads the worker's protocol lines until it exits; kills it when a case makes no progress."""
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put("")], daemon=True).start()
    current = None
    while True:
        try:
            line = lines.get(timeout=CASE_TIMEOUT_S)
        except queue.Empty:
            proc.kill()
            proc.wait()
            return (current, f"no progress for {CASE_TIMEOUT_S} s (hang)") if current is not None else None
        if not line:
            code = proc.wait()
            return (current, f"worker exited with {code}") if current is not None else None
        if not line.startswith(_PROTOCOL):
            continue
        kind, _, rest = line[len(_PROTOCOL):].partition(" ")
        if kind == "start":
            current = int(rest)
            continue
        record = json.loads(rest)
        pending.remove(record["seed"])
        current = None
        if "what" in record:
            failure = Failure(**dict(record, known=tuple(record["known"])))
            failures.append(failure)
            known = (" [shared with torch.compile]" if failure.shared else
                     f" [known: {'; '.join(k.split(':')[0] for k in failure.known)}]" if failure.known else " [NEW]")
            print(f"seed {failure.seed}:{known} {failure.message[:300]} -> {failure.path}", flush=True)
        if len(pending) % 100 == 0:
            print(f"... {len(pending)} cases left, {len(failures)} failures", flush=True)


def _summary(seed: int, n: int, failures: List[Failure], out_dir: str, seconds: float) -> None:
    groups: Dict[str, List[int]] = collections.defaultdict(list)
    for f in failures:
        kind = ("shared with torch.compile, not counted" if f.shared else
                "uses known open features" if f.known else "NEW (no known open feature)")
        groups[f"{f.what}, {kind}"].append(f.seed)
    ours = [f for f in failures if not f.shared]
    lines = [f"{n} cases from seed {seed} in {seconds:.0f} s: {len(ours)} failing"
             f" ({len(failures) - len(ours)} more where torch.compile differs from eager alike)"]
    lines += [f"  {key}: {len(seeds)} (seeds {', '.join(map(str, seeds[:20]))})" for key, seeds in sorted(groups.items())]
    text = "\n".join(lines)
    print(text)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"summary_{seed}_{n}.txt"), "w") as f:
        f.write(text + "\n" + "\n".join(f"{x.seed}\t{x.what}{' (shared)' if x.shared else ''}\t{x.path}\t{x.message}\t{'; '.join(x.known)}"
                                        for x in failures) + "\n")
