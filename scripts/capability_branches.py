"""How often the runtime branches on what an algorithm can do: every place in ``raysfl/runtime/``
that reads one of the algorithms' declared capabilities (the roles' flags, whether there is an
exchange, the planner's overridden methods); calling a role's method is not counted. Fewer is better: a capability the runtime branches on is a behaviour that lives in the
runtime instead of the role that has it.

    python scripts/capability_branches.py            # this checkout
    python scripts/capability_branches.py --list     # ... and each place
    python scripts/capability_branches.py --root DIR # another checkout (a git worktree of a revision)
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

# the roles' declared capabilities (raysfl/algorithms/roles/*, algorithms/spec.py), past and present
CAPABILITIES = {"exchange", "runs_actors", "server_side", "sequential", "real_deadlines", "uses_cut",
                "measures_clients", "plan_steps", "plans_own_steps", "uploads_model", "survives_server_loss",
                "keeps_optimizer", "late_updates", "stacked_copies", "regularizer", "has_regularizer"}


def branches(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, capability) of every read of a capability in ``root``/raysfl/runtime: in a
    condition, or kept in a variable or a field to branch on later. Calling through the exchange
    (``exchange.steps(...)``, ``exchange.turns(...)``) is not a branch: the exchange decides."""
    out = []
    for path in sorted((root / "raysfl" / "runtime").glob("*.py")):
        tree = ast.parse(path.read_text())
        parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr in CAPABILITIES and isinstance(node.ctx, ast.Load)):
                continue
            up = parent.get(node)
            if isinstance(up, ast.Call) and up.func is node:
                continue  # a method of that name, called (planner.plan_steps(...)): the role decides
            if node.attr == "exchange" and isinstance(up, ast.Attribute) and up.attr not in CAPABILITIES:
                continue  # a method of the exchange, called
            out.append((str(path.relative_to(root)), node.lineno, node.attr))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="the checkout to read")
    ap.add_argument("--list", action="store_true", help="print each place")
    ns = ap.parse_args()
    found = branches(Path(ns.root))
    if ns.list:
        for f, line, what in found:
            print(f"{f}:{line}: {what}")
    names = sorted({what for _, _, what in found})
    print(f"{len(found)} places read {len(names)} capabilities ({', '.join(names)})")


if __name__ == "__main__":
    main()
