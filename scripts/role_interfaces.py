"""Each role's full interface, read from the code: every method an algorithm may override and
every capability it declares, with its signature and the first line of its docstring. The
"Each role's interface" section of docs/architecture.md is this script's output (a test keeps
the two equal).

    python scripts/role_interfaces.py          # print the section
    python scripts/role_interfaces.py --write  # write it into docs/architecture.md
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
START, END = "<!-- roles:interfaces -->", "<!-- /roles:interfaces -->"
ROLES = [("planner", "raysfl.algorithms.roles.planner", "Planner"),
         ("exchange", "raysfl.algorithms.roles.exchange", "Exchange"),
         ("client", "raysfl.algorithms.roles.client", "ClientSide"),
         ("server", "raysfl.algorithms.roles.server", "ServerSide"),
         ("aggregator", "raysfl.algorithms.roles.aggregator", "Aggregator")]


def _first_line(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _signature(name: str, fn) -> str:
    sig = str(inspect.signature(fn)).replace("'", "")
    return f"{name}{sig}"


def render() -> str:
    import importlib

    sys.path.insert(0, str(ROOT))
    out = [START, ""]
    for role, module, cls_name in ROLES:
        cls = getattr(importlib.import_module(module), cls_name)
        path = module.replace(".", "/") + ".py"
        out.append(f"**`{cls_name}`** (`{role}`, `{path.removeprefix('raysfl/')}`): {_first_line(cls)}")
        out.append("")
        for name, value in cls.__dict__.items():
            if name.startswith("_"):
                continue
            if isinstance(value, (classmethod, staticmethod)):
                fn, kind = value.__func__, "classmethod "
            elif isinstance(value, property):
                fn, kind = value.fget, "property "
            elif inspect.isfunction(value):
                fn, kind = value, ""
            elif isinstance(value, (bool, int, str, type(None))) or (isinstance(value, type)):
                shown = value.__name__ if isinstance(value, type) else repr(value)
                note = re.search(rf"^\s*{name}:.*?#\s*(.*)$", inspect.getsource(cls), flags=re.M)
                out.append(f"- `{name} = {shown}`" + (f": {note.group(1).strip()}" if note else ""))
                continue
            else:
                continue
            out.append(f"- {kind}`{_signature(name, fn)}`: {_first_line(fn)}")
        for base in cls.__mro__[1:-1]:  # what it inherits (the Recorder's metrics channel)
            for name, fn in base.__dict__.items():
                if inspect.isfunction(fn) and not name.startswith("_") and name not in cls.__dict__:
                    out.append(f"- `{_signature(name, fn)}` (from `{base.__name__}`): {_first_line(fn)}")
        out.append("")
    out.append(END)
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the section into docs/architecture.md")
    ns = ap.parse_args()
    text = render()
    if not ns.write:
        print(text)
        return
    doc = DOC.read_text()
    if START in doc:
        a, b = doc.index(START), doc.index(END) + len(END)
        doc = doc[:a] + text + doc[b:]
    else:
        raise SystemExit(f"{DOC} has no {START} marker: put one where the section goes")
    DOC.write_text(doc)


if __name__ == "__main__":
    main()
