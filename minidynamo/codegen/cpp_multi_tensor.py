"""Multi-tensor loops: the inner loops of a scalar-outer kernel that are the same code up to their
buffers, loop-invariant values and length (an optimizer's update of each parameter, with the
scalars only it reads) are written once, as a function called over a table of pointers, values and
lengths: the C++ and its compile time stay constant in the number of parameters."""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_DEFINITION = re.compile(r"^\s*(\w+) (\w+) = ")  # "float tmp4 = ...;"
_STORE = re.compile(r"^\s*(\w+)\[")  # "buf75[r0] = tmp110;"
_HEADER = re.compile(r"^for \(int64_t r0 = 0; r0 < (\d+); r0\+\+\) \{$")
HELPER = "static __attribute__((noinline)) void "  # not a KERNEL_DEF: compiled in its kernel's unit
MIN_MEMBERS = 2


@dataclass
class _Unit:
    """A top-level statement of the kernel body, or a loop with its pragma."""

    lines: List[str]
    names: Set[str]
    defines: Optional[Tuple[str, str]] = None  # (C type, local) of a scalar definition
    bound: Optional[int] = None  # the length of a simple pointwise loop over r0
    stored: Set[str] = field(default_factory=set)  # names stored to with name[...] =


def _units(lines: Sequence[str]) -> List[_Unit]:
    units: List[_Unit] = []
    pending: List[str] = []  # pragma lines waiting for their loop
    depth = 0
    for line in lines:
        if depth == 0 and line.startswith("#pragma"):
            pending.append(line)
            continue
        if depth == 0:
            units.append(_Unit(pending + [line], set()))
            pending = []
        else:
            units[-1].lines.append(line)
        depth += line.endswith("{") - line.lstrip().startswith("}")
    if pending:
        units.append(_Unit(pending, set()))
    for u in units:
        u.names = set(_NAME.findall("\n".join(u.lines)))
        d = _DEFINITION.match(u.lines[0])
        if len(u.lines) == 1 and d:
            u.defines = (d.group(1), d.group(2))
        u.bound = _simple_loop_bound(u.lines)
        u.stored = {m.group(1) for m in map(_STORE.match, u.lines) if m}
    return units


def _simple_loop_bound(lines: List[str]) -> Optional[int]:
    """The length of [pragma] for (r0 ...) { statements } with no nested block, else None."""
    head = 1 if lines[0].startswith("#pragma") else 0
    if len(lines) < head + 3 or head and not lines[0].startswith("#pragma omp"):
        return None
    m = _HEADER.match(lines[head])
    body = lines[head + 1:-1]
    if m is None or lines[-1] != "}" or any(s.endswith("{") or "}" in s or "#" in s for s in body):
        return None
    return int(m.group(1))


@dataclass
class _Member:
    position: int  # the loop's unit
    units: List[int]  # scalar definitions only it reads, then the loop
    buffers: List[str]  # in order of first appearance
    free: List[str]  # locals it reads that are defined outside it
    text: str  # the code with canonical names


@dataclass
class _Body:
    """A kernel body's units with who names what: name -> units naming it, buffer -> units
    storing to it, local -> the unit defining it."""

    units: List[_Unit]
    refs: Dict[str, Set[int]]
    writers: Dict[str, Set[int]]
    defined_at: Dict[str, int]

    @classmethod
    def of(cls, lines: Sequence[str]) -> "_Body":
        units = _units(lines)
        refs: Dict[str, Set[int]] = collections.defaultdict(set)
        writers: Dict[str, Set[int]] = collections.defaultdict(set)
        for i, u in enumerate(units):
            for name in u.names:
                refs[name].add(i)
            for name in u.stored:
                writers[name].add(i)
        return cls(units, refs, writers, {u.defines[1]: i for i, u in enumerate(units) if u.defines})


