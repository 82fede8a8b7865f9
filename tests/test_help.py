"""``<command> --help`` is a page per command (``conf/hydra/help/<app>.yaml``): usage, the main
options and examples, checked against the command's real config and task functions so that a
new option cannot be left out of it."""

import inspect
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from recsys_seq.cli.bench import TASKS
from recsys_seq.configs import CONF_DIR

BIN = Path(sys.executable).parent
HELP = Path(CONF_DIR) / "hydra" / "help"
APPS = ("train", "eval", "recommend", "export", "prep", "bench", "report", "tune")
WIRED = (
    "train",
    "eval",
    "recommend",
    "export",
    "prep",
    "bench",
    "report",
    "tune",
)  # override hydra/help: <app>
NOT_OPTIONS = {"defaults", "hydra", "task_name"}


def page(app: str) -> str:
    """The help page as Hydra prints it (interpolations resolved, placeholders filled)."""
    cfg = OmegaConf.create({"hydra": {"help": OmegaConf.load(HELP / f"{app}.yaml")}})
    template = OmegaConf.to_container(cfg, resolve=True)["hydra"]["help"]["template"]
    fields = ("FLAGS_HELP", "HYDRA_CONFIG_GROUPS", "APP_CONFIG_GROUPS", "CONFIG")
    return string.Template(template).substitute(dict.fromkeys(fields, ""))


def top_level_options(app: str) -> list[str]:
    with open(Path(CONF_DIR) / f"{app}.yaml") as f:
        return [k for k in yaml.safe_load(f) if k not in NOT_OPTIONS]


def named(option: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(option)}[=.]", text) is not None


@pytest.mark.parametrize("app", APPS)
def test_each_page_renders_with_a_usage_line_and_examples(app):
    text = page(app)
    assert f"Usage: recsys-{app}" in text and "Examples:" in text
    assert all(len(line) <= 100 for line in text.splitlines()), app  # a terminal


@pytest.mark.parametrize("app", ["eval", "recommend", "export", "prep", "report"])
def test_a_page_names_every_option_of_its_command(app):
    missing = [k for k in top_level_options(app) if not named(k, page(app))]
    assert not missing, (app, missing)


def test_the_train_and_tune_pages_name_their_main_options():
    train = page("train")
    for option in [*top_level_options("train"), "data", "model", "trainer", "experiment"]:
        assert named(option, train), option
    tune = page("tune")
    for option in ["search", "tune.n_trials", "tune.storage", "tune.sweep_dir", "data"]:
        assert named(option, tune), option


def test_the_prep_page_names_every_format():
    formats = sorted(p.stem for p in (Path(CONF_DIR) / "format").glob("*.yaml"))
    assert [f for f in formats if not re.search(rf"\b{f}\b", page("prep"))] == []


def test_the_bench_page_names_every_option_of_every_task():
    text = page("bench")
    for name, load in TASKS.items():
        section = text.split(f"task={name}:", 1)[1].split("\n\n", 1)[0]
        options = [p for p in inspect.signature(load()).parameters if p != "output"]
        assert [o for o in options if not named(o, section)] == [], name
        assert named("output", text)


@pytest.mark.slow
@pytest.mark.parametrize("app", WIRED)
def test_help_prints_the_page_and_writes_nothing(app, tmp_path):
    done = subprocess.run(
        [str(BIN / f"recsys-{app}"), "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == page(app).strip()
    assert list(tmp_path.iterdir()) == []
