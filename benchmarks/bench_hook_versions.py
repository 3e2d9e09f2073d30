"""Per-call cost of the eval-frame hook on the running CPython, through minidynamo._C alone.

No translator is involved, so this runs on a CPython whose Python layer has not landed yet:
    python benchmarks/bench_hook_versions.py
    scripts/pyroot.sh 3.13 python benchmarks/bench_hook_versions.py

Cases, each a call of `small(1, 2)` in a loop (the empty loop's own cost is subtracted):
- plain: no hook installed;
- installed: the hook installed, the code not converted (the callback declined it once);
- hit: a cache hit running the transformed code (here small's own code, so the figure is the hook's),
  with no guard (an empty GuardSet), and with one type check on an argument (GuardSet in C).
Each figure is the median of interleaved repeats, in CPU time of this thread (the machine is shared).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import sysconfig
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_c():
    try:
        from minidynamo import _C
    except ImportError:  # the Python layer does not support this CPython (yet): the extension alone
        path = os.path.join(ROOT, "minidynamo", "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        spec = importlib.util.spec_from_file_location("minidynamo._C", path)
        _C = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_C)
    return _C


_C = load_c()


def small(a, b):
    return a


def calls(n):
    for _ in range(n):
        small(1, 2)


def empty(n):
    for _ in range(n):
        pass


class Guarded:
    def __init__(self, code, check_fn):
        self.code = code
        self.check_fn = check_fn


def decline(frame):
    return None


def converting(check_fn):
    def callback(frame):
        if frame.f_code is not small.__code__:
            return None
        return Guarded(small.__code__, check_fn)

    return callback


def cases():
    type_check = _C.GuardSet([(_C.ACC_LOCAL, -1, "a", 0)], [(_C.GuardCheck(_C.CHK_TYPE, int), 0, -1)])
    return {
        "plain": None,
        "installed": decline,
        "hit": converting(_C.GuardSet([], [])),
        "hit_type_guard": converting(type_check),
    }


def timed(loop, callback, number):
    _C.reset()  # forgets the codes a declining callback marked, and the entries
    previous = _C.set_eval_frame(callback)
    try:
        loop(100)  # compiles the entry, and marks declined code
        hits = _C.stats()["hits"]
        start = time.thread_time_ns()
        loop(number)
        elapsed = time.thread_time_ns() - start
        assert callback is None or _C.stats()["hits"] - hits == (number if callback is not decline else 0)
        return elapsed / number
    finally:
        _C.set_eval_frame(previous)


def run(number: int, repeat: int):
    samples = {name: [] for name in ["loop", *cases()]}
    for _ in range(repeat):
        samples["loop"].append(timed(empty, None, number))
        for name, callback in cases().items():
            samples[name].append(timed(calls, callback, number))
    _C.reset()
    loop = statistics.median(samples["loop"])
    result = {name: statistics.median(values) - loop for name, values in samples.items() if name != "loop"}
    result["loop"] = loop
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    number, repeat = (50_000, 5) if args.quick else (200_000, 15)
    result = {k: round(v, 1) for k, v in run(number, repeat).items()}
    print(json.dumps({"python": sys.version.split()[0], "ns_per_call": result}))
