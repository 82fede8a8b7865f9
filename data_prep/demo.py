"""The bundled demo dataset: prepare ``bundled/clicks.csv.gz`` with the default settings."""

from __future__ import annotations

from pathlib import Path

from data_prep.prep import defaults, prepare
from data_prep.synthetic import BUNDLED_CLICKS

DEMO_NAME = "demo"


def demo_config(output: str | Path) -> dict:
    """The prep config of the demo dataset: the defaults of ``conf/prep.yaml`` (the generic
    csv format among them) on the bundled input."""
    return {
        **defaults(),
        "name": DEMO_NAME,
        "input": str(BUNDLED_CLICKS),
        "output": str(output),
        "reuse_existing": True,
    }


def prepare_demo(output: str | Path) -> Path:
    """Prepare the bundled click log into ``output`` unless it already holds it; return the path.

    Safe to call from several processes at once: each writes a private temporary folder and
    renames it into place; if ``output`` already holds a dataset with the same fingerprint
    (prepared before, or by a concurrent caller), it is kept as is.
    """
    prepare(demo_config(output))
    return Path(output)
