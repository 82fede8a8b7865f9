"""Item attributes in the models (``model.side_features=[genres, brand, price]`` on data
prepared with ``items=``): the codes the catalogue reads from items.parquet, an item's vector
as its embedding plus the pooled embeddings of its values (PAD exactly zero), the options
refused, the codes a checkpoint carries (tampered ones refused), the same codes in a
retriever and its ranker after a round trip, a retriever of another item table refused, and
an export that recommends as its checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from test_export_load import assert_serves_alike, export_to

import recsys_seq
from data_prep import prepare, read_meta, schema
from data_prep.demo import demo_config
from data_prep.synthetic import BUNDLED_CLICKS
from recsys_seq.checkpoint import CheckpointError, load
from recsys_seq.core.options import OptionError
from recsys_seq.data.catalogue import Catalogue
from recsys_seq.models.embedder import AttributeShape, ItemEmbedder
from recsys_seq.workflows.train import train
from tests.helpers import histories, rerank_run, short_checkpoint, train_config

GENERIC = {"reader": "csv", "categorical": ["brand"], "multi": ["genres"], "numeric": ["price"]}
GENRES = ["Action", "Comedy", "Drama", "Horror", "Sci-Fi"]
ATTRIBUTES = ["genres", "brand", "price"]


def item_table(folder: Path, seed: int) -> Path:
    """An item table for the demo log's items: 0-3 genres each (some none), a brand (some
    missing), a price (some missing), and a tenth of the items without a row."""
    ids = (
        pl.scan_csv(BUNDLED_CLICKS, schema_overrides={"item_id": pl.Utf8})
        .select(pl.col("item_id").unique().sort())
        .collect()["item_id"]
    )
    rng = np.random.default_rng(seed)
    n = len(ids)
    picks = rng.random((n, len(GENRES))) < 0.3
    genres = ["|".join(g for g, on in zip(GENRES, row, strict=True) if on) or None for row in picks]
    brand = rng.choice(["acme", "zen", "nova"], n).astype(object)
    brand[rng.random(n) < 0.2] = None
    price = np.round(rng.gamma(2.0, 10.0, n), 2).astype(object)
    price[rng.random(n) < 0.2] = None
    frame = pl.DataFrame(
        {"item_id": ids, "genres": genres, "brand": list(brand), "price": list(price)},
        schema={"item_id": pl.Utf8, "genres": pl.Utf8, "brand": pl.Utf8, "price": pl.Float64},
    ).filter(pl.Series(rng.random(n) >= 0.1))
    path = folder / f"items{seed}.csv"
    frame.write_csv(path)
    return path


def prepared_with(folder: Path, seed: int) -> Path:
    config = demo_config(folder / f"data{seed}")
    prepare({**config, "items": str(item_table(folder, seed)), "items_format": GENERIC})
    return Path(config["output"])


@pytest.fixture(scope="module")
def attributed(tmp_path_factory) -> Path:
    """The demo log prepared with an item table."""
    return prepared_with(tmp_path_factory.mktemp("attributed"), 0)


@pytest.fixture(scope="module")
def recoded(tmp_path_factory) -> Path:
    """The same log prepared with another item table (the same items, other codes)."""
    return prepared_with(tmp_path_factory.mktemp("recoded"), 1)


def catalogue(folder: Path) -> Catalogue:
    meta = read_meta(folder)
    return Catalogue.load(folder, int(meta["items"]), meta[schema.META_ITEM_ATTRIBUTES])


# -- the codes of the data -------------------------------------------------------------------


def test_the_catalogue_codes_each_item_as_its_table_row(attributed):
    """Decoded with meta.json's vocabularies, each item's codes are its row of the input
    table (any order for genres); an item without a row, and PAD, have none."""
    meta = read_meta(attributed)
    codes = catalogue(attributed).attributes
    table = pl.read_csv(attributed.parent / "items0.csv", schema_overrides={"item_id": pl.Utf8})
    rows = {r["item_id"]: r for r in table.iter_rows(named=True)}
    items = pl.read_parquet(attributed / schema.ITEMS_FILE)
    vocab = {n: meta[schema.META_ITEM_ATTRIBUTES][n]["vocab"] for n in ATTRIBUTES}
    assert set(codes) == set(ATTRIBUTES)
    most = table["genres"].str.split("|").list.len().max()
    assert codes["genres"].shape[1] == most and codes["brand"].shape[1] == 1
    assert codes["price"].shape[1] == 1
    for name in ATTRIBUTES:
        assert not codes[name][0].any()
    without_row = 0
    for index, original in zip(items[schema.ITEM], items[schema.ORIGINAL_ID], strict=True):
        row = rows.get(str(original))
        values = {n: [c for c in codes[n][index] if c] for n in ATTRIBUTES}
        if row is None:
            without_row += 1
            assert values == {n: [] for n in ATTRIBUTES}, original
            continue
        genres = [vocab["genres"][c] for c in values["genres"]]
        assert sorted(genres) == sorted((row["genres"] or "").split("|") if row["genres"] else [])
        assert codes["genres"][index][: len(genres)].all()  # left-aligned, zeros after
        assert [vocab["brand"][c] for c in values["brand"]] == [row["brand"]] * bool(row["brand"])
        assert len(values["price"]) == (row["price"] is not None)
    assert without_row > 0


def test_the_codes_in_the_catalogue_are_items_parquet(attributed):
    frame = pl.read_parquet(attributed / schema.ITEMS_FILE).sort(schema.ITEM)
    codes = catalogue(attributed).attributes
    for index, genres, brand in zip(
        frame[schema.ITEM], frame["genres"].to_list(), frame["brand"], strict=True
    ):
        stored = genres or []
        width = codes["genres"].shape[1]
        assert codes["genres"][index].tolist() == stored + [0] * (width - len(stored))
        assert codes["brand"][index, 0] == (brand or 0)


# -- an item's vector ------------------------------------------------------------------------


def small_embedder() -> ItemEmbedder:
    """Items 1..4: item 1 genres {1, 2} and brand 1, item 2 genre 3 only, item 3 brand 2
    only, item 4 nothing; a per-event feature beside."""
    shapes = {"genres": AttributeShape(size=4, values=2), "brand": AttributeShape(size=3, values=1)}
    embedder = ItemEmbedder(4, 8, {"event": 3}, attributes=shapes)
    embedder.attributes.set_codes(
        {
            "genres": np.array([[0, 0], [1, 2], [3, 0], [0, 0], [0, 0]]),
            "brand": np.array([[0], [1], [0], [2], [0]]),
        }
    )
    return embedder


def test_an_items_vector_is_its_embedding_plus_each_attributes_mean():
    embedder = small_embedder()
    items = embedder.items.weight
    genres, brand = (table.weight for table in embedder.attributes.tables)
    want = torch.stack(
        [
            torch.zeros(8),
            items[1] + (genres[1] + genres[2]) / 2 + brand[1],
            items[2] + genres[3],  # one genre: not halved by the empty slot
            items[3] + brand[2],
            items[4],  # no values: the item's own embedding
        ]
    )
    got = embedder.vectors(torch.arange(5))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(embedder.vectors.weight, want)
    assert torch.equal(got[0], torch.zeros(8))  # PAD exactly zero, not merely close


def test_pad_events_embed_to_exactly_zero_and_pass_no_gradient():
    embedder = small_embedder()
    batch = {
        "items": torch.tensor([[1, 2, 0, 0], [3, 4, 1, 0]]),
        "event": torch.tensor([[1, 2, 0, 0], [2, 1, 1, 0]]),
    }
    out = embedder(batch)
    assert torch.equal(out[batch["items"] == 0], torch.zeros(3, 8))
    out.pow(2).sum().backward()
    for table in (embedder.items, *embedder.attributes.tables, *embedder.features.values()):
        assert torch.equal(table.weight.grad[0], torch.zeros(8))
    assert embedder.attributes.tables[0].weight.grad[1:].abs().sum(-1).gt(0).tolist() == [
        True,
        True,
        True,
    ]


@pytest.mark.parametrize(
    "codes, problem",
    [
        ({"genres": np.zeros((5, 3), dtype=np.int64)}, "shape"),
        ({"genres": np.array([[0, 0], [1, 2], [4, 0], [0, 0], [0, 0]])}, "outside 0..3"),
        ({"genres": np.array([[0, 0], [1, 2], [-1, 0], [0, 0], [0, 0]])}, "outside 0..3"),
        ({"genres": np.array([[1, 0], [1, 2], [3, 0], [0, 0], [0, 0]])}, "PAD"),
    ],
)
def test_codes_of_another_shape_or_vocabulary_are_refused(codes, problem):
    embedder = small_embedder()
    with pytest.raises(ValueError, match=problem):
        embedder.attributes.set_codes(codes)
        embedder.attributes.check_codes()


# -- options ------------------------------------------------------------------------------


def test_an_attribute_the_data_lacks_is_refused_naming_items(tmp_path, attributed, demo_dir):
    with pytest.raises(OptionError, match=r"items=<item table>") as err:
        train(train_config(tmp_path / "a", demo_dir, "model.side_features=[genres]"))
    assert "genres" in str(err.value)
    with pytest.raises(OptionError, match=r"\['colour'\].*brand.*category.*genres"):
        train(train_config(tmp_path / "b", attributed, "model.side_features=[genres,colour]"))


# -- checkpoints and two stages --------------------------------------------------------------


@pytest.fixture(scope="module")
def retriever(tmp_path_factory, attributed) -> Path:
    """A sasrec of every attribute, history excluded (no per-event feature: it serves lists
    of item ids)."""
    return short_checkpoint(
        tmp_path_factory.mktemp("retriever"),
        attributed,
        "model=sasrec",
        "model.side_features=[genres,brand,price]",
        "model.exclude_history=true",
    )


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, attributed, retriever) -> Path:
    """DIN over ``retriever``, with the attributes."""
    run = rerank_run(
        tmp_path_factory.mktemp("pipeline") / "run",
        attributed,
        f"rerank.retriever.ckpt_path={retriever}",
        "model.side_features=[genres,brand,price]",
        "model.exclude_history=true",
        "baselines=false",
    )
    return Path(train(run)[0]["checkpoint"])


def held_codes(network) -> dict[str, np.ndarray]:
    attributes = network.embedder.attributes
    return {name: attributes.codes(name).numpy() for name in attributes.names}


def assert_codes(held: dict, want: dict) -> None:
    assert set(held) <= set(want)
    for name, codes in held.items():
        np.testing.assert_array_equal(codes, want[name], err_msg=name)


def test_a_checkpoint_carries_its_codes(retriever, attributed):
    held = held_codes(load(retriever).model)
    assert set(held) == set(ATTRIBUTES)
    assert_codes(held, catalogue(attributed).attributes)


def test_retriever_and_ranker_hold_the_same_codes_after_a_round_trip(pipeline, attributed):
    model = load(pipeline)
    want = catalogue(attributed).attributes
    assert set(held_codes(model.model)) == set(held_codes(model.retriever)) == set(ATTRIBUTES)
    assert_codes(held_codes(model.model), want)
    assert_codes(held_codes(model.retriever), want)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda codes: codes.__setitem__((0, 0), 1),  # PAD given a genre
        lambda codes: codes.__setitem__((5, 0), 10_000),  # beyond the vocabulary
        lambda codes: codes.__setitem__((5, 1), -3),
    ],
    ids=["pad", "too-large", "negative"],
)
def test_a_checkpoint_with_tampered_codes_is_refused(tmp_path, retriever, tamper):
    checkpoint = torch.load(retriever, map_location="cpu", weights_only=True)
    keys = [k for k in checkpoint["state_dict"] if k.endswith("attributes.codes_0")]
    assert keys, list(checkpoint["state_dict"])
    tamper(checkpoint["state_dict"][keys[0]])
    torch.save(checkpoint, tmp_path / "tampered.ckpt")
    with pytest.raises(CheckpointError, match="item attribute genres"):
        load(tmp_path / "tampered.ckpt")


def test_a_retriever_of_another_item_table_is_refused(tmp_path, recoded, retriever):
    """The same log and items, other codes: the retriever's embeddings mean other genres."""
    run = rerank_run(
        tmp_path / "run",
        recoded,
        f"rerank.retriever.ckpt_path={retriever}",
        "model.side_features=[genres]",
        "model.exclude_history=true",
    )
    with pytest.raises(OptionError, match=r"coded otherwise.*genres|genres.*coded otherwise"):
        train(run)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_serving_needs_no_data_folder_and_exports_recommend_alike(tmp_path, pipeline, attributed):
    """The codes travel in the weights: a model served from its checkpoint alone, and its
    exported programs, recommend as the checkpoint does."""
    requests = [*histories(attributed, 8), ["no-such-item"], []]
    model = recsys_seq.load(pipeline)
    for suffix in (".pt2", ".pt"):
        served = recsys_seq.load(export_to(tmp_path / suffix, pipeline, suffix))
        assert_serves_alike(served, model, requests, rules=(True,))
