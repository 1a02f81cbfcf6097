"""Contract of a sweep's texts (`core.store.texts`, #29): a config's long strings are stored once
per sweep, its trials hold references, and every role that gives a config to be shown or trained
gives the texts back.

Runs against the real server of the `mongo_url` fixture; each test uses a database of its own.
"""

from __future__ import annotations

from core.spec.sweep import load_spec
from core.states import TrialState
from core.store.records import utcnow
from core.store.store import INDEXES, Store
from core.store.texts import (
    INLINE_BYTES,
    REF,
    SweepTexts,
    digest,
    join_texts,
    split_texts,
    text_refs,
)
from scheduler.enqueue import carry, carry_group
from scheduler.expand import expand
from tests.core import WORKER, finish

LONG = ["a" * 2000, "é" * 1500]  # both over INLINE_BYTES in UTF-8


def long_spec() -> object:
    """Four trials: two widths x two long targets (each a text of its own)."""
    return load_spec({
        "name": "texts", "dataset": {"path": "d.csv", "target": LONG},
        "model": {"hidden_units": [4, 8]},
    })  # fmt: skip


def test_split_and_join_round_trip() -> None:
    config = {"a": {"text": "x" * INLINE_BYTES, "short": "y" * (INLINE_BYTES - 1)}, "n": [1, "z"]}
    compact, texts = split_texts(config)
    assert compact["a"]["short"] == config["a"]["short"] and compact["n"] == [1, "z"]
    assert set(compact["a"]["text"]) == {REF} and text_refs(compact) == set(texts)
    assert join_texts(compact, texts) == config
    assert join_texts(compact, {}) == compact  # a missing text stays a reference


def test_texts_are_stored_once_and_given_back_where_shown_or_trained(store: Store) -> None:
    spec = long_spec()
    points = expand(spec, with_config=True)
    configs = {p.id: p.config for p in points}
    sweep_id = store.admin.create_sweep(spec, points[:2], total=4)
    assert store.feeding.add_trials(sweep_id, spec, points[2:]) == [
        f"{sweep_id}-{p.id}" for p in points[2:]
    ]
    texts = store.db["texts"]
    assert sorted(d["text"] for d in texts.find({"sweep_id": sweep_id})) == sorted(LONG)
    for doc in store.db["trials"].find({"sweep_id": sweep_id}):
        assert set(doc["config"]["dataset"]["target"]) == {REF}

    # Shown: the trial; fed: a restarted feeder's points.
    for p in points:
        assert store.reads.get_trial(f"{sweep_id}-{p.id}")["config"] == configs[p.id]
    fed = store.feeding.feed_trials(sweep_id)
    assert {d["key"]: d["config"] for d in fed} == configs

    # Trained: the careful claim, and a message's copy (references, as `carry` sends it).
    first = f"{sweep_id}-{points[0].id}"
    claimed = store.lifecycle.claim(first, WORKER, stale_after=60)
    assert claimed is not None and claimed["config"] == configs[points[0].id]
    sent = carry(configs[points[1].id])["config"]
    assert sent != configs[points[1].id] and len(repr(sent)) < 1000
    assert store.lifecycle.resolve_texts(sweep_id, sent) == configs[points[1].id]
    group = carry_group([configs[p.id] for p in points], [0] * 4)["configs"]
    assert [store.lifecycle.resolve_texts(sweep_id, c) for c in group] == list(configs.values())

    # Deleted with the sweep.
    assert finish(store, first, claimed["attempt"], TrialState.COMPLETE, result={})
    store.admin.cancel_sweep(sweep_id)
    assert store.admin.delete_sweep(sweep_id)["texts"] == 2
    assert texts.count_documents({"sweep_id": sweep_id}) == 0


def test_the_texts_collection_is_indexed_by_sweep(store: Store) -> None:
    names = {i["name"] for i in store.db["texts"].list_indexes()}
    assert {m.document["name"] for m in INDEXES["texts"]} <= names


def test_a_text_differing_in_a_few_lines_is_stored_as_those_lines(store: Store) -> None:
    base = "\n".join(f"layer {{ name: 'l{i}' num_output: 10 }}" for i in range(200))
    near = [base.replace("'l7' num_output: 10", f"'l7' num_output: {w}") for w in (20, 30)]
    other = base + "\nlayer { name: 'extra' }"  # a line more: stored whole
    far = "\n".join(f"different {i}" for i in range(200))  # every line differs: whole
    texts = {digest(t): t for t in [base, *near, other, far]}
    SweepTexts(store.db["texts"]).put("s1", texts, utcnow())
    docs = {d["sha256"]: d for d in store.db["texts"].find({"sweep_id": "s1"})}
    assert {k for k, d in docs.items() if "text" in d} == {digest(base), digest(other), digest(far)}
    for text in near:
        assert docs[digest(text)]["base"] == digest(base)
        assert docs[digest(text)]["changes"] == [[7, text.split("\n")[7]]]
    # A later window's text is stored against the whole text already there.
    later = base.replace("'l9' num_output: 10", "'l9' num_output: 99")
    SweepTexts(store.db["texts"]).put("s1", {digest(later): later}, utcnow())
    assert store.db["texts"].find_one({"sha256": digest(later)})["base"] == digest(base)
    # Read back whole by a process with nothing cached, each checked against its digest.
    fresh = SweepTexts(store.db["texts"])
    assert fresh.get("s1", [*texts, digest(later)]) == {**texts, digest(later): later}
    # A delta whose base does not rebuild it is refused, not served.
    store.db["texts"].update_one({"sha256": digest(later)}, {"$set": {"changes": [[9, "x"]]}})
    assert SweepTexts(store.db["texts"]).get("s1", [digest(later)]) == {}
