"""Large texts of trials' configs, kept once per sweep and referenced by its trials (#29).

A Caffe trial's config holds the net's and the solver's prototxt texts (up to
``SWEEPSTACK_MAX_PROTOTXT_BYTES`` each), and a trainable's string parameters or a
``dataset.target`` can be long too (``SWEEPSTACK_MAX_STRING_BYTES``). Copied into every
trial, 50 trials of one 0.9 MB spec stored 45 MB, and every message to the workers carried
a copy. So every string of a config of at least `INLINE_BYTES` UTF-8 bytes is stored once
per sweep, in the ``texts`` collection, and the config holds a reference in its place::

    {"caffe": {"net_text": {"$text": "<sha256 of the text>"}, ...}}

A trial whose values change the text (a Caffe layer's ``num_output`` in a grid) has its own
text, and each distinct text is still stored once: the reference is the text's SHA-256.
A spec's keys are identifiers or known names, never ``$text``, so a reference is never
mistaken for a config's own mapping.

- `split_texts` takes the texts out of a config (`core.store.admin.create_sweep`,
  `core.store.feeding.add_trials`, and `scheduler.enqueue.carry`, so a message carries
  references, not texts), `join_texts` puts them back.
- `SweepTexts` stores a sweep's texts before its trials (`put`; a trial never references
  a text that is not stored), reads them back (`get`, through a small cache: a text's
  reference is its content, so a cached text is never stale), and deletes them with the
  sweep (`delete`).

Who sees texts and who references: `Reads.get_trial` (the API's trial, the dashboard's
trial page), `TrialLifecycle.claim` and `TrialLifecycle.resolve_texts` (the worker, before
it trains) and `Feeding.feed_trials` (a restarted feeder's points) give configs with their
texts; lists of trials (`Reads.trials`, `trials_by_id`, `trials_at`, `best`), which show
no config, and the messages hold references.

A ``texts`` document: ``_id`` (``f"{sweep_id}-{sha256}"``), ``sweep_id``, ``sha256``,
``bytes`` (its UTF-8 size), ``created_at``, and either the whole ``text`` with its count of
``lines``, or, where a grid's values change a few lines of a text, the text as ``changes``
([line index, line] pairs) against a whole text of the sweep with as many lines (``base``,
its digest): 50 values of one layer's ``num_output`` store one net and 50 lines. A text
rebuilt from its base is checked against its digest.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import BulkWriteError

__all__ = [
    "INLINE_BYTES",
    "REF",
    "SweepTexts",
    "join_texts",
    "split_texts",
    "text_refs",
]

log = logging.getLogger(__name__)

#: The key of a reference: ``{"$text": sha256}`` stands where the text was.
REF = "$text"
#: Strings of a config shorter than this many UTF-8 bytes stay in the config.
INLINE_BYTES = 1024
#: A text is stored as its changed lines against a whole one when at most this share of its
#: lines differ (`SweepTexts.put`).
DELTA_SHARE = 0.25
#: The characters of texts a process keeps in its cache (`SweepTexts.get`).
CACHE_BYTES = 64 << 20
_DUPLICATE_KEY = 11000
_HEX = frozenset("0123456789abcdef")


def digest(text: str) -> str:
    """The SHA-256 of a text's UTF-8 bytes, in hex: its reference."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _ref_of(value: Any) -> str | None:
    """The digest `value` refers to, if it is a reference."""
    if type(value) is dict and len(value) == 1:
        ref = value.get(REF)
        if isinstance(ref, str) and len(ref) == 64 and set(ref) <= _HEX:
            return ref
    return None


