"""The search spaces recsys-tune offers: one file a space in conf/search.

(tests/test_tune_*.py)"""

from pathlib import Path

from recsys_seq import configs

SEARCHES = sorted(p.stem for p in (Path(configs.CONF_DIR) / "search").glob("*.yaml"))
