"""The user's files through the REAL command line: never lost, and explicit outputs only.

Every case runs an installed entry point (``.venv/bin/recsys-*``) in a fresh working folder
``<case>/work`` (with a neighbour file in ``<case>/`` so that ``output=..`` has something to
lose) and checks the project's rules:

2. a user's file is never lost: every byte of the case folder is the same after a refused
   command (train and eval may add their own ``outputs/`` run folder, nothing else), and the
   refusal is one ``<command>: error:`` paragraph naming the path, exit status 2;
4. with an explicit ``output=``, recsys-prep, recsys-recommend and recsys-export write that
   and nothing else (no ``outputs/``, ``.hydra/`` or log file), and a re-run replaces their
   own previous output;

and that no case (of this file or of tests/test_cli_wrong_options.py, rules 1, 3 and 5) changes
the shared material. The cases of both files run side by side once per session (the
``outcomes`` fixture, tests/conftest.py) on that material (:func:`tests.helpers.make_materials`).
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import (
    EXPORT,
    FAST,
    PREP,
    RECOMMEND,
    TRAIN,
    Case,
    Materials,
    Setup,
    changes,
    check_refused,
    must_succeed,
    recommend_case,
    run_cli,
    user_file,
)

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

# ------------------------------------------------------------------------------ setups


def both(*setups: Setup) -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        for one in setups:
            one(cwd, m)

    return setup


def copy_prepared(folder: str) -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        shutil.copytree(m.prepared, cwd / folder)

    return setup


def link(name: str, target: str) -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        (cwd / name).symlink_to(target)

    return setup


def user_parquet(name: str) -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        import polars as pl

        pl.DataFrame({"user": [1, 2], "clicks": [10, 20]}).write_parquet(cwd / name)

    return setup


def user_zip(name: str) -> Setup:
    """A zip archive of the user's (a program exported by other means)."""

    def setup(cwd: Path, m: Materials) -> None:
        with zipfile.ZipFile(cwd / name, "w") as archive:
            archive.writestr("mine/data.pkl", b"not the project's")
            archive.writestr("mine/version", "3\n")

    return setup


def prepared_then_user_file(folder: str) -> Setup:
    """A dataset recsys-prep made, into which the user then put a file of their own."""

    def setup(cwd: Path, m: Materials) -> None:
        must_succeed(run_cli(PREP, [f"input={m.raw}", f"output={folder}"], cwd))
        (cwd / folder / "notes.txt").write_text("the user's notes about this dataset\n")

    return setup


# ------------------------------------------------------------------------------ rule 2

V_LOG = user_file(
    "v/log.csv",
    "user_id,item_id,timestamp\n"
    + "".join(
        f"{u},{(u * 3 + e) % 30 + 1},{1000 + u * 10 + e}\n" for u in range(60) for e in range(6)
    ),
)