def split_texts(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """`config` with each string of at least `INLINE_BYTES` UTF-8 bytes replaced by its
    reference, and the texts by digest. A config without one is returned as a copy of its
    mappings (the strings and other leaves shared)."""
    texts: dict[str, str] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            # A str of fewer characters than INLINE_BYTES / 4 is surely under it in UTF-8.
            if len(value) * 4 >= INLINE_BYTES and len(value.encode("utf-8")) >= INLINE_BYTES:
                key = digest(value)
                texts[key] = value
                return {REF: key}
            return value
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return walk(config), texts


def text_refs(config: Any) -> set[str]:
    """The digests `config` refers to."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        ref = _ref_of(value)
        if ref is not None:
            found.add(ref)
        elif isinstance(value, Mapping):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(config)
    return found


def join_texts(config: Mapping[str, Any], texts: Mapping[str, str]) -> dict[str, Any]:
    """`config` with each reference replaced by its text from `texts` (one missing there
    stays a reference)."""

    def walk(value: Any) -> Any:
        ref = _ref_of(value)
        if ref is not None:
            return texts.get(ref, value)
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(config)


class SweepTexts:
    """The ``texts`` collection: each sweep's distinct large texts, by digest (module doc).

    Thread-safe; `get` keeps up to `cache_bytes` characters of texts read, least recently
    used first out, so a worker that trains a sweep's trials one after another reads its
    texts once. The cache is by digest alone: a digest names one text, whichever sweep
    holds it.
    """

    def __init__(self, collection: Collection, cache_bytes: int = CACHE_BYTES) -> None:
        self.collection = collection
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()

    def put(self, sweep_id: str, texts: Mapping[str, str], now: datetime) -> int:
        """Store the texts of `sweep_id` it does not hold yet; how many were new. Idempotent:
        a text already stored (an earlier window's, a concurrent writer's) is left as it is.

        A text that differs from a whole text of the sweep with as many lines in at most
        `DELTA_SHARE` of them is stored as those lines (`changes`) against it (`base`): a
        grid over a Caffe layer's or solver's values stores one net and a few lines per
        trial, not a net per trial."""
        if not texts:
            return 0
        ids = {f"{sweep_id}-{key}": key for key in texts}
        held = {d["_id"] for d in self.collection.find({"_id": {"$in": list(ids)}}, {"_id": 1})}
        bases: dict[int, tuple[str, list[str]] | None] = {}  # line count -> a whole text
        docs = []
        for tid, key in ids.items():
            if tid in held:
                continue
            text = texts[key]
            lines = text.split("\n")
            doc = {"_id": tid, "sweep_id": sweep_id, "sha256": key,
                   "bytes": len(text.encode("utf-8")), "created_at": now}  # fmt: skip
            if len(lines) not in bases:
                bases[len(lines)] = self._base(sweep_id, len(lines))
            base = bases[len(lines)]
            changes = _changes(base[1], lines) if base is not None else None
            if base is not None and changes is not None:
                doc.update(base=base[0], changes=changes)
            else:
                doc.update(text=text, lines=len(lines))
                if base is None:
                    bases[len(lines)] = (key, lines)
            docs.append(doc)
        if not docs:
            return 0
        try:
            self.collection.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            if any(e.get("code") != _DUPLICATE_KEY for e in exc.details.get("writeErrors", [])):
                raise
        return len(docs)

    def _base(self, sweep_id: str, lines: int) -> tuple[str, list[str]] | None:
        """A whole text of `sweep_id` of `lines` lines, as (digest, its lines), if it holds one."""
        doc = self.collection.find_one({"sweep_id": sweep_id, "lines": lines}, {"sha256": 1})
        if doc is None:
            return None
        text = self.get(sweep_id, [doc["sha256"]]).get(doc["sha256"])
        return None if text is None else (doc["sha256"], text.split("\n"))

    def get(self, sweep_id: str, keys: Iterable[str]) -> dict[str, str]:
        """The texts of `sweep_id` by digest; a digest it does not hold is left out."""
        wanted = set(keys)
        out: dict[str, str] = {}
        with self._lock:
            for key in wanted:
                text = self._cache.get(key)
                if text is not None:
                    self._cache.move_to_end(key)
                    out[key] = text
        missing = [f"{sweep_id}-{key}" for key in wanted if key not in out]
        if missing:
            deltas = []
            for doc in self.collection.find({"_id": {"$in": missing}}):
                if "text" in doc:
                    out[doc["sha256"]] = doc["text"]
                    self._remember(doc["sha256"], doc["text"])
                else:
                    deltas.append(doc)
            bases = self.get(sweep_id, {doc["base"] for doc in deltas}) if deltas else {}
            for doc in deltas:
                base = bases.get(doc["base"])
                if base is None:
                    continue
                lines = base.split("\n")
                for index, line in doc["changes"]:
                    lines[index] = line
                text = "\n".join(lines)
                if digest(text) != doc["sha256"]:
                    log.error("sweep %s: text %s does not rebuild from its base", sweep_id,
                              doc["sha256"])  # fmt: skip
                    continue
                out[doc["sha256"]] = text
                self._remember(doc["sha256"], text)
        return out

    def _remember(self, key: str, text: str) -> None:
        size = len(text)
        if size > self.cache_bytes:
            return
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = text
            self._cached += size
            while self._cached > self.cache_bytes:
                _, old = self._cache.popitem(last=False)
                self._cached -= len(old)

    def resolve(self, sweep_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """`config` with its texts in place of its references (one read for those not
        cached; none for a config without references). A text the store does not hold (its
        sweep was deleted) stays a reference, and is logged."""
        keys = text_refs(config)
        if not keys:
            return dict(config)
        texts = self.get(sweep_id, keys)
        if len(texts) < len(keys):
            log.error("sweep %s holds no text %s", sweep_id, ", ".join(sorted(keys - set(texts))))
        return join_texts(config, texts)

    def resolve_docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each trial document's ``config`` (where it has one) with its texts in place, in
        one read per sweep for all of them."""
        wanted: dict[str, set[str]] = {}
        for doc in docs:
            keys = text_refs(doc.get("config"))
            if keys:
                wanted.setdefault(doc["sweep_id"], set()).update(keys)
        texts = {sweep: self.get(sweep, keys) for sweep, keys in wanted.items()}
        for doc in docs:
            if doc.get("sweep_id") in texts and isinstance(doc.get("config"), Mapping):
                doc["config"] = join_texts(doc["config"], texts[doc["sweep_id"]])
        return docs

    def delete(self, sweep_id: str) -> int:
        """Delete the texts of `sweep_id`; how many went."""
        return self.collection.delete_many({"sweep_id": sweep_id}).deleted_count


def _changes(base: list[str], lines: list[str]) -> list[list[Any]] | None:
    """The lines of `lines` that differ from `base` (as many lines), as [index, line]; None
    when more than `DELTA_SHARE` of them do (the text is then stored whole)."""
    most = int(DELTA_SHARE * len(lines))
    out: list[list[Any]] = []
    for index, (old, new) in enumerate(zip(base, lines, strict=True)):
        if old != new:
            out.append([index, new])
            if len(out) > most:
                return None
    return out


def store_texts(
    texts: SweepTexts, sweep_id: str, docs: list[dict[str, Any]], now: datetime
) -> None:
    """Take the large texts out of the trial documents' configs (in place) and store them,
    before the documents are: a stored trial never references a missing text."""
    found: dict[str, str] = {}
    for doc in docs:
        doc["config"], own = split_texts(doc["config"])
        found.update(own)
    texts.put(sweep_id, found, now)
