"""``recsys-prep`` (also ``python -m data_prep``): Hydra front end of :func:`data_prep.prepare`.

User errors (bad file, value, column or option; nothing left after the filters) exit with
status 2 and a one-paragraph message on stderr, never a traceback. Progress goes to stderr,
one line per finished stage; the summary table to stdout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from data_prep.conf import CONF_DIR
from data_prep.errors import exit_on_user_error, run_command
from data_prep.prep import prepare
from data_prep.progress import console_stages
from data_prep.synthetic import BUNDLED_CLICKS

DEFAULT_ROOT = Path("data/prepared")


def _stem(path: str) -> str:
    name = Path(path).name
    for suffix in (".gz", ".bz2", ".zst", ".xz"):
        name = name.removesuffix(suffix)
    return Path(name).stem


def resolve_paths(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill input (bundled demo log), name (demo / the input's stem) and output defaults."""
    cfg = dict(cfg)
    if cfg.get("input") is None:
        cfg["input"] = str(BUNDLED_CLICKS)
        cfg["name"] = cfg.get("name") or "demo"
    cfg["name"] = cfg.get("name") or _stem(cfg["input"])
    if cfg.get("output") is None:
        cfg["output"] = str(DEFAULT_ROOT / cfg["name"])
    return cfg


def summary(meta: dict[str, Any], output: str) -> None:
    from rich.console import Console
    from rich.table import Table

    q = meta["length_quantiles"]
    table = Table(title=f"prepared {meta['name']}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("users", f"{meta['users']:,}")
    table.add_row("items", f"{meta['items']:,}")
    table.add_row("events", f"{meta['events']:,}")
    cut = f" (cut {meta['split_cut']})" if meta.get("split_cut") is not None else ""
    table.add_row("split", f"{meta['split']}{cut}")
    table.add_row(
        "length p50 / p90 / p95 / p99", f"{q['p50']:g} / {q['p90']:g} / {q['p95']:g} / {q['p99']:g}"
    )
    table.add_row("length mean / max", f"{q['mean']:.1f} / {q['max']}")
    table.add_row("suggested buckets", ", ".join(map(str, meta["suggested_buckets"])))
    table.add_row("padding waste in buckets", f"{meta['bucket_padding_waste']:.1%}")
    sides = ", ".join(f"{k} ({v})" for k, v in meta["side_features"].items()) or "none"
    table.add_row("side features (vocab)", sides)
    console = Console()
    console.print(table)
    console.print(f"output: {Path(output).resolve()}")


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="prep")
@exit_on_user_error("recsys-prep")
def _main(cfg: DictConfig) -> None:
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    plain = resolve_paths(plain)
    meta = prepare(plain, stage=console_stages())
    summary(meta, plain["output"])


def main() -> None:
    run_command(_main, "recsys-prep")


if __name__ == "__main__":
    main()
