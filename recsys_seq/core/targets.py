"""The classes a config may name, and the check that a composed config names no others.

A ``_target_`` in a config is a class name looked up in :data:`SLOTS`, a fixed table of the
classes each option may name (the project's own, Hydra's launchers and sweeper, and the public
classes of Lightning and Optuna that such an option takes); a dotted path is never imported
to find out what it is. The same holds for the class names of Hydra's logging set-up
(:data:`LOGGING_CLASSES`), which ``logging.config`` would otherwise import.

Commands check the whole composed config, Hydra's own node included, before Hydra starts
(:func:`command_line_problems`): Hydra instantiates its launcher, sweeper and callbacks itself,
before any of the project's code runs. What the project makes from the other options it looks
up again at the point of use (:mod:`recsys_seq.core.objects`).

Lightning callbacks from an installed package are named by an entry point of the group
``recsys_seq.callbacks`` (its value, ``package.module:Class``, is the ``_target_`` to write)::

    [project.entry-points."recsys_seq.callbacks"]
    my_callback = "my_package.callbacks:MyCallback"
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from hydra._internal.hydra import Hydra
from hydra._internal.utils import (
    create_automatic_config_search_path,
    detect_calling_file_or_module_from_task_function,
    detect_task_name,
    get_args_parser,
)
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from recsys_seq.core.typos import nearest, unknown_names

Keys = tuple[str, ...]  # an option's keys from the top of the config; "*" = any one name

HYDRA_LAUNCHERS = (
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
)
HYDRA_SWEEPERS = ("hydra._internal.core_plugins.basic_sweeper.BasicSweeper",)
HYDRA_CALLBACKS = (
    "recsys_seq.cli.run_folder.RunFolderGuard",
    "recsys_seq.cli.sweep_summary.SweepSummary",
)
PROJECT_CALLBACKS = (
    "recsys_seq.callbacks.EpochLog",
    "recsys_seq.callbacks.NetworkSummary",
    "recsys_seq.callbacks.RNGStateCheckpoint",
    "recsys_seq.callbacks.StopOnDivergence",
    "recsys_seq.callbacks.WeightAverage",
)
# lightning.pytorch.callbacks.__all__ less the bases and LambdaCallback (its options are code)
LIGHTNING_CALLBACKS = tuple(
    f"lightning.pytorch.callbacks.{name}"
    for name in (
        "BackboneFinetuning",
        "BatchSizeFinder",
        "DeviceStatsMonitor",
        "EarlyStopping",
        "EMAWeightAveraging",
        "GradientAccumulationScheduler",
        "LearningRateFinder",
        "LearningRateMonitor",
        "ModelCheckpoint",
        "ModelPruning",
        "ModelSummary",
        "OnExceptionCheckpoint",
        "RichModelSummary",
        "RichProgressBar",
        "SpikeDetection",
        "StochasticWeightAveraging",
        "ThroughputMonitor",
        "Timer",
        "TQDMProgressBar",
        "WeightAveraging",
    )
)
LIGHTNING_LOGGERS = tuple(
    f"lightning.pytorch.loggers.{name}"
    for name in ("CometLogger", "CSVLogger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger")
)
# optuna.samplers.__all__ less the bases and PartialFixedSampler (it wraps a sampler object)
OPTUNA_SAMPLERS = tuple(
    f"optuna.samplers.{name}"
    for name in (
        "BruteForceSampler",
        "CmaEsSampler",
        "GPSampler",
        "GridSampler",
        "NSGAIIISampler",
        "NSGAIISampler",
        "QMCSampler",
        "RandomSampler",
        "TPESampler",
    )
)

SLOTS: dict[Keys, tuple[str, ...]] = {
    ("hydra", "launcher"): HYDRA_LAUNCHERS,
    ("hydra", "sweeper"): HYDRA_SWEEPERS,
    ("hydra", "callbacks", "*"): HYDRA_CALLBACKS,
    ("callbacks", "*"): PROJECT_CALLBACKS + LIGHTNING_CALLBACKS,
    ("logger", "*"): LIGHTNING_LOGGERS,
    ("tune", "sampler"): OPTUNA_SAMPLERS,
}
"""Every option whose ``_target_`` is made into an object, and the class names it takes."""
ENTRY_POINT_GROUPS: dict[Keys, str] = {("callbacks", "*"): "recsys_seq.callbacks"}

LOGGING = (("hydra", "job_logging"), ("hydra", "hydra_logging"))  # logging.config dictionaries
LOGGING_KEYS = ("class", "()")  # the keys whose value logging.config imports and calls
LOGGING_CLASSES = (
    "logging.FileHandler",
    "logging.Formatter",
    "logging.NullHandler",
    "logging.StreamHandler",
    "logging.handlers.RotatingFileHandler",
    "logging.handlers.TimedRotatingFileHandler",
    "logging.handlers.WatchedFileHandler",
    "colorlog.ColoredFormatter",  # hydra/job_logging=colorlog (hydra-colorlog)
)
LOGGING_OBJECTS = ("ext://sys.stderr", "ext://sys.stdout")  # ext:// imports what it names
HYDRA_CALL_KEYS = ("_args_", "_partial_", "_recursive_", "_convert_")  # instantiate's own
RERUN_FLAG = "--experimental-rerun"  # Hydra unpickles the file it names


def slot_of(path: Keys) -> Keys | None:
    """The :data:`SLOTS` key that ``path`` (the keys of a node holding ``_target_``) fills."""
    return next((slot for slot in SLOTS if _fills(path, slot)), None)


def _fills(path: Keys, slot: Keys) -> bool:
    return len(path) == len(slot) and all(s in ("*", p) for s, p in zip(slot, path, strict=True))


def entry_point(slot: Keys, target: str) -> EntryPoint | None:
    """The installed entry point whose value ``target`` spells, for a slot that has a group."""
    group = ENTRY_POINT_GROUPS.get(slot)
    found = entry_points(group=group) if group else ()
    return next((e for e in found if _spelled(e) == target), None)


def allowed(slot: Keys) -> list[str]:
    """The class names ``slot`` takes: the fixed table's, then the installed entry points'."""
    group = ENTRY_POINT_GROUPS.get(slot)
    plugins = sorted(_spelled(e) for e in entry_points(group=group)) if group else []
    return [*SLOTS[slot], *plugins]


def _spelled(entry: EntryPoint) -> str:
    return entry.value.replace(":", ".")


def target_refusal(path: Keys, target: Any) -> str | None:
    """Why ``target`` may not be the ``_target_`` at ``path``; None when it may."""
    option = ".".join(path + ("_target_",))
    slot = slot_of(path)
    if slot is None:
        pattern = ", ".join(".".join(s + ("_target_",)).replace("*", "<name>") for s in SLOTS)
        return f"{option}: no option here takes a class name (got {target!r}); {pattern} do."
    names = allowed(slot)
    if target not in names:
        return f"{option} must be one of {', '.join(names)}; got {target!r}."
    return None


def config_problems(cfg: DictConfig | Mapping[str, Any]) -> list[str]:
    """Every ``_target_``, Hydra instantiation key and logging class name in ``cfg`` (Hydra's
    node included) that is not in the fixed tables, as one message each. Interpolations are
    read as written, never resolved: a class name must be written out."""
    plain = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    return list(_walk(plain, ()))


def _walk(node: Any, path: Keys) -> Iterator[str]:
    if isinstance(node, Mapping):
        if "_target_" in node:
            refusal = target_refusal(path, node["_target_"])
            if refusal:
                yield refusal
        for key in HYDRA_CALL_KEYS:
            if key in node:
                yield f"{'.'.join(path + (key,))}: options are given by keyword, not {key}."
        if any(path[: len(section)] == section for section in LOGGING):
            yield from _logging_problems(node, path)
        for key, value in node.items():
            yield from _walk(value, path + (str(key),))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, path + (str(index),))


def _logging_problems(node: Mapping[str, Any], path: Keys) -> Iterator[str]:
    for key, value in node.items():
        option = ".".join(path + (str(key),))
        if key in LOGGING_KEYS and value not in LOGGING_CLASSES:
            yield f"{option} must be one of {', '.join(LOGGING_CLASSES)}; got {value!r}."
        elif isinstance(value, str) and value.startswith("ext://") and value not in LOGGING_OBJECTS:
            yield f"{option} must be one of {', '.join(LOGGING_OBJECTS)}; got {value!r}."


def command_line_problems(hydra_main: Callable[[], object], argv: Sequence[str]) -> list[str]:
    """What :func:`config_problems` finds in the config that ``hydra_main`` (a ``@hydra.main``
    entry point) would compose from ``argv``, with every value of every sweep, found before
    Hydra instantiates anything."""
    args = get_args_parser().parse_args(list(argv))
    if args.experimental_rerun is not None:
        return [
            f"{RERUN_FLAG} loads a pickled config, which can run any code; run the command "
            "with its overrides instead."
        ]
    problems: dict[str, None] = {}  # in order, each once
    try:
        for cfg in _compositions(hydra_main, args):
            problems |= dict.fromkeys(config_problems(cfg))
    except ConfigCompositionException as error:
        hint = _near_miss(error, hydra_main, args)
        if hint is None:
            raise
        return [hint]
    return list(problems)


def _near_miss(error: ConfigCompositionException, hydra_main: Callable, args: Any) -> str | None:
    """Hydra's refusal of a key or a group choice it does not know, as one sentence with the
    nearest valid name (``trainer.max_epoch``: did you mean ``trainer.max_epochs``?), where
    there is one. Hydra's own hint, ``+trainer.max_epoch=...``, would add a key nothing reads."""
    if isinstance(error, MissingConfigException) and error.options and error.missing_cfg_file:
        group, _, choice = error.missing_cfg_file.rpartition("/")
        guess = nearest(choice, error.options)
        if guess is None:
            return None
        return (
            f"No {group} named {choice!r} (did you mean {group}={guess}?); the choices are: "
            f"{', '.join(sorted(error.options))}."
        )
    unknown = _unknown_key(error)
    if unknown is None:
        return None
    unknown_keys = [unknown]
    while True:  # compose without the unknown keys, to find any others and the valid ones
        rest = [o for o in args.overrides if o.lstrip("~+").split("=")[0] not in unknown_keys]
        without = argparse.Namespace(**{**vars(args), "overrides": rest})
        try:
            cfg = list(_compositions(hydra_main, without))[0]  # every sweep value composes
            break
        except ConfigCompositionException as again:
            unknown = _unknown_key(again)
            if unknown is None or unknown in unknown_keys:
                return None  # another kind of mistake: Hydra's message stands
            unknown_keys.append(unknown)
    keys = _dotted_keys(OmegaConf.to_container(cfg, resolve=False))
    typed = [o.lstrip("~+").split("=")[0] for o in args.overrides]
    unknown_keys.sort(key=lambda k: typed.index(k) if k in typed else len(typed))  # as typed
    return (
        f"{unknown_names(unknown_keys, list(keys))}: not in the command's config "
        "(--help lists the main options)."
    )


