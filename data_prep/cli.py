"""``recsys-prep`` (also ``python -m data_prep``): Hydra front end of :func:`data_prep.prepare`.

User errors (bad file, value, column or option; nothing left after the filters) exit with
status 2 and a one-paragraph message on stderr, never a traceback. Progress goes to stderr,
one line per finished stage; the summary table to stdout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from data_prep import schema
from data_prep.cluster import is_address
from data_prep.prep import prepare
from data_prep.progress import console_stages
from data_prep.synthetic import BUNDLED_CLICKS
from recsys_seq.core.conf import CONF_SEARCH_PATH
from recsys_seq.core.errors import exit_on_user_error, run_command
from recsys_seq.core.tables import Column, print_table

DEFAULT_ROOT = Path("data/prepared")


# file names that say what kind of file it is, not which data: such a file is named after its
# folder (ml-100k/u.data is "ml-100k", movielens/ratings.csv is "movielens")
GENERIC_STEMS = frozenset(
    {
        "data", "dataset", "events", "event", "interactions", "log", "logs", "ratings",
        "rating", "clicks", "train", "input", "raw", "sessions", "behavior",
    }
)  # fmt: skip


def dataset_name(path: str) -> str:
    """The default dataset name for the log at ``path``: its file name without compression
    and format suffixes, or its folder's name when that stem is generic or under three
    characters (and the file is not at the file system's root)."""
    name = Path(path).name
    for suffix in (".gz", ".bz2", ".zst", ".xz"):
        name = name.removesuffix(suffix)
    stem = Path(name).stem
    folder = Path(os.path.abspath(path)).parent.name  # the folder named, links not followed
    if folder and (len(stem) < 3 or stem.lower() in GENERIC_STEMS):
        return folder
    return stem


def resolve_paths(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill input (bundled demo log), name (demo / :func:`dataset_name`) and output defaults."""
    cfg = dict(cfg)
    if cfg.get("input") is None:
        cfg["input"] = str(BUNDLED_CLICKS)
        cfg["name"] = cfg.get("name") or "demo"
    cfg["name"] = cfg.get("name") or dataset_name(cfg["input"])
    if cfg.get("output") is None:
        cfg["output"] = str(DEFAULT_ROOT / cfg["name"])
    return cfg


def summary(meta: dict[str, Any], output: str) -> None:
    q = meta["length_quantiles"]
    cut = f" (cut {meta['split_cut']})" if meta.get("split_cut") is not None else ""
    sides = ", ".join(f"{k} ({v})" for k, v in meta["side_features"].items()) or "none"
    rows = [
        ("users", f"{meta['users']:,}"),
        ("items", f"{meta['items']:,}"),
        *_read(meta),
        ("events", f"{meta['events']:,}"),
        ("split", f"{meta['split']}{cut}"),
        (
            "length p50 / p90 / p95 / p99",
            f"{q['p50']:g} / {q['p90']:g} / {q['p95']:g} / {q['p99']:g}",
        ),
        ("length mean / max", f"{q['mean']:.1f} / {q['max']}"),
        ("suggested buckets", ", ".join(map(str, meta["suggested_buckets"]))),
        ("padding waste in buckets", f"{meta['bucket_padding_waste']:.1%}"),
        ("side features (vocab)", sides),
        *_item_rows(meta),
    ]
    columns = [Column("figure"), Column("value", right=True)]
    print_table(columns, rows, title=f"prepared {meta['name']}", header=False)
    print(f"output: {Path(output).resolve()}")


def _read(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The log's rows, and those dropped for a missing id (none in folders of older
    versions, which did not count them)."""
    if "rows_read" not in meta:
        return []
    return [
        (
            "rows read / without ids (dropped)",
            f"{meta['rows_read']:,} / {meta['rows_without_ids']:,}",
        )
    ]


def _item_rows(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The item table's rows of the summary (none without ``items=``): how its rows joined
    the log's items, and each attribute's kind and vocabulary size."""
    table = meta.get(schema.META_ITEM_TABLE)
    if table is None:
        return []
    attributes = meta[schema.META_ITEM_ATTRIBUTES]
    return [
        ("item table", Path(table["file"]).name),
        ("item rows matched / not in the log", f"{table['matched']:,} / {table['not_in_log']:,}"),
        ("items without a row", f"{table['without_row']:,}"),
        (
            "item attributes (kind, vocab)",
            ", ".join(f"{k} ({a['kind']}, {a['size']})" for k, a in attributes.items()),
        ),
    ]


@hydra.main(version_base="1.3", config_path=CONF_SEARCH_PATH, config_name="prep")
@exit_on_user_error("recsys-prep")
def _main(cfg: DictConfig) -> None:
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    plain = resolve_paths(plain)
    meta = prepare(plain, stage=console_stages())
    summary(meta, plain["output"])


def address_overrides(args: list[str]) -> list[str]:
    """``cluster=tcp://host:8786`` as the overrides Hydra composes: ``cluster=address
    cluster.address=tcp://host:8786`` (a config group's choice cannot be an address)."""
    out = []
    for arg in args:
        key, _, value = arg.partition("=")
        if key == "cluster" and is_address(value):
            out += ["cluster=address", f"cluster.address={value}"]
        else:
            out.append(arg)
    return out


def main() -> None:
    sys.argv[1:] = address_overrides(sys.argv[1:])
    run_command(_main, "recsys-prep")


if __name__ == "__main__":
    main()