USER_FILES = [
    Case(
        "prep output=<the input's folder>",
        PREP,
        ("input=v/log.csv", "output=v"),
        names=("{cwd}/v",),
        setup=V_LOG,
    ),
    Case(
        "prep output=. (the working directory)",
        PREP,
        ("input=v/log.csv", "output=."),
        names=("{cwd}",),
        setup=V_LOG,
    ),
    Case(
        "prep output=.. (above it)",
        PREP,
        ("input=v/log.csv", "output=.."),
        names=("{parent}",),
        setup=V_LOG,
    ),
    Case(
        "prep output=<a user's file>",
        PREP,
        ("input=v/log.csv", "output=notes.txt"),
        names=("{cwd}/notes.txt",),
        setup=both(V_LOG, user_file("notes.txt")),
    ),
    Case(
        "prep output=<the input itself>",
        PREP,
        ("input=v/log.csv", "output=v/log.csv"),
        names=("{cwd}/v/log.csv",),
        setup=V_LOG,
    ),
    Case(
        "prep output=<a folder with the user's files>",
        PREP,
        ("input=v/log.csv", "output=mine"),
        names=("{cwd}/mine",),
        setup=both(V_LOG, user_file("mine/notes.txt")),
    ),
    Case(
        "prep output=<its own dataset, a user's file added>",
        PREP,
        ("input=v/log.csv", "output=ds"),
        names=("{cwd}/ds",),
        setup=both(V_LOG, prepared_then_user_file("ds")),
    ),
    Case(
        "prep output=<a symlink to a user's folder>",
        PREP,
        ("input=v/log.csv", "output=link"),
        names=("{cwd}/link",),
        setup=both(V_LOG, user_file("mine/notes.txt"), link("link", "mine")),
    ),
    recommend_case(
        "recommend output=<a user's csv>",
        "output=mine.csv",
        names=("{cwd}/mine.csv",),
        setup=user_file("mine.csv", "user_id,clicks\n1,10\n"),
    ),
    recommend_case(
        "recommend output=<a user's parquet>",
        "output=mine.parquet",
        names=("{cwd}/mine.parquet",),
        setup=user_parquet("mine.parquet"),
    ),
    recommend_case(
        "recommend output=<its own users= file>",
        "users=ids.csv",
        "output=ids.csv",
        names=("{cwd}/ids.csv",),
        setup=user_file("ids.csv", "user_id\n1000\n1001\n"),
    ),
    recommend_case(
        "recommend output=<a symlink to a user's file>",
        "output=link.csv",
        names=("{cwd}/link.csv",),
        setup=both(user_file("notes.txt"), link("link.csv", "notes.txt")),
    ),
    recommend_case(
        "recommend output=<inside the prepared dataset it reads>",
        "data.path=dataset",
        "output=dataset/recs.csv",
        names=("{cwd}/dataset",),
        setup=copy_prepared("dataset"),
    ),
    Case(
        "export output=<a user's .pt2 file>",
        EXPORT,
        ("ckpt_path={ckpt}", "output=mine.pt2"),
        names=("{cwd}/mine.pt2",),
        setup=user_zip("mine.pt2"),
    ),
    Case(
        "train hydra.run.dir=<a folder with the user's files>",
        TRAIN,
        ("data.path={prepared}", *FAST, "hydra.run.dir=mine"),
        names=("{cwd}/mine",),
        setup=user_file("mine/notes.txt"),
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in USER_FILES])
def test_users_files_are_never_touched(outcomes, materials, case):
    check_refused(outcomes, case, materials)


# ------------------------------------------------------------------------------ rule 4


def meta_max_length(expected: int) -> Callable[[Path], None]:
    def check(out: Path) -> None:
        import json

        meta = json.loads((out / "meta.json").read_text())
        assert meta["length_quantiles"]["max"] == expected, meta["length_quantiles"]

    return check


def parquet_rows(expected: int) -> Callable[[Path], None]:
    def check(out: Path) -> None:
        import polars as pl

        frame = pl.read_parquet(out)
        assert frame.columns == ["user_id", "rank", "item_id", "score", "source"]
        assert frame.height == expected and frame["rank"].max() == expected // 60

    return check


def an_export(out: Path) -> None:
    with zipfile.ZipFile(out) as archive:
        assert any(n.endswith("/extra/recsys_seq_artifact") for n in archive.namelist())


OWN_OUTPUTS = [
    Case(
        "prep onto its own previous output",
        PREP,
        ("input=v/log.csv", "output=out", "max_len=6"),
        setup=V_LOG,
        reruns=(("input=v/log.csv", "output=out", "max_len=4"),),
        output="out",
        check=meta_max_length(4),
    ),
    Case(
        "recommend onto its own previous parquet",
        RECOMMEND,
        ("ckpt_path={ckpt}", "k=3", "output=recs.parquet"),
        reruns=(("ckpt_path={ckpt}", "k=5", "output=recs.parquet"),),
        output="recs.parquet",
        check=parquet_rows(60 * 5),
    ),
    Case(
        "export onto its own previous .pt2",
        EXPORT,
        ("ckpt_path={ckpt}", "output=model.pt2"),
        reruns=(("ckpt_path={ckpt}", "output=model.pt2", "exclude_history=true"),),
        output="model.pt2",
        check=an_export,
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in OWN_OUTPUTS])
def test_explicit_output_is_all_that_is_written_and_reruns_replace_it(outcomes, case):
    outcome = outcomes[case.id]
    assert outcome.error is None, outcome.error
    start = outcome.listings[0]
    for proc, listing in zip(outcome.procs, outcome.listings[1:], strict=True):
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (
            f"{proc.args}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
        )
        extra = sorted(listing - start - {case.output})
        assert listing - start == {case.output}, (
            f"{proc.args}: the working directory holds {extra or 'no output'} beside {case.output}"
        )
    case.check(outcome.cwd / case.output)


def test_shared_material_is_untouched(outcomes):
    before, after = outcomes["__materials__"]
    assert changes(before, after) == []
