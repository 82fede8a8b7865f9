"""Where the project's configs are: ``conf/`` at the top of the repository, installed as the
data-only package ``recsys_seq.conf`` (pyproject's ``package-dir``), shipped in the wheel.

Hydra apps find it as ``pkg://recsys_seq.conf`` (:data:`CONF_SEARCH_PATH`); the prep code also
reads two things from it without Hydra (through the Python API): its options and their defaults
(``prep.yaml``, see :func:`data_prep.prep.defaults`) and the built-in formats of logs
(``format/<name>.yaml``, see :func:`data_prep.formats.load_format`) and of item tables
(``items_format/<name>.yaml``, see :func:`data_prep.item_formats.load_item_format`). Those
files are their one owner. ``recsys_seq.conf`` holds only YAML files, so finding it imports no
torch.
"""

from importlib.util import find_spec
from pathlib import Path

CONF_PACKAGE = "recsys_seq.conf"
CONF_SEARCH_PATH = f"pkg://{CONF_PACKAGE}"
CONF_DIR = Path(find_spec(CONF_PACKAGE).origin).parent
