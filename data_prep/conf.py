"""Where the project's configs are: ``conf/`` beside the packages (as for the training CLIs).

The prep code reads two things from it, also without Hydra (through the Python API): its
options and their defaults (``conf/prep.yaml``, see :func:`data_prep.prep.defaults`) and the
built-in formats (``conf/format/<name>.yaml``, see :func:`data_prep.formats.load_format`).
Those files are their one owner; moving ``conf/`` (into the package, for a wheel) changes only
this line.
"""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