def _member(loop: int, body: _Body, buffers: Set[str]) -> Optional[_Member]:
    """The loop with the scalar definitions read only by it (and by each other), when none of its
    buffers is written or read elsewhere in a way that moving it to a later place would change."""
    units, defined_at = body.units, body.defined_at
    taken, todo = {loop}, [loop]
    while todo:
        for name in units[todo.pop()].names:
            d = defined_at.get(name)
            if d is not None and d not in taken and body.refs[name] - {d} <= taken:
                taken.add(d)
                todo.append(d)
    order = sorted(taken)
    names = set().union(*(units[i].names for i in order))
    stores = set().union(*(units[i].stored for i in order))
    touched = names & buffers
    if any(not body.writers[b] <= taken for b in touched) or any(not body.refs[b] <= taken for b in stores) \
            or any("md_stream16" in units[j].names for b in touched for j in body.refs[b] - taken):
        return None
    locals_ = {m.group(2) for i in order for m in map(_DEFINITION.match, units[i].lines) if m}
    free = [n for n in _ordered_names(units, order) if n in defined_at and n not in locals_]
    if any(n.startswith("tmp") and n not in defined_at and n not in locals_ for n in names) \
            or any(_assigned_again(n, body) for n in free):
        return None
    return _Member(loop, order, [n for n in _ordered_names(units, order) if n in buffers], free,
                   _canonical(units, order, buffers, locals_, free))


def _assigned_again(name: str, body: _Body) -> bool:
    """A local given a new value after its definition (an accumulator): its value at a later
    place could differ."""
    pattern = re.compile(rf"\b{name}\s*(\[[^]]*\])?\s*[-+*/|&^]?=(?!=)")
    return any(pattern.search(line) for i in body.refs[name] - {body.defined_at[name]}
               for line in body.units[i].lines)


def _ordered_names(units: List[_Unit], order: List[int]) -> List[str]:
    return list(dict.fromkeys(_NAME.findall("\n".join(line for i in order for line in units[i].lines))))


def _canonical(units: List[_Unit], order: List[int], buffers: Set[str], locals_: Set[str], free: List[str]) -> str:
    names = _ordered_names(units, order)
    table = {b: f"mt_b{k}" for k, b in enumerate(n for n in names if n in buffers)}
    table.update({n: f"mt_s{k}" for k, n in enumerate(free)})
    table.update({n: f"mt_l{k}" for k, n in enumerate(n for n in names if n in locals_)})
    loop = units[order[-1]].lines  # definitions come before their readers: the loop is last
    lines = [line for i in order[:-1] for line in units[i].lines] + [
        _HEADER.sub("for (int64_t r0 = 0; r0 < mt_n; r0++) {", line) for line in loop]
    return "\n".join(_NAME.sub(lambda m: table.get(m.group(0), m.group(0)), line) for line in lines)


def multi_tensor_loops(lines: List[str], kernel: str, buffer_types: Dict[str, str], stored: Set[str]
                       ) -> Tuple[List[str], List[str]]:
    """`lines` (the body of scalar-outer kernel `kernel`) with each class of at least MIN_MEMBERS
    equal loops replaced by one call per member of a helper function written once, at the place
    of the class's last loop; and the helpers' source. `buffer_types`: C type per buffer."""
    body = _Body.of(lines)
    units, buffers = body.units, set(buffer_types)
    classes: Dict[Tuple, List[_Member]] = collections.defaultdict(list)
    for i, u in enumerate(units):
        if u.bound is None:
            continue
        m = _member(i, body, buffers)
        if m is None:
            continue
        key = (m.text, tuple((buffer_types[b], b in stored) for b in m.buffers),
               tuple(units[body.defined_at[s]].defines[0] for s in m.free))
        classes[key].append(m)
    replaced: Dict[int, List[str]] = {}
    helpers: List[str] = []
    for key, members in classes.items():
        if len(members) < MIN_MEMBERS or len({i for m in members for i in m.units}) != sum(len(m.units) for m in members):
            continue
        name = f"{kernel}_mt{len(helpers)}"
        helpers.append(_helper(name, members[0], key))
        for m in members:
            for i in m.units:
                replaced[i] = []
        replaced[members[-1].position] = _calls(name, members, key, units)
    out: List[str] = []
    for i, u in enumerate(units):
        out.extend(replaced.get(i, u.lines))
    return out, helpers


def _helper(name: str, member: _Member, key: Tuple) -> str:
    _, slots, scalar_types = key
    params = [f"{'' if written else 'const '}{ctype}* __restrict__ mt_b{k}" for k, (ctype, written) in enumerate(slots)]
    params += [f"{ctype} mt_s{k}" for k, ctype in enumerate(scalar_types)] + ["int64_t mt_n", "int nthreads"]
    body = "\n".join("  " + line for line in member.text.splitlines())
    return f"{HELPER}{name}({', '.join(params)}) {{\n{body}\n}}\n"


