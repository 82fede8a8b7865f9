"""Shared fixtures: the real datasets, and tiny prepared datasets made in tmp_path."""

import os
from pathlib import Path

import pytest

SHARED_DATA_ENV = "RECSYS_SEQ_DATA"
DEFAULT_SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real public datasets (``$RECSYS_SEQ_DATA``, else ``../shared/data``).

    Missing data skips the test on a developer machine but FAILS it in CI (``CI=true``), so a
    broken data mount can never turn the integration tests silently green.
    """
    folder = Path(os.environ.get(SHARED_DATA_ENV, DEFAULT_SHARED_DATA))
    if not folder.is_dir():
        message = f"real datasets not found at {folder} (set {SHARED_DATA_ENV})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return folder
