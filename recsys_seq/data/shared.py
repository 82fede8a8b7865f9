"""The real public datasets that benchmarks and experiments use, and how to prepare each.

They are read in place from ``$RECSYS_SEQ_DATA`` (in a source checkout, by default
``../shared/data`` beside the repository) and never copied into it: their licences forbid
redistribution.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from data_prep import prepare
from data_prep.demo import DEMO_NAME, prepare_demo
from recsys_seq.core.errors import UserError

SHARED_DATA_ENV = "RECSYS_SEQ_DATA"


@dataclass(frozen=True)
class SharedDataset:
    name: str
    file: str  # relative to the shared data folder
    format: str
    # the window of its data config (data=<name>): the published results' one, or longer where
    # validation chose it (LastFM)
    max_len: int
    items_file: str | None = None  # the item table beside the log (items=), if the data has one
    items_format: str | None = None
    side_features: tuple[str, ...] = ()  # per-event features prep keeps (e.g. gap)


SHARED_DATASETS = (
    SharedDataset("s3rec_beauty", "s3rec/Beauty.txt", "s3rec_txt", 50),
    SharedDataset("s3rec_sports", "s3rec/Sports_and_Outdoors.txt", "s3rec_txt", 50),
    SharedDataset("s3rec_toys", "s3rec/Toys_and_Games.txt", "s3rec_txt", 50),
    SharedDataset("s3rec_yelp", "s3rec/Yelp.txt", "s3rec_txt", 50),
    SharedDataset("s3rec_lastfm", "s3rec/LastFM.txt", "s3rec_txt", 200),
    SharedDataset("sasrec_games", "sasrec/Video.txt", "sasrec_txt", 50),
    SharedDataset("bert4rec_beauty", "bert4rec/beauty.txt", "sasrec_txt", 50),
    SharedDataset("taobao", "taobao/UserBehavior_head_814users.csv", "taobao", 50),
    SharedDataset("diginetica", "diginetica/sample_train-item-views.csv", "diginetica", 50),
    SharedDataset("ml_100k", "movielens-100k/u.data", "movielens_100k", 200),
    SharedDataset("ml_latest_small", "movielens-latest-small/ratings.csv", "movielens_csv", 200),
    SharedDataset(
        "ml_1m",
        "movielens-1m/ratings_users0001-2999.dat.gz",
        "movielens_dat",
        200,
        items_file="movielens-1m/movies.dat",  # genres (Action|Comedy) and the year in the title
        items_format="movielens_dat",
        side_features=("gap",),
    ),
)


def shared_data_dir() -> Path:
    """``$RECSYS_SEQ_DATA``, else ``../shared/data`` beside the repository when running from a
    source checkout; an installed package has no such place and needs the variable."""
    if SHARED_DATA_ENV in os.environ:
        return Path(os.environ[SHARED_DATA_ENV])
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / "pyproject.toml").is_file():
        raise UserError(
            f"Where are the shared datasets? Set {SHARED_DATA_ENV} to the folder that holds "
            "them (e.g. s3rec/Beauty.txt), or pass data.path=<a prepared dataset folder>."
        )
    return checkout.parent / "shared" / "data"


def by_name(name: str) -> SharedDataset:
    for dataset in SHARED_DATASETS:
        if dataset.name == name:
            return dataset
    raise UserError(
        f"Unknown dataset {name!r}; known: {DEMO_NAME}, "
        f"{', '.join(d.name for d in SHARED_DATASETS)}."
    )


def check_source(name: str) -> str:
    """``name`` if it is the demo or a shared dataset, else a :class:`UserError`."""
    if name != DEMO_NAME:
        by_name(name)
    return name


def prepare_source(name: str, output: str | Path) -> Path:
    """Prepare the bundled demo or the shared dataset ``name`` into ``output`` (kept as it is
    when it already holds that dataset, prepared with the same input and options)."""
    if name == DEMO_NAME:
        return prepare_demo(output)
    return prepare_shared(output, name)


def prepare_shared(output: str | Path, name: str) -> Path:
    """Prepare the shared dataset ``name`` into ``output`` (reused while input and config
    match)."""
    dataset = by_name(name)
    options = {
        "name": dataset.name,
        "input": str(shared_data_dir() / dataset.file),
        "output": str(output),
        "format": dataset.format,
        "max_len": 200,
        "side_features": list(dataset.side_features),
        "reuse_existing": True,
    }
    if dataset.items_file is not None:
        options |= {
            "items": str(shared_data_dir() / dataset.items_file),
            "items_format": dataset.items_format,
        }
    prepare(options)
    return Path(output)


def prepared(dataset: SharedDataset, cache: Path) -> Path:
    """``cache/<name>``, prepared on first use."""
    return prepare_shared(cache / dataset.name, dataset.name)