def _unknown_key(error: ConfigCompositionException) -> str | None:
    found = re.match(r"Could not override '([^']+)'", str(error))
    return found[1] if found else None


def _dotted_keys(section: dict, prefix: str = "") -> Iterator[str]:
    """Every key of a config, sections and their keys alike (``trainer``, ``trainer.devices``)."""
    for name, value in section.items():
        yield f"{prefix}{name}"
        if isinstance(value, dict):
            yield from _dotted_keys(value, f"{prefix}{name}.")


def _compositions(hydra_main: Callable[[], object], args: Any) -> Iterator[DictConfig]:
    """The configs Hydra would compose for ``args``: the fixed overrides, then each value of
    each sweep in turn (every group option and every value a job can get appears once)."""
    declared = inspect.getclosurevars(hydra_main).nonlocals  # what @hydra.main was given
    config_name = args.config_name or declared["config_name"]
    config_path = args.config_path or declared["config_path"]
    calling_file, calling_module = detect_calling_file_or_module_from_task_function(
        declared["task_function"]
    )
    search_path = create_automatic_config_search_path(calling_file, calling_module, config_path)
    if args.config_dir is not None:
        search_path.prepend(
            provider="command-line",
            path=f"file://{os.path.abspath(args.config_dir)}",
            anchor=SearchPathQuery(provider="schema"),
        )
    hydra = Hydra.create_main_hydra2(
        task_name=detect_task_name(calling_file, calling_module), config_search_path=search_path
    )
    try:
        parsed = OverridesParser.create().parse_overrides(args.overrides)
        fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
        for overrides in [fixed, *_one_value_each(parsed, fixed, hydra.config_loader)]:
            yield hydra.compose_config(
                config_name, overrides, run_mode=RunMode.RUN, with_log_configuration=False
            )
    finally:
        GlobalHydra.instance().clear()


def _one_value_each(parsed: list[Override], fixed: list[str], loader: Any) -> Iterator[list[str]]:
    """``fixed`` plus one value of one sweep, for every value of every sweep that can be
    listed (an interval sweep is numbers, which name nothing)."""
    for override in parsed:
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            values = override.value().filter(loader.get_group_options(override.key_or_group))
        elif override.is_discrete_sweep():
            values = list(override.sweep_string_iterator())
        else:
            continue
        for value in values:
            yield [*fixed, f"{override.get_key_element()}={value}"]