def _calls(name: str, members: List[_Member], key: Tuple, units: List[_Unit]) -> List[str]:
    """The table of the members' pointers, values and lengths and the loop calling the helper."""
    _, slots, scalar_types = key
    lines = ["{"]
    for k, (ctype, written) in enumerate(slots):
        lines.append(f"  {'' if written else 'const '}{ctype}* const {name}_b{k}[] = "
                     f"{{{', '.join(m.buffers[k] for m in members)}}};")
    for k, ctype in enumerate(scalar_types):
        lines.append(f"  const {ctype} {name}_s{k}[] = {{{', '.join(m.free[k] for m in members)}}};")
    lines.append(f"  const int64_t {name}_n[] = {{{', '.join(str(units[m.position].bound) for m in members)}}};")
    args = [f"{name}_b{k}[t]" for k in range(len(slots))] + [f"{name}_s{k}[t]" for k in range(len(scalar_types))]
    lines.append(f"  for (int64_t t = 0; t < {len(members)}; t++) "
                 f"{name}({', '.join(args + [f'{name}_n[t]', 'nthreads'])});")
    return lines + ["}"]


_OUTER_HEADER = re.compile(r"for \(int64_t p0 = 0; p0 < (\d+); p0\+\+\) \{")


def _canonical_kernel(source: str, args: Sequence[str]) -> Optional[Tuple[str, Optional[int], List[str]]]:
    """The kernel's code with its buffers named in the order its body first reads or writes them
    (and its parameters in sorted order), its loop length taken out as `md_n` where that length is
    the one loop's bound and appears nowhere else; the length and the buffers in that order."""
    head, body = source.split(") {\n", 1)
    order = [n for n in dict.fromkeys(_NAME.findall(body)) if n in set(args)]
    if len(order) != len(args):
        return None
    table = {a: f"md_a{k}" for k, a in enumerate(order)}
    rename = lambda text: _NAME.sub(lambda m: table.get(m.group(0), m.group(0)), text)  # noqa: E731
    params = sorted(rename(p) for p in head.split("(", 1)[1].split(", "))
    text = rename(body)
    headers = _OUTER_HEADER.findall(text)
    length = None
    if len(headers) == 1 and len(re.findall(rf"\b{headers[0]}\b", text)) == 1:
        text, length = _OUTER_HEADER.sub("for (int64_t p0 = 0; p0 < md_n; p0++) {", text), int(headers[0])
    return ", ".join(params) + ") {\n" + text, length, order


def share_equal_kernels(kernels: Sequence[Tuple[str, str, Sequence[str]]]) -> Dict[str, Tuple[str, List[str]]]:
    """Kernels (name, source, args) of one kernel group that are the same code up to their buffers
    and loop length (one pointwise update per parameter): name -> (the kernel it calls instead,
    the arguments it passes before the size symbols: buffers in the callee's parameter order,
    then the length). The first of each class is rewritten (shared_kernel_source) and calls
    itself; the others need no source."""
    classes: Dict[str, list] = collections.defaultdict(list)
    for name, source, args in kernels:
        if HELPER in source or not source.startswith(f"static void {name}(") or source.count("int nthreads) {") != 1:
            continue
        canonical = _canonical_kernel(source, args)
        if canonical is not None:
            text, length, order = canonical
            classes[text].append((name, length, order, list(args)))
    shared: Dict[str, Tuple[str, List[str]]] = {}
    for members in classes.values():
        if len(members) < MIN_MEMBERS:
            continue
        first, _, first_order, first_args = members[0]
        position = [first_order.index(a) for a in first_args]
        for name, length, order, _ in members:
            shared[name] = (first, [order[k] for k in position] + ([] if length is None else [str(length)]))
    return shared


def shared_kernel_source(source: str, takes_length: bool) -> str:
    """The source of the kernel a class of equal kernels calls (see share_equal_kernels): not
    inlined into each call, so gcc compiles it once; taking its loop length as `md_n`."""
    source = source.replace("static void ", HELPER, 1)
    if not takes_length:
        return source
    return _OUTER_HEADER.sub("for (int64_t p0 = 0; p0 < md_n; p0++) {", source).replace(
        "int nthreads) {", "int64_t md_n, int nthreads) {", 1)
