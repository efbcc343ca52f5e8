"""The import graph of raysfl/ keeps its layers (docs/architecture.md): no import runs back up
them and none goes round in a circle, whether it sits at the top of a module or inside a
function (an import a function defers still ties the two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "raysfl"

# bottom first; a module may import its own layer and those below it
LAYERS = [
    ("errors", ["raysfl.errors"]),
    ("core", ["raysfl.transport", "raysfl.aggregation", "raysfl.angles", "raysfl.matching", "raysfl.optim",
              "raysfl.evaluation", "raysfl.devices", "raysfl.simclock", "raysfl.server_steps", "raysfl.models",
              "raysfl.data", "raysfl.config", "raysfl.run_registry", "raysfl.faults", "raysfl.checkpoint",
              "raysfl.objective",
              "raysfl.callbacks", "raysfl.metrics", "raysfl.trackers",
              "raysfl.paper_tables",  # what a paper's table is: data the algorithms' packages declare
              "raysfl.run_key", "raysfl.state_shapes",
              "raysfl.whole_files",  # a file written whole: temporary name, then rename
              "raysfl.own_states", "raysfl.own_state_files",  # the clients' kept states, in memory and files
              "raysfl.user_code", "raysfl.user_metrics", "raysfl.schedules",
              "raysfl.trained"]),  # a run's trained global model, from its checkpoint  # your code by name, your metrics, lr
    ("algorithms", ["raysfl.algorithms"]),
    ("runtime", ["raysfl.runtime"]),
    ("configuration", ["raysfl.flags", "raysfl.resolve", "raysfl.api", "raysfl.warm_start"]),
    ("comparisons", ["raysfl.compare", "raysfl.plots"]),
    ("tuning", ["raysfl.tuning"]),  # the search every row of a table gets, and `raysfl tune`
    ("tables", ["raysfl.reproduce"]),
    ("entry points", ["raysfl.cli", "raysfl.__main__"]),
]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def layer_of(mod: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(mod == p or mod.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{mod} is in no layer of tests/test_layers.py: place it")


def imports(path: Path, mod: str, known: set[str]) -> set[str]:
    """The raysfl modules ``path`` imports (top level or inside functions)."""
    out = set()
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for n in names:
            while n and n not in known:  # a name imported from a module: the module itself
                n = n.rpartition(".")[0]
            if n and n.startswith("raysfl") and n != mod and n != "raysfl":
                out.add(n)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports(p, m, known) for m, p in mods.items() if m != "raysfl"}


def test_no_import_runs_back_up_the_layers():
    up = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
          for m, targets in graph().items() for t in sorted(targets) if layer_of(t) > layer_of(m)]
    assert not up, "imports that run back up the layers:\n" + "\n".join(up)


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_modules_import_each_other_in_a_circle():
    g = graph()
    # a package's __init__ that only hands its modules' names on is not a circle with them
    for m in list(g):
        if (PKG.parent / (m.replace(".", "/") + "/__init__.py")).exists():
            g[m] = {t for t in g[m] if not t.startswith(m + ".")}
    cycles = _cycles(g)
    assert not cycles, "modules that import each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def room(mod: str) -> str:
    """The room a module sits in: its top-level module or package under raysfl/."""
    return ".".join(mod.split(".")[:2])


def test_no_two_packages_import_each_other_in_a_circle():
    """Folders too: ``algorithms/*/tables.py`` importing ``reproduce/`` while ``reproduce/``
    imports ``algorithms/`` is a circle of packages although no two modules make one."""
    rooms: dict[str, set[str]] = {}
    for m, targets in graph().items():
        rooms.setdefault(room(m), set()).update(room(t) for t in targets if room(t) != room(m))
    cycles = _cycles(rooms)
    assert not cycles, "packages that import each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checks_see_a_circle_and_an_upward_import():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("raysfl.algorithms.roles.server") < layer_of("raysfl.runtime.client_actor")
