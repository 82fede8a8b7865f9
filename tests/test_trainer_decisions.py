"""What a command settles about its Trainer (its callbacks, no bar in a log file, no
checkpoints when it only predicts) agrees with the same ``trainer.*`` option given by a user or
by recsys-tune, instead of clashing with it ("got multiple values for keyword argument")."""

import pytest
from lightning.pytorch.callbacks import Callback, ModelSummary
from omegaconf import OmegaConf

from recsys_seq.tune.objective import QUIET
from recsys_seq.workflows.trainer import build_trainer
from tests.helpers import FAST, must_succeed, run_cli, short_checkpoint

# every Trainer keyword a command decides somewhere (recsys-train, -eval, -recommend)
DECIDED = {
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "enable_checkpointing": False,
    "logger": False,
}
# the opposite of each, as a user's option
GIVEN = ["++trainer.enable_progress_bar=true", "++trainer.enable_model_summary=true"]
GIVEN += ["++trainer.enable_checkpointing=true", "++trainer.logger=true"]


@pytest.mark.parametrize("key", sorted(DECIDED))
def test_the_command_s_decision_replaces_the_same_option(key):
    cfg = OmegaConf.create({"accelerator": "cpu", "devices": 1, key: True})
    trainer = build_trainer(cfg, **{key: DECIDED[key]})
    shown = {
        "enable_progress_bar": trainer.progress_bar_callback is None,
        "enable_model_summary": not any(isinstance(c, ModelSummary) for c in trainer.callbacks),
        "enable_checkpointing": trainer.checkpoint_callback is None,
        "logger": trainer.logger is None,
    }
    assert shown[key], f"trainer.{key}=true won over the command's {key}={DECIDED[key]}"


def test_the_command_s_callbacks_are_the_ones_used():
    mine = Callback()
    trainer = build_trainer(OmegaConf.create({"accelerator": "cpu"}), callbacks=[mine])
    assert mine in trainer.callbacks


@pytest.mark.slow  # real commands
def test_train_in_a_log_file_takes_the_options_recsys_tune_gives_each_trial(tmp_path, demo_dir):
    proc = run_cli(
        "recsys-train",
        [f"data.path={demo_dir}", *FAST, *QUIET, f"hydra.run.dir={tmp_path / 'run'}"],
        tmp_path,
    )  # stdout is a pipe: the command itself turns the bar off as well
    must_succeed(proc)
    assert "it/s" not in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", ["recsys-eval", "recsys-recommend"])
def test_eval_and_recommend_take_the_opposite_of_what_they_decide(tmp_path, demo_dir, command):
    checkpoint = short_checkpoint(tmp_path / "run", demo_dir)
    args = [f"ckpt_path={checkpoint}", *GIVEN, f"hydra.run.dir={tmp_path / command}"]
    if command == "recsys-recommend":
        args.append(f"output={tmp_path / 'top.csv'}")
    must_succeed(run_cli(command, args, tmp_path))
    if command == "recsys-recommend":
        assert (tmp_path / "top.csv").stat().st_size > 0
