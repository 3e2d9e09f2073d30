"""Repro files: a failing case written as a standalone script (runtime pasted in), and case minimisation."""
import dataclasses
import os
from typing import Callable, List

from .generator import Case

_RUNTIME_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime.py")


def render(case: Case, failure: str = "") -> str:
    """A script that rebuilds `case`, runs its steps and raises (exits non-zero) while compiled != eager."""
    with open(_RUNTIME_SOURCE) as f:
        runtime = f.read()
    program = case.program()
    program_literal = f"r'''{program}'''" if "'''" not in program and not program.endswith("\\") else repr(program)
    steps = "\n".join(f"    {(kind, code, *flags)!r},  # {tag}" for kind, code, tag, *flags in case.steps)
    header = (f'"""minidynamo fuzz repro: seed {case.seed}, backend {case.backend}, families {", ".join(case.families)}.\n'
              + (f"\nFailure: {failure}\n" if failure else "")
              + '\nRun: .venv/bin/python THIS_FILE  (raises while compiled != eager)\n"""\n')
    case_text = f"PROGRAM = {program_literal}\n\nSTEPS = [\n{steps}\n]\n"
    rule = "# " + "-" * 96 + "\n"
    return (header + "\n" + case_text + "\n\n" + rule + "# the fuzz runtime (tests/fuzz/runtime.py)\n" + rule + runtime + "\n\n"
            + 'if __name__ == "__main__":\n'
            + f"    run_case(PROGRAM, STEPS, target={case.target!r}, backend={case.backend!r}, exact={case.exact!r})\n"
            + '    print("PASS: compiled == eager on every call")\n')


def write(case: Case, directory: str, failure: str = "", suffix: str = "") -> str:
    """Writes the repro of `case` into `directory`; returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"repro_{case.seed}{suffix}.py")
    with open(path, "w") as f:
        f.write(render(case, failure))
    return path


def minimize(case: Case, still_fails: Callable[[Case], bool], budget: int = 80) -> Case:
    """Drops steps, body blocks and setup blocks while `still_fails` holds (at most `budget` runs)."""
    runs = [0]

    def attempt(candidate: Case) -> bool:
        if runs[0] >= budget:
            return False
        runs[0] += 1
        return still_fails(candidate)

    for field in ("steps", "body", "setup", "steps"):
        case = _shrink_list(case, field, attempt)
    return case


def _shrink_list(case: Case, field: str, attempt: Callable[[Case], bool]) -> Case:
    items: List = getattr(case, field)
    chunk = max(1, len(items) // 2)
    while chunk >= 1:
        start = 0
        while start < len(items):
            trial = items[:start] + items[start + chunk:]
            candidate = dataclasses.replace(case, **{field: trial})
            if _valid(candidate) and attempt(candidate):
                items, case = trial, candidate
            else:
                start += chunk
        chunk //= 2
    return case


def _valid(case: Case) -> bool:
    return any(step[0] == "call" for step in case.steps)
