"""minidynamo's import graph: no import circle of more than 4 modules, none inside variables/, and
no module importing from a layer above its own (API -> callback -> translator -> graph -> trackers
-> backends -> codegen, with guards, sources, bytecode, config and logs below all of them).

Every import counts, function-local ones too; imports under `if TYPE_CHECKING:` do not, and
neither does the C extension `minidynamo._C` (a leaf). A new module must be given a layer in
LAYERS: the test fails on a module it cannot place."""
from __future__ import annotations

import ast
import pathlib
import sys
from typing import Dict, List, Set

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "minidynamo"
MAX_CIRCLE = 4

# Highest layer first. A module may import its own layer and those after it. An entry names a
# module or a package (covering all its modules); the longest matching entry places a module.
LAYERS: List[List[str]] = [
    # the API: what users call
    ["minidynamo", "minidynamo.__main__", "minidynamo.compile_api", "minidynamo.eval_frame", "minidynamo.explain",
     "minidynamo.report", "minidynamo.verify", "minidynamo.testing", "minidynamo.demo"],
    # the frame callback the C hook calls on a cache miss
    ["minidynamo.convert_frame"],
    # the bytecode translator
    ["minidynamo.symbolic_convert", "minidynamo.pattern_matching"],
    # the graph under construction, the side effects replayed after it and the transformed code
    # emitted around it; they make the trackers of graph inputs and results
    ["minidynamo.output_graph", "minidynamo.side_effects", "minidynamo.frame_codegen"],
    # the trackers (symbolic values); they reach the graph only through the translator they are handed
    ["minidynamo.variables"],
    ["minidynamo.backends"],
    ["minidynamo.codegen"],
    # below all of them
    ["minidynamo.guards", "minidynamo.guard_set", "minidynamo.module_lookup", "minidynamo.source",
     "minidynamo.dynamic_shapes", "minidynamo.global_state", "minidynamo.bytecode_transformation",
     "minidynamo.bytecode_analysis", "minidynamo.pycodegen", "minidynamo.resume_execution", "minidynamo.pyversion",
     "minidynamo.skip_policy", "minidynamo.frame_hook", "minidynamo.counters", "minidynamo.config",
     "minidynamo.logs", "minidynamo.perf", "minidynamo.exc", "minidynamo.polyfills"],
]


def _modules() -> Dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> Set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    return skipped


def _imported(module: str, path: pathlib.Path, modules: Dict[str, pathlib.Path]) -> Set[str]:
    """The modules of the package that `module` imports (a name imported from a package that is
    not itself a module counts as an import of the package)."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base_parts = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join(base_parts + ([node.module] if node.module else []))
            named = [f"{base}.{alias.name}" for alias in node.names]
            targets = [t for t in named if t in modules or t == "minidynamo._C"] or [base]
        else:
            continue
        for target in targets:
            if target == "minidynamo._C":
                continue
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module and target.startswith("minidynamo"):
                found.add(target)
    return found


def import_graph() -> Dict[str, Set[str]]:
    modules = _modules()
    return {module: _imported(module, path, modules) for module, path in modules.items()}


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def layer_of(module: str) -> int:
    """The layer's depth (0 is the API), from the longest entry naming the module or a package above it."""
    best, depth = "", None
    for i, entries in enumerate(LAYERS):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and len(entry) > len(best):
                best, depth = entry, i
    if depth is None:
        pytest.fail(f"{module} has no layer: add it to LAYERS in {pathlib.Path(__file__).name}")
    return depth


@pytest.fixture(scope="module")
def graph() -> Dict[str, Set[str]]:
    return import_graph()


def test_the_graph_is_read(graph):
    assert "minidynamo.variables.builder" in graph["minidynamo.symbolic_convert"] | graph["minidynamo.variables"]
    assert "minidynamo.source" in graph["minidynamo.variables.base"]


def test_no_import_circle_of_more_than_four_modules(graph):
    big = [c for c in circles(graph) if len(c) > MAX_CIRCLE]
    assert not big, f"import circles of more than {MAX_CIRCLE} modules: {big}"


def test_no_import_circle_inside_variables(graph):
    inside = {m: {t for t in targets if t.startswith("minidynamo.variables.")}
              for m, targets in graph.items() if m.startswith("minidynamo.variables.")}
    assert not circles(inside), f"import circles inside variables/: {circles(inside)}"


def test_variables_modules_import_only_those_listed_before_them(graph):
    """variables/__init__.py lists its modules lowest first; each imports only modules listed above it."""
    init = ast.parse((PACKAGE / "variables" / "__init__.py").read_text())
    order = [f"minidynamo.variables.{node.module}" for node in init.body
             if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module]
    assert sorted(order) == sorted(m for m in graph if m.startswith("minidynamo.variables.")), order
    upward = [f"{module} imports {target}" for i, module in enumerate(order) for target in sorted(graph[module])
              if target in order and order.index(target) > i]
    assert not upward, "variables/ modules importing one listed after them in variables/__init__.py:\n" + "\n".join(upward)


def test_imports_point_down(graph):
    upward = [f"{module} imports {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
              if layer_of(target) < layer_of(module)]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_nothing_below_the_api_imports_the_package():
    """`from . import _C` reaches the C extension; any other name taken from the package `__init__`
    would make a low module depend on the whole API."""
    modules = _modules()
    offenders = [m for m, path in modules.items()
                 if layer_of(m) > 0 and "minidynamo" in _imported(m, path, modules)]
    assert not offenders, f"modules below the API importing the package: {offenders}"
