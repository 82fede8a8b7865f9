"""The import graph: rooms stand on the ones below them and nothing imports in a circle.

The floors, lowest first: the torch-free foundation (``recsys_seq.core`` and the configs'
package ``recsys_seq.conf``), ``data_prep`` (Polars), ``recsys_seq.data`` with the metrics,
``recsys_seq.models``, the pieces over a model (checkpoint, an exported program, serving, the
Python API, the report), the workflows (train, evaluate, recommend, export, tune,
benchmarks) and the thin ``cli`` on top. A module may import its own floor and those below,
never one above.

* The foundation and data_prep import no torch or Lightning: preparing data, ``--help`` and
  refusing a wrong option must not need a deep-learning stack.
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
# torch itself, and what imports it
DEEP_LEARNING = {"torch", "lightning", "pytorch_lightning", "torchmetrics"}
FOUNDATION = ("recsys_seq.core", "recsys_seq.conf")
# module-name prefixes of each floor, lowest first
FLOORS = (
    FOUNDATION,
    ("data_prep",),
    ("recsys_seq.data", "recsys_seq.metrics", "recsys_seq.optimized_metric"),
    ("recsys_seq.models",),
    (
        "recsys_seq.callbacks",
        "recsys_seq.checkpoint",
        "recsys_seq.exported",
        "recsys_seq.exported_contract",
        "recsys_seq.exported_scorers",
        "recsys_seq.serving",
        "recsys_seq.configs",
        "recsys_seq.report",
        "recsys_seq.recommender",
    ),
    ("recsys_seq.workflows", "recsys_seq.tune", "recsys_seq.bench"),
    ("recsys_seq.cli",),
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


def _in(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _floor(name: str) -> int:
    """The package itself (its lazy ``__init__``) sits on top."""
    return next(
        (
            i
            for i, floor in enumerate(FLOORS)
            for p in floor
            if name == p or name.startswith(p + ".")
        ),
        len(FLOORS),
    )


def test_every_module_has_a_floor():
    unplaced = sorted(
        name for name in MODULES if name != "recsys_seq" and _floor(name) == len(FLOORS)
    )
    assert not unplaced, f"place these in FLOORS: {unplaced}"


@pytest.mark.parametrize("room", ["data_prep", *FOUNDATION])
def test_foundation_and_prep_import_no_deep_learning_stack(room):
    found = {
        (name, target)
        for name, targets in IMPORTS.items()
        if _in(name, room)
        for target in targets
        if target.split(".")[0] in DEEP_LEARNING
    }
    assert not found, f"{room} modules import the deep-learning stack: {sorted(found)}"


def test_floors_point_one_way():
    upward = {
        (name, target)
        for name, targets in IMPORTS.items()
        for target in targets
        if target.split(".")[0] in PACKAGES and _floor(target) > _floor(name)
    }
    assert not upward, f"lower floors import higher ones: {sorted(upward)}"


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


def test_importing_the_foundation_and_data_prep_loads_no_torch():
    """What the source check cannot see: a third-party dependency that imports torch."""
    rooms = ("data_prep", *FOUNDATION)
    names = sorted(
        n for n in MODULES if any(_in(n, r) for r in rooms) and not n.endswith("__main__")
    )
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(DEEP_LEARNING)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


# torch and Lightning made unimportable: any attempt to import them fails the command
WITHOUT_TORCH = """
import importlib.abc, runpy, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} imported before the options were checked")
sys.meta_path.insert(0, NoTorch())
sys.argv = [{command!r}, *{arguments!r}]
runpy.run_module({module!r}, run_name="__main__")
"""

COMMANDS = {
    "recsys-train": "recsys_seq.cli.train",
    "recsys-eval": "recsys_seq.cli.evaluate",
    "recsys-recommend": "recsys_seq.cli.recommend",
    "recsys-export": "recsys_seq.cli.export",
    "recsys-tune": "recsys_seq.cli.tune",
}  # data_prep (recsys-prep) imports no torch at all: see above


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "arguments, status",
    [
        (["--help"], 0),
        (["trainer.max_epoch=1"], 2),  # a key that does not exist
        (["model=no_such_model"], 2),  # a config choice that does not exist
        (["+callbacks.x._target_=os.system"], 2),  # a class outside the table
    ],
    ids=["help", "unknown_key", "unknown_choice", "foreign_class"],
)
def test_help_and_refused_options_need_no_torch(tmp_path, command, arguments, status):
    code = WITHOUT_TORCH.format(
        blocked=sorted(DEEP_LEARNING),
        command=command,
        arguments=arguments,
        module=COMMANDS[command],
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == status, done.stderr[-2000:]
    assert "imported before the options were checked" not in done.stdout + done.stderr
    if status:
        assert f"{command}: error:" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written for a refused command
