"""Every config option whose value becomes a callable takes only a class of a fixed table.

The options are found, not listed: each command's real config (Hydra's node included) is
composed and walked for every ``_target_`` and every class name of Hydra's logging set-up, so
an option added later is covered by these tests without touching them. For each one, the
project's default is accepted, and hostile names (a dotted path through an allowed module to
``os.open``, ``os.system``, ``builtins.eval``, a submodule or a non-class attribute of an
allowed module, an interpolation) are refused before anything is imported or called: a
sentinel file that ``os.open(path, O_WRONLY | O_TRUNC)`` would empty keeps its bytes.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf

from recsys_seq import configs
from recsys_seq.core import targets
from recsys_seq.core.objects import find_class, make
from recsys_seq.core.options import OptionError
from recsys_seq.tune.tuner import make_sampler
from recsys_seq.workflows import runs
from tests.helpers import (
    SCRIPTS,
    KillAtStep,
    callback_plugin,
    error_problems,
    hydra_main,
    run_cli,
)

ROOT = Path(__file__).resolve().parents[1]
BASES = {
    ("callbacks", "*"): Callback,
    ("logger", "*"): Logger,
    ("tune", "sampler"): optuna.samplers.BaseSampler,
}
TRUNCATE = os.O_WRONLY | os.O_TRUNC
SENTINEL = b"the user's own file\n"


def config_name(command: str) -> str:
    return inspect.getclosurevars(hydra_main(command)).nonlocals["config_name"]


@functools.cache
def composed(command: str) -> DictConfig:
    """The command's config as Hydra composes it with no overrides, Hydra's node included."""
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        return compose(config_name(command), return_hydra_config=True)


def callable_options(command: str) -> list[tuple[str, str]]:
    """``(option, default)`` for every key of the command's composed config whose value is
    imported and called: each ``_target_``, and each logging ``class`` / ``()``."""
    found = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                keys = (*path, str(key))
                logging = any(keys[:2] == section for section in targets.LOGGING)
                if key == "_target_" or (logging and key in targets.LOGGING_KEYS):
                    found.append((".".join(keys), value))
                walk(value, keys)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, (*path, str(index)))

    walk(OmegaConf.to_container(composed(command), resolve=False), ())
    return found


OPTIONS = [
    (command, *option) for command in sorted(SCRIPTS) for option in callable_options(command)
]
IDS = [f"{command}:{option}" for command, option, _ in OPTIONS]


def hostile_names(default: str) -> list[str]:
    """Names that a prefix check would let through, and plain ones that it would not."""
    module, _, name = default.rpartition(".")
    defined_in = getattr(importlib.import_module(module), name).__module__
    return [
        "optuna.samplers._qmc.threading._os.open",
        "os.open",
        "os.system",
        "builtins.eval",
        "lightning.pytorch.callbacks.os.system",
        f"{module}.os.open",  # through an allowed module
        f"{module}.sys",  # a non-class attribute of an allowed module
        f"{default}.__init__",
        f"{defined_in}.{name}x",  # a submodule of an allowed module
        "${oc.env:HOME}",
    ]


@pytest.fixture
def sentinel(tmp_path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_bytes(SENTINEL)
    return path


def test_every_command_has_callable_options_and_the_issue_ones_are_found():
    found = {option for _, option, _ in OPTIONS}
    assert {"tune.sampler._target_", "hydra.launcher._target_", "hydra.sweeper._target_"} <= found
    assert {"callbacks.model_checkpoint._target_", "logger.csv._target_"} <= found
    assert "hydra.callbacks.run_folder._target_" in found
    assert "hydra.job_logging.handlers.console.class" in found
    assert {command for command, _, _ in OPTIONS} == set(SCRIPTS)


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_each_commands_own_config_passes(command):
    assert targets.command_line_problems(hydra_main(command), []) == []


@pytest.mark.parametrize(("command", "option", "default"), OPTIONS, ids=IDS)
def test_the_default_is_in_the_table(command, option, default):
    keys = tuple(option.split("."))
    if keys[-1] == "_target_":
        assert targets.target_refusal(keys[:-1], default) is None
    else:
        assert default in targets.LOGGING_CLASSES


@pytest.mark.parametrize(("command", "option", "default"), OPTIONS, ids=IDS)
def test_hostile_names_are_refused_before_hydra(command, option, default, sentinel):
    """The issue's name through the command line's own composition, every hostile name
    through the check of the composed config (one composition per command)."""
    issue = f"{option}=optuna.samplers._qmc.threading._os.open"
    problems = targets.command_line_problems(hydra_main(command), [issue])
    assert len(problems) == 1 and problems[0].startswith(option), problems
    for name in hostile_names(default):
        cfg = composed(command).copy()
        OmegaConf.update(cfg, option, name, merge=False)
        problems = targets.config_problems(cfg)
        assert len(problems) == 1 and problems[0].startswith(option), (name, problems)
    assert sentinel.read_bytes() == SENTINEL


def test_every_table_entry_is_a_class_of_what_its_option_takes():
    for slot, base in BASES.items():
        option = ".".join(slot).replace("*", "name")
        for name in targets.SLOTS[slot]:
            assert issubclass(find_class(option, name, base), base)


def test_the_default_objects_are_made():
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        cfg = compose("tune", overrides=["paths.output_dir=."])
    callbacks = runs.instantiate_group(cfg, "callbacks")
    assert len(callbacks) == len(cfg.callbacks) and all(isinstance(c, Callback) for c in callbacks)
    assert all(isinstance(logger, Logger) for logger in runs.instantiate_group(cfg, "logger"))
    assert isinstance(make_sampler(configs.plain(cfg.tune.sampler), 0), optuna.samplers.TPESampler)


@pytest.mark.parametrize("slot", list(BASES), ids=".".join)
def test_hostile_names_are_refused_where_objects_are_made(slot, sentinel):
    option = ".".join(slot).replace("*", "name")
    default = targets.SLOTS[slot][-1]
    for name in hostile_names(default):
        values = {"_target_": name, "path": str(sentinel), "flags": TRUNCATE}
        with pytest.raises(OptionError, match=rf"^{option}\._target_"):
            make(option, values, BASES[slot])
    assert sentinel.read_bytes() == SENTINEL


def test_an_entry_point_that_is_not_what_the_option_takes_is_refused(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(callback_plugin(tmp_path, Path)))
    with pytest.raises(OptionError, match=r"names pathlib\.Path, which is not a .*Callback"):
        find_class("callbacks.name", "pathlib.Path", Callback)


def test_an_unknown_key_names_the_option():
    values = {"_target_": "optuna.samplers.RandomSampler", "sed": 1}
    with pytest.raises(OptionError, match=r"tune\.sampler\.sed.*RandomSampler takes"):
        make("tune.sampler", values, optuna.samplers.BaseSampler)


@pytest.mark.parametrize(
    "override",
    [
        "+tune.sampler._partial_=true",
        "+callbacks.rng_state._args_=[1]",
        "+model._target_=os.system",
        "+trainer.strategy._target_=os.system",
        "hydra.job_logging.handlers.console.stream=ext://os.system",
    ],
)
def test_instantiation_keys_anywhere_else_are_refused(override):
    problems = targets.command_line_problems(hydra_main("recsys-tune"), [override])
    assert len(problems) == 1 and problems[0].startswith(override.lstrip("+").split("=")[0])


def test_a_logging_factory_in_a_config_file_is_refused():
    cfg = {"hydra": {"job_logging": {"formatters": {"evil": {"()": "os.system"}}}}}
    assert targets.config_problems(cfg) == [
        f"hydra.job_logging.formatters.evil.() must be one of "
        f"{', '.join(targets.LOGGING_CLASSES)}; got 'os.system'."
    ]


def test_every_value_of_a_sweep_is_checked():
    sweep = "callbacks.progress_bar._target_=lightning.pytorch.callbacks.RichProgressBar,os.system"
    problems = targets.command_line_problems(hydra_main("recsys-train"), ["-m", sweep])
    assert problems == [
        f"callbacks.progress_bar._target_ must be one of "
        f"{', '.join(targets.allowed(('callbacks', '*')))}; got 'os.system'."
    ]


def test_hydras_pickled_rerun_is_refused(tmp_path):
    problems = targets.command_line_problems(
        hydra_main("recsys-train"), ["--experimental-rerun", str(tmp_path / "config.pickle")]
    )
    assert problems and problems[0].startswith(targets.RERUN_FLAG)


def test_an_installed_packages_callback_is_named_by_its_entry_point(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(callback_plugin(tmp_path, KillAtStep)))
    name = f"{KillAtStep.__module__}.{KillAtStep.__qualname__}"  # as its entry point names it
    assert find_class("callbacks.kill", name, Callback) is KillAtStep
    assert name in targets.allowed(("callbacks", "*"))


# ------------------------------------------------------------------ the real command lines

COMMAND_LINES = [
    (
        "recsys-tune",
        [
            "tune.sampler._target_=optuna.samplers._qmc.threading._os.open",
            "+tune.sampler.path={sentinel}",
            f"+tune.sampler.flags={TRUNCATE}",
        ],
        "tune.sampler._target_",
    ),
    (
        "recsys-train",
        [
            "hydra.callbacks.run_folder._target_=os.open",
            "+hydra.callbacks.run_folder.path={sentinel}",
            f"+hydra.callbacks.run_folder.flags={TRUNCATE}",
        ],
        "hydra.callbacks.run_folder._target_",
    ),
    (
        "recsys-prep",
        [
            "-m",
            "hydra.launcher._target_=builtins.exec",
            "+hydra.launcher.source=\"open('{sentinel}', 'w').close()\"",
        ],
        "hydra.launcher._target_",
    ),
    (
        "recsys-eval",
        [
            "hydra.job_logging.handlers.console.class=os.open",
            "+hydra.job_logging.handlers.console.path={sentinel}",
            f"+hydra.job_logging.handlers.console.flags={TRUNCATE}",
        ],
        "hydra.job_logging.handlers.console.class",
    ),
]


@pytest.mark.parametrize(
    ("command", "args", "option"), COMMAND_LINES, ids=[c[0] for c in COMMAND_LINES]
)
def test_the_console_scripts_refuse_and_call_nothing(tmp_path, command, args, option):
    work = tmp_path / "work"
    work.mkdir()
    sentinel = tmp_path / "notes.txt"
    sentinel.write_bytes(SENTINEL)
    proc = run_cli(command, [a.format(sentinel=sentinel) for a in args], work)
    assert error_problems(command, proc, [option]) == []
    assert sentinel.read_bytes() == SENTINEL
    assert list(work.iterdir()) == []  # no run folder, no study, no log
