"""The import graph: layers point one way and nothing imports in a circle.

* data_prep imports no torch or Lightning (preparing data must not need a deep-learning
  stack) and of recsys_seq only the data package of its configs (``recsys_seq.conf``, found by
  name: no import statement, and the package's ``__init__`` imports nothing).
* recsys_seq's layers: data -> models -> (metrics, below models), with checkpoint, serving,
  configs, bench and the commands on top; a lower layer never imports a higher one.
* No cycle among either package's modules (a cycle works only while some import hides inside
  a function, and breaks when a module is imported first from elsewhere).

Imports are read from the source with ``ast``, those inside functions included, so a lazy
import that would hide a cycle or a dependency counts like a module-level one.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("data_prep", "recsys_seq")
# torch itself, and what imports it: Lightning, torchmetrics, the training package
DEEP_LEARNING = {"torch", "lightning", "pytorch_lightning", "torchmetrics", "recsys_seq"}
# what data_prep may load of recsys_seq: the package of YAML files and the package above it
CONFIG_PACKAGES = {"recsys_seq", "recsys_seq.conf"}
# recsys_seq layers, lowest first: a module may import its own layer and those below
LAYERS = (
    {"conf", "options", "optimized_metric", "metrics", "targets"},
    {"data"},
    {"models"},
    {"callbacks", "checkpoint", "serving", "configs", "report"},
    {"recommender"},
    {"bench", "cli", "tune"},
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
}


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


def _layer(name: str) -> int:
    """The package itself (its ``__init__``) sits on top."""
    part = name.split(".")[1] if "." in name else ""
    return next((i for i, layer in enumerate(LAYERS) if part in layer), len(LAYERS))


def test_every_recsys_seq_module_has_a_layer():
    unplaced = sorted(
        name
        for name in MODULES
        if name.startswith("recsys_seq.") and not any(name.split(".")[1] in l for l in LAYERS)
    )
    assert not unplaced, f"place these in LAYERS: {unplaced}"


def test_data_prep_imports_no_deep_learning_stack():
    found = {
        (name, target)
        for name, targets in IMPORTS.items()
        if name.startswith("data_prep")
        for target in targets
        if target.split(".")[0] in DEEP_LEARNING
    }
    assert not found, f"data_prep modules import the deep-learning stack: {sorted(found)}"


def test_recsys_seq_layers_point_one_way():
    upward = {
        (name, target)
        for name, targets in IMPORTS.items()
        if name.startswith("recsys_seq.")
        for target in targets
        if target.startswith("recsys_seq.") and _layer(target) > _layer(name)
    }
    assert not upward, f"lower layers import higher ones: {sorted(upward)}"


@pytest.mark.parametrize("package", PACKAGES)
def test_internal_imports_are_acyclic(package):
    graph = {
        name: {t for t in targets if t in MODULES and t.startswith(package) and t != name}
        for name, targets in IMPORTS.items()
        if name.startswith(package)
    }
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        raise AssertionError(f"import cycle in {package}: {' -> '.join(err.args[1])}") from None


def test_importing_every_data_prep_module_loads_no_torch():
    """What the source check cannot see: a third-party dependency that imports torch."""
    names = sorted(n for n in MODULES if n.startswith("data_prep") and not n.endswith("__main__"))
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(DEEP_LEARNING)!r}\n"
        f"    and m not in {sorted(CONFIG_PACKAGES)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
