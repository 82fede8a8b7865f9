"""Shared fixtures: the real datasets, the material the command-line tests run on and their
outcomes, the demo log, and a tiny prepared folder to damage."""

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from data_prep import prepare
from data_prep.demo import prepare_demo
from recsys_seq.data.shared import SHARED_DATA_ENV, shared_data_dir

# the shared helpers' asserts report their values, as in a test module (imported below, lazily)
pytest.register_assert_rewrite("tests.helpers")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real public datasets (``$RECSYS_SEQ_DATA``, else ``../shared/data``).

    Missing data skips the test on a developer machine but FAILS it in CI (``CI=true``), so a
    broken data mount can never turn the integration tests silently green.
    """
    folder = shared_data_dir()
    if not folder.is_dir():
        message = f"real datasets not found at {folder} (set {SHARED_DATA_ENV})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="session")
def materials(tmp_path_factory):
    """A raw log, two prepared datasets and a checkpoint trained on one of them, made once per
    session with the real commands (:func:`tests.helpers.make_materials`)."""
    from tests.helpers import make_materials

    return make_materials(tmp_path_factory.mktemp("materials"))


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory) -> Path:
    """The bundled demo log, prepared once per session (tests only read it)."""
    return prepare_demo(tmp_path_factory.mktemp("data") / "demo")


# every kind of one-stage model recsys-export holds, and the training overrides that make one
EXPORTABLE = {
    "sasrec": ["model=sasrec"],
    "gru": ["model=gru"],
    "bsarec": ["model=bsarec", "data.train_windows=prefixes"],
    "sasrec_category": ["model=sasrec", "model.side_features=[category]"],
}


@pytest.fixture(scope="session", params=sorted(EXPORTABLE))
def exportable(request, tmp_path_factory, demo_dir) -> tuple[str, Path]:
    """``(kind, checkpoint)``: a few batches of training of each kind in :data:`EXPORTABLE`,
    once per session (tests/test_export.py, tests/test_export_load.py)."""
    from tests.helpers import short_checkpoint

    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    return request.param, short_checkpoint(run_dir, demo_dir, *EXPORTABLE[request.param])


@pytest.fixture(scope="session")
def outcomes(request, materials, tmp_path_factory) -> dict:
    """Run the selected command-line cases (:class:`tests.helpers.Case`, the ``case`` parameter
    of tests/test_cli_wrong_options.py and tests/test_cli_user_files.py) side by side, once per
    session; also snapshot the shared material before and after (no case may change it)."""
    from tests.helpers import Case, run_case, snapshot

    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if isinstance(getattr(getattr(item, "callspec", None), "params", {}).get("case"), Case)
    ]
    cases = sorted({c.id: c for c in selected}.values(), key=lambda c: -c.cost)
    dirs = {c.id: tmp_path_factory.mktemp(re.sub(r"[^\w.-]", "_", c.id)[:40]) for c in cases}
    before = snapshot(materials.root)
    workers = max(2, min(4, os.cpu_count() or 2))
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda c: run_case(c, dirs[c.id], materials), cases))
    results = {o.case.id: o for o in done}
    results["__materials__"] = (before, snapshot(materials.root))
    return results


@pytest.fixture(scope="session")
def prepared(tmp_path_factory) -> Path:
    """A real prepared folder (tests/test_prepared_*.py; tests only read it, or damage a
    ``copy``): 12 users over 10 items with both side features; users 0 and 1 have 2 events (a
    test target, no validation target), the others 4..9. (Some modules define their own
    ``prepared``, which takes precedence there.)"""
    from tests.helpers import FEATURES

    root = tmp_path_factory.mktemp("prepared")
    rng = np.random.default_rng(7)
    rows = ["user_id,item_id,timestamp,event_type,category"]
    for user in range(12):
        for t in range(2 if user < 2 else 4 + user % 6):
            item = int(rng.integers(100, 110))
            rows.append(f"u{user},i{item},{1000 * user + t},{('view', 'buy')[t % 2]},c{item % 3}")
    (root / "log.csv").write_text("\n".join(rows) + "\n")
    prepare(
        {
            "input": root / "log.csv",
            "output": root / "data",
            "min_user_events": 2,
            "side_features": FEATURES,
        }
    )
    return root / "data"


@pytest.fixture
def copy(prepared, tmp_path) -> Path:
    """A copy of the ``prepared`` folder, to damage."""
    return Path(shutil.copytree(prepared, tmp_path / "copy"))
