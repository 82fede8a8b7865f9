"""A misspelt option or config choice is answered with the nearest valid name, before any
work, on every command: keys of the composed config, Hydra group choices, and the project's
own option tables."""

import difflib
import functools
import inspect

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from recsys_seq import configs
from recsys_seq.core import targets
from recsys_seq.core.typos import nearest, unknown_names
from tests.helpers import SCRIPTS, hydra_main, run_cli, snapshot


@functools.cache
def leaf_keys(command: str) -> list[str]:
    """Dotted keys two levels deep of the command's own config (Hydra's node aside)."""
    name = inspect.getclosurevars(hydra_main(command)).nonlocals["config_name"]
    with initialize_config_dir(str(configs.CONF_DIR), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(name), resolve=False)
    keys = []
    for top, value in cfg.items():
        keys.append(top)
        if isinstance(value, dict):
            keys += [f"{top}.{k}" for k in value if not str(k).startswith("_")]
    return keys


def typos(key: str) -> list[str]:
    """Three kinds of slip on the key's last name: one letter dropped, one doubled, two
    neighbours swapped."""
    head, _, last = key.rpartition(".")
    middle = len(last) // 2
    slips = {
        last[:-1],
        last[:middle] + last[middle] + last[middle:],
        last[: middle - 1] + last[middle] + last[middle - 1] + last[middle + 1 :],
    }
    return [f"{head}.{s}" if head else s for s in sorted(slips) if s != last]


CASES = [
    (command, key, typo)
    for command in sorted(SCRIPTS)
    for key in leaf_keys(command)[:8]
    if len(key.rpartition(".")[2]) >= 4
    for typo in typos(key)
    if typo not in leaf_keys(command)  # a slip that lands on another option is not one
]


@pytest.mark.parametrize(("command", "key", "typo"), CASES)
def test_a_misspelt_key_is_answered_with_a_valid_one_at_least_as_near(command, key, typo):
    valid = set(leaf_keys(command))
    problems = targets.command_line_problems(hydra_main(command), [f"{typo}=1"])
    assert len(problems) == 1 and problems[0].startswith(f"Unknown option(s) {typo} ")
    guess = problems[0].split("(did you mean ", 1)[1].split("?)", 1)[0]
    ratio = difflib.SequenceMatcher(None, typo, guess).ratio()
    assert guess in valid or guess.startswith("hydra.")
    assert ratio >= difflib.SequenceMatcher(None, typo, key).ratio()


def test_every_command_has_cases():
    assert {command for command, _, _ in CASES} == set(SCRIPTS)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["model=grux"], "No model named 'grux' (did you mean model=gru?); the choices are: "),
        (["data=s3rec_beuty"], "(did you mean data=s3rec_beauty?)"),
        (["-m", "model=sasrec,gruu"], "(did you mean model=gru?)"),
        (["trainer=cpux"], "(did you mean trainer=cpu?)"),
    ],
)
def test_a_misspelt_group_choice_names_the_nearest_one(args, expected):
    problems = targets.command_line_problems(hydra_main("recsys-train"), args)
    assert len(problems) == 1 and expected in problems[0]


def test_every_misspelt_key_of_a_command_line_is_named_sweeps_included():
    problems = targets.command_line_problems(
        hydra_main("recsys-train"),
        ["-m", "trainer.max_epoch=1,2", "data.batch_sise=3", "model.encoder.num_head=2"],
    )
    assert problems == [
        "Unknown option(s) trainer.max_epoch (did you mean trainer.max_epochs?), "
        "data.batch_sise (did you mean data.batch_size?), model.encoder.num_head (did you "
        "mean model.encoder.num_heads?): not in the command's config (--help lists the main "
        "options)."
    ]


def test_no_guess_where_nothing_is_near():
    problems = targets.command_line_problems(hydra_main("recsys-train"), ["zzzz=1"])
    assert problems == [
        "Unknown option(s) zzzz: not in the command's config (--help lists the main options)."
    ]
    assert nearest("lr", ["weight_decay", "name"]) is None
    assert unknown_names(["a", "max_epoch"], ["max_epochs"], "trainer") == (
        "Unknown option(s) trainer.a, trainer.max_epoch (did you mean trainer.max_epochs?)"
    )


@pytest.mark.slow
def test_the_command_answers_in_one_line_and_writes_nothing(tmp_path):
    before = snapshot(tmp_path)
    proc = run_cli("recsys-train", ["trainer.max_epoch=1"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "recsys-train: error: Unknown option(s) trainer.max_epoch (did you mean "
        "trainer.max_epochs?): not in the command's config (--help lists the main options)."
    ]
    assert snapshot(tmp_path) == before
