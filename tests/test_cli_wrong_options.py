"""Wrong options and unprepared data through the REAL command line, as a new user or an attacker.

Every case runs an installed entry point (``.venv/bin/recsys-*``) in a fresh working folder
``<case>/work`` (with a neighbour file in ``<case>/``) and checks the project's rules:

1. a user error exits with status 2 and prints ONE paragraph on stderr starting with
   ``<command>: error:`` that names the option, file, line or column at fault; never a
   traceback (bad Hydra overrides included), and the case folder is the same after it;
3. the demo runs only when asked: a raw or mistyped ``data.path`` is refused with a pointer
   to recsys-prep and nothing is prepared or written there;
5. a dataset too short to train on is refused, not trained on 0 batches.

(Rules 2 and 4, the user's files and explicit outputs: tests/test_cli_user_files.py.) The
cases of both files run side by side once per session (the ``outcomes`` fixture,
tests/conftest.py) on shared material (:func:`tests.helpers.make_materials`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import (
    EVAL,
    FAST,
    PREP,
    REPO,
    TRAIN,
    Case,
    Materials,
    Setup,
    check_refused,
    recommend_case,
    user_file,
)

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

BUNDLED = REPO / "data_prep" / "bundled" / "clicks.csv.gz"
HAS_GPU = Path("/dev/nvidiactl").exists()


# ------------------------------------------------------------------------------ setups


def raw_log_in(folder: str) -> Setup:
    """The user's raw logs in ``folder`` (a csv and the bundled gzipped log), no meta.json."""

    def setup(cwd: Path, m: Materials) -> None:
        (cwd / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(m.raw, cwd / folder / "log.csv")
        shutil.copy(BUNDLED, cwd / folder / "clicks.csv.gz")

    return setup


def pickle_bomb(name: str) -> Setup:
    """A "checkpoint" whose unpickling runs a shell command that creates ``PWNED``."""

    def setup(cwd: Path, m: Materials) -> None:
        import pickle

        class Bomb:
            def __reduce__(self):
                return (os.system, (f"touch {cwd / 'PWNED'}",))

        (cwd / name).write_bytes(pickle.dumps({"state_dict": Bomb()}, protocol=2))

    return setup


# ------------------------------------------------------------------------------ rule 1


def train_case(bad: str, names: tuple[str, ...], case_id: str | None = None) -> Case:
    key = bad.split("=", 1)[0].lstrip("+")
    fast = tuple(a for a in FAST if a.split("=", 1)[0] != key)
    return Case(case_id or f"train {bad}", TRAIN, ("data.path={prepared}", *fast, bad), names=names)


BAD_OPTIONS = [
    train_case("data.nope=1", ("data.nope",)),
    train_case("data.batch_size=[1", ("data.batch_size",), "train data.batch_size=[1 (bad syntax)"),
    train_case("data.batch_size=abc", ("data.batch_size", "abc")),
    train_case("data.batch_size=0", ("data.batch_size",)),
    train_case("data.boundaries=sugested", ("data.boundaries", "suggested", "sugested")),
    train_case("optimized_metric=hr@10", ("optimized_metric", "hr@10", "val/ndcg@10")),
    train_case("optimized_metric=val/auc@10", ("optimized_metric", "val/auc@10")),
    train_case("optimized_metric=val/ndcg@0", ("optimized_metric", "val/ndcg@0")),
    train_case("model.monitor=ndcg@10", ("model.monitor",)),
    train_case("model.encoder.name=nosuch", ("model.encoder.name", "nosuch", "gru")),
    train_case("model.scorer.name=target_attention", ("candidate_bce", "target_attention")),
    train_case("encoder@model.encoder=nosuch", ("nosuch",)),
    train_case("data.max_len=0", ("data.max_len",)),
    train_case("data.empty_history=true", ("data.empty_history", "data.train_windows=prefixes")),
    train_case("data.batching=sorted", ("data.batching", "sorted", "random")),
    train_case("trainer.max_epochs=-1", ("trainer.max_epochs",)),
    train_case("trainer.devices=0", ("trainer.devices",)),
    train_case("trainer.accelerator=banana", ("trainer.accelerator", "banana")),
    train_case("model.encoder.dropout=1.5", ("model.encoder.dropout",)),
    train_case("model.optimizer.lr=-1", ("model.optimizer.lr",)),
    train_case("model.ks=ten", ("model.ks",)),
    train_case("model.side_features=category", ("model.side_features",)),
    train_case("model.side_features=[brand]", ("model.side_features", "brand")),
    train_case("model=nosuch", ("model", "nosuch")),
    train_case("+trainer.foo=1", ("trainer.foo",)),
    train_case("trainer.max_epoch=1", ("did you mean trainer.max_epochs?",)),
    train_case("model=grux", ("did you mean model=gru?",)),
    *(
        Case(
            f"train trainer={name} without a GPU",
            TRAIN,
            ("data.path={prepared}", *FAST, f"trainer={name}"),
            names=("trainer.accelerator=gpu", "needs a GPU", "trainer=cpu"),
            marks=(pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU"),),
        )
        for name in ("gpu", "ddp")
    ),
    Case("eval no ckpt_path", EVAL, (), names=("ckpt_path",)),
    Case(
        "eval data.max_len=500 above the model's 50",
        EVAL,
        ("ckpt_path={ckpt}", "data.max_len=500"),
        names=("data.max_len", "50"),
    ),
    Case(
        "eval pickle bomb as ckpt_path",
        EVAL,
        ("ckpt_path=evil.ckpt",),
        names=("evil.ckpt",),
        setup=pickle_bomb("evil.ckpt"),
        absent=("PWNED",),
    ),
    recommend_case("recommend k=ten", "k=ten", names=("k", "ten")),
    recommend_case("recommend k=0", "k=0", names=("k",)),
    recommend_case(
        "recommend trainer.accelerator=tpu9", "trainer.accelerator=tpu9", names=("accelerator",)
    ),
    recommend_case(
        "recommend trainer.accelerator=cuda without a GPU",
        "trainer.accelerator=cuda",
        names=("trainer.accelerator=cuda", "needs a GPU"),
        marks=(pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU"),),
    ),
    recommend_case("recommend stage=banana", "stage=banana", names=("stage", "banana")),
    recommend_case(
        "recommend unknown=guess", "unknown=guess", names=("unknown", "guess", "popular")
    ),
    recommend_case(
        "recommend users=<unknown ids> unknown=error",
        "users=ids.txt",
        "unknown=error",
        names=("ids.txt", "nobody", "unknown=skip"),
        setup=user_file("ids.txt", "nobody\n"),
    ),
    recommend_case("recommend output=recs.txt", "output=recs.txt", names=("output", "recs.txt")),
    recommend_case(
        "recommend users=<missing file>", "users=nosuch_ids.txt", names=("nosuch_ids.txt",)
    ),
    recommend_case(
        "recommend users=<empty file>",
        "users=ids.txt",
        names=("ids.txt",),
        setup=user_file("ids.txt", ""),
    ),
    Case(
        "prep max_len=abc",
        PREP,
        ("input={raw}", "output=out", "max_len=abc"),
        names=("max_len", "abc"),
    ),
    Case(
        "prep min_user_events=1.5",
        PREP,
        ("input={raw}", "output=out", "min_user_events=1.5"),
        names=("min_user_events", "1.5"),
    ),
    Case("prep nope=1", PREP, ("input={raw}", "output=out", "nope=1"), names=("nope",)),
    Case(
        "prep format=nosuch",
        PREP,
        ("input={raw}", "output=out", "format=nosuch"),
        names=("format", "nosuch"),
    ),
    Case(
        "prep max_len=[1 (bad syntax)",
        PREP,
        ("input={raw}", "output=out", "max_len=[1"),
        names=("max_len",),
    ),
    Case(
        "prep input=<missing file>",
        PREP,
        ("input=missing.csv", "output=out"),
        names=("missing.csv",),
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_OPTIONS])
def test_wrong_option_is_one_paragraph_and_exit_2(outcomes, materials, case):
    check_refused(outcomes, case, materials)


# ------------------------------------------------------------------------------ rules 3, 5

NOT_PREPARED = [
    Case(
        "train data.path=<a folder of raw logs>",
        TRAIN,
        ("data.path=logs", *FAST),
        names=("{cwd}/logs", "recsys-prep"),
        setup=raw_log_in("logs"),
    ),
    Case(
        "train data.path=<a typo>",
        TRAIN,
        ("data.path=prepraed", *FAST),
        names=("{cwd}/prepraed", "recsys-prep"),
        absent=("prepraed", "data"),
    ),
    Case(
        "eval data.path=<a folder of raw logs>",
        EVAL,
        ("ckpt_path={ckpt}", "data.path=logs"),
        names=("{cwd}/logs", "recsys-prep"),
        setup=raw_log_in("logs"),
    ),
    Case(
        "train on users of 2 events (min_user_events=2)",
        TRAIN,
        ("data.path={two}", *FAST),
        names=("{two}", "no train windows"),
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in NOT_PREPARED])
def test_no_demo_and_no_empty_training_behind_the_users_back(outcomes, materials, case):
    check_refused(outcomes, case, materials)
