"""data_prep's import graph: no torch or Lightning (preparing data must not need a deep-learning
stack), and no import cycle among its own modules (a cycle works only while some import hides
inside a function, and breaks when a module is imported first from elsewhere).

Imports are read from the source with ``ast``, those inside functions included, so a lazy
import that would hide a cycle or a torch dependency counts like a module-level one.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import data_prep

PACKAGE = Path(data_prep.__file__).parent
# torch itself, and what imports it: Lightning, torchmetrics, the training package
FORBIDDEN = {"torch", "lightning", "pytorch_lightning", "torchmetrics", "recsys_seq"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imported(name: str, tree: ast.Module) -> set[str]:
    """Every module that ``name``'s source imports, anywhere in it (absolute names)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package upwards
                package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module
            # ``from data_prep import schema`` imports the submodule, ``... import prepare`` a name
            found |= {
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
                for alias in node.names
            }
    return found


IMPORTS = {name: _imported(name, ast.parse(path.read_text())) for name, path in MODULES.items()}


def test_no_torch_or_lightning_import():
    found = {
        (name, target)
        for name, targets in IMPORTS.items()
        for target in targets
        if target.split(".")[0] in FORBIDDEN
    }
    assert not found, f"data_prep modules import the deep-learning stack: {sorted(found)}"


def test_internal_imports_are_acyclic():
    graph = {name: {t for t in targets if t in MODULES} for name, targets in IMPORTS.items()}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        raise AssertionError(f"import cycle in data_prep: {' -> '.join(err.args[1])}") from None


def test_importing_every_module_loads_no_torch():
    """What the source check cannot see: a third-party dependency that imports torch."""
    names = sorted(n for n in MODULES if not n.endswith("__main__"))  # __main__ runs the CLI
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
