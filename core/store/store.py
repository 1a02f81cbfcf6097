"""The result store: sweeps, trials and per-epoch metrics in MongoDB; the only pymongo user.

`Store` is the platform's one source of truth (DESIGN.md). It is thread-safe (one pymongo
client, shared), must be created after a fork (pymongo clients are not fork-safe), and turns
every connection failure into `StoreUnavailable`, which callers retry. It owns the
connection (`connect`, `ensure_indexes`, `ping`, `close`) and offers each user a small
documented role, as an attribute, typed as the role's Protocol (`core.store.roles`, the
interface: signatures and contracts on one page); each role's implementation holds the store's
one shared state (`core.store.state`: the collections, clock and caches), none inherits from
another:

- ``store.lifecycle``, `TrialLifecycle` (workers; `core.store.lifecycle`): claim, heartbeat,
  report and finish attempts, many per round trip;
- ``store.admin``, `SweepAdmin` (API, scheduler; `core.store.admin`): create, cancel, requeue
  stale, retry failed, delete, request prunes, recount;
- ``store.feeding``, `Feeding` (scheduler; `core.store.feeding`): a sweep fed in windows, below;
- ``store.reads``, `Reads` (API, dashboard, CLI; `core.store.reads`, its pages read as
  `core.store.pages` says): sweeps, trial pages and the best, a trial and its curve, the
  change feed and aggregates;
- ``store.shares``, `Shares` (scheduler, API, dashboard; `core.store.shares`): the fair
  share's inputs (`core.shares`): active sweeps, users' weights and quotas, workers online;
- ``store.artifacts``, `Artifacts` (workers, API, dashboard, CLI; `core.store.artifacts`):
  trials' models, checkpoints and files, kept as the sweep's ``artifacts`` policy says.

The document shapes are in `core.store.records`, the checking of user input and the paging order
in `core.store.query`, the per-sweep summaries (best trials, finish log) in `core.store.summaries`.

Collections, their indexes (created idempotently by `ensure_indexes`), and what they serve:

- ``trials``
    - ``{sweep_id: 1, index: 1}``: trial pages in index order (windows of index values,
      see below), the trials of a page fetched by ``index $in``. Not unique: that costs
      SecantusDB ~13% of the bulk-insert rate, and ``create_sweep`` already refuses
      repeated indexes and point ids (a trial's ``_id`` is its sweep and point id).
    - ``{state: 1, sweep_id: 1, index: 1}``: counts and pages of one state, ``best``
      (complete trials), ``retry_failed`` (failed), ``cancel_sweep`` (queued, running),
      ``requeue_stale`` (every running trial of every sweep: few).
    - ``{sweep_id: 1, updated_at: 1}``: the change feed (``changed_rows``) and ``throughput``.
    - Claims, heartbeats, reports, finishes and prune requests address trials by ``_id``.
    - ``prune_requested {attempt, epoch, at}`` (absent until asked): `request_prune` sets it
      on a running attempt; heartbeats of that attempt answer ``prune`` and its worker
      finishes it ``pruned`` with ``pruned_epoch`` (the last epoch it trained). Heartbeat
      filters carry ``prune_requested.attempt $ne`` the attempt, so a request for an
      earlier (lost) attempt never stops a later one.
    - ``judged {attempt, epoch}`` (absent until the pruner first lets the attempt go on):
      `mark_judged` sets it; a worker waiting at a pruner's epoch reads it (`judged`) with
      ``prune_requested`` and trains on once either reaches that epoch.
- ``metrics``: ``{trial_id: 1, attempt: 1, epoch: 1}`` unique: one row per epoch of an
  attempt (a repeated report is a duplicate insert that changes nothing), a trial's curve
  in order.
- ``sweeps``: ``{owner: 1, created_at: -1}`` and ``{created_at: -1}``: ``list_sweeps``.
- ``sessions``: the dashboard's logins by their random id (`core.store.sessions`).
- ``users`` (a user's weight, allowance of high priority and quotas, by name) and
  ``scheduling`` (the workers online as a scheduler last found them): the fair share's
  inputs besides the sweeps' ``owner``, ``priority`` and ``weight`` (`core.store.shares`,
  `core.shares`); a handful of documents, read by ``_id`` or whole.
- ``artifacts`` (and GridFS's ``blobs.files``, ``blobs.chunks``): models, checkpoints and a
  training function's files (`core.store.artifacts`): ``{sweep_id: 1, kind: 1}`` (a sweep's
  models, its usage, its deletion) and ``{trial_id: 1}`` (a trial's artifacts).
- ``texts``: each sweep's large texts (a Caffe net's and solver's prototxt, a long string
  parameter), once per distinct text, which its trials' configs reference as
  ``{"$text": sha256}`` (`core.store.texts`): ``_id`` is ``f"{sweep_id}-{sha256}"`` (a
  trial's texts read by ``_id $in``), ``{sweep_id: 1, lines: 1}`` (its deletion, and a
  whole text that a text differing in a few lines is stored against). Stored before the
  trials that reference them, deleted with their sweep. 50 trials of a 0.9 MB Caffe spec
  stored 45 MB when each held its copy; about 1 MB with one, a grid over its values too.

Sweeps are fed in windows (`core.store.feeding`, `scheduler.feed`): a sweep document also holds
``planned`` (trials not created yet; counted as ``queued`` in ``counts`` and in
``trial_count``, so readers see the whole sweep from the first second), ``sending`` (the
ids of the window being stored and sent, emptied once sent; a restarted feeder sends
again those never claimed), ``lease`` ``{owner, expires}`` (the one scheduler feeding it,
taken by a conditional ``update_one``) and ``study_attrs`` (the search's Optuna study
state, for a rebuild). A trial created by a search also holds ``optuna`` ``{number,
system_attrs}``: with its params, state, objective and epochs, what rebuilds the study
after a restart so no point is asked twice.

Lifecycle writes are atomic per document: each is an ``update_one`` (or, for many trials,
an ``update_many`` or a bulk write of ``update_one``s, `core.store.lifecycle`) whose filter
names the state (and attempt) it expects, so of any number of concurrent callers exactly
one changes a trial; a careful claim then reads it with ``find_one``. (Not
``find_one_and_update``: SecantusDB 0.7 runs it in time proportional to the collection,
~0.75 s per call on 50,000 trials, against ~2 ms for ``update_one`` by ``_id``.)

Counts by state live on the sweep document and move with every transition, by the one
caller that made it (``$inc``), because SecantusDB counts by reading every matching
document (~3 s for 50,000 trials). The trial write and the counter write are two writes: a
process killed between them, or a connection lost after the first, leaves the counters one
off; `recount` recomputes them exactly.

Queries are shaped for SecantusDB's planner, which uses a compound index only when the
filter's equality fields are exactly an index prefix (then at most one range field), else
narrows by the first clause of the filter that some index serves (so ``_id`` leads every
single-trial filter), and reads, sorts and then limits every candidate document (~60 µs
each) without pushing a limit into the index. Every secondary index also slows inserts:
50,000 trials take ~8 s with none, ~28 s with these three. So:

- pages in index order (the default) ask for windows of index values
  (``{state, sweep_id, index: {$gt: a, $lte: b}}``), sized from the counts, and filter
  parameters in Python: a page costs about its own size;
- pages sorted by anything else read (index, sort value) of every candidate with a
  projection, order them in Python (`core.store.query.sort_key`, MongoDB's cross-type order),
  and fetch the page by ``index $in``: a page costs ~70 µs per trial in the filtered
  states (in the whole sweep when parameters are filtered too), as a server sort would.

Every write asks for the store's write concern (`write_concern_of`): by default
``w: "majority", j: true``, acknowledged once it is in the on-disk journal of a majority of
the replica set (of the one server, standalone), so an acknowledged write outlives a crash
of the server; ``SWEEPSTACK_WRITE_CONCERN`` and the URL's own options (which win) change it.

Times come from the clock of the process that writes (UTC, to the millisecond): hosts
should keep their clocks in step. The change feed (``changed_rows``) repeats changes younger
than `change_lag` seconds, so a write that lands late or from a host whose clock lags is still
delivered (at least once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pymongo
from bson.codec_options import CodecOptions
from pymongo import IndexModel
from pymongo.errors import ConfigurationError
from pymongo.write_concern import WriteConcern

from core.blobs import root_blobs
from core.errors import ConfigError
from core.settings import DEFAULT_WRITE_CONCERN
from core.store.admin import MongoSweepAdmin
from core.store.artifacts import MAX_BYTES as MAX_ARTIFACT_BYTES
from core.store.artifacts import MAX_SWEEP_BYTES as MAX_SWEEP_ARTIFACT_BYTES
from core.store.artifacts import MongoArtifacts
from core.store.feeding import MongoFeeding
from core.store.gridfs_blobs import GridFSBlobs
from core.store.lifecycle import MongoTrialLifecycle
from core.store.query import check_seconds
from core.store.reads import MongoReads
from core.store.records import utcnow
from core.store.roles import (
    Artifacts,
    Feeding,
    Reads,
    Sessions,
    Shares,
    SweepAdmin,
    TrialLifecycle,
)
from core.store.sessions import MongoSessions
from core.store.shares import MongoShares
from core.store.state import StoreState, available

__all__ = ["INDEXES", "INSERT_BATCH", "Store", "write_concern_of"]

#: Trials per insert when a sweep is created (the default of `Store`'s `insert_batch`).
INSERT_BATCH = 1000

INDEXES: dict[str, list[IndexModel]] = {
    "trials": [
        IndexModel([("sweep_id", 1), ("index", 1)], name="sweep_index"),
        IndexModel([("state", 1), ("sweep_id", 1), ("index", 1)], name="state_sweep_index"),
        IndexModel([("sweep_id", 1), ("updated_at", 1)], name="sweep_updated"),
    ],
    "metrics": [
        IndexModel(
            [("trial_id", 1), ("attempt", 1), ("epoch", 1)],
            name="trial_attempt_epoch",
            unique=True,
        ),
    ],
    "sweeps": [
        IndexModel([("owner", 1), ("created_at", -1)], name="owner_created"),
        IndexModel([("created_at", -1)], name="created"),
    ],
    "artifacts": [
        IndexModel([("sweep_id", 1), ("kind", 1)], name="sweep_kind"),
        IndexModel([("trial_id", 1)], name="trial"),
    ],
    "texts": [
        IndexModel([("sweep_id", 1), ("lines", 1)], name="sweep_lines"),
    ],
}


def write_concern_of(
    client: pymongo.MongoClient, default: Mapping[str, Any] = DEFAULT_WRITE_CONCERN
) -> WriteConcern:
    """The write concern of the store's writes: `default` (pymongo's `WriteConcern`
    arguments), with each option the client names itself (its URL's ``w``, ``journal``,
    ``wtimeoutMS``) in its place. `ConfigError` if the writes would go unacknowledged
    (``w=0``): the store reads what each write changed."""
    given = client.write_concern.document
    options = {**default, **given}
    if options.get("w") == 0:
        where = "the store URL" if "w" in given else "the write concern"
        raise ConfigError(
            f"w=0 ({where}) asks for unacknowledged writes; the store needs each write "
            "acknowledged: w=1 or more, or majority"
        )
    try:
        return WriteConcern(**options)
    except (ConfigurationError, TypeError, ValueError) as exc:
        raise ConfigError(f"store write concern {options}: {exc}") from exc


class Store:
    """Sweeps, trials and metrics in one MongoDB database (see the module docstring).

    Use its roles: `lifecycle`, `admin`, `feeding`, `reads`, `sessions`, `artifacts` (its
    bytes in GridFS, or under `artifact_root`: `core.blobs`). `clock` returns the current
    UTC time (tests pass a fake one); `change_lag` is how many seconds of changes the change
    feed repeats; `insert_batch` trials go in one insert; every write asks for
    `write_concern` (`write_concern_of`: options the client's URL names win).
    """

    def __init__(
        self,
        client: pymongo.MongoClient,
        db_name: str = "sweepstack",
        *,
        clock: Callable[[], datetime] = utcnow,
        change_lag: float = 2.0,
        insert_batch: int = INSERT_BATCH,
        artifact_root: str | None = None,
        s3_endpoint_url: str | None = None,
        max_artifact_bytes: int = MAX_ARTIFACT_BYTES,
        max_sweep_artifact_bytes: int = MAX_SWEEP_ARTIFACT_BYTES,
        write_concern: Mapping[str, Any] = DEFAULT_WRITE_CONCERN,
    ) -> None:
        self.client = client
        self.db = client.get_database(
            db_name,
            codec_options=CodecOptions(tz_aware=True, tzinfo=UTC),
            write_concern=write_concern_of(client, write_concern),
        )
        state = StoreState(
            self.db,
            clock=clock,
            change_lag=timedelta(seconds=check_seconds("change_lag", change_lag)),
            ensure_indexes=self.ensure_indexes,
            insert_batch=insert_batch,
        )
        self._state = state
        #: The trial lifecycle, for workers.
        self.lifecycle: TrialLifecycle = MongoTrialLifecycle(state)
        #: The feeding loop's writes, for the scheduler.
        self.feeding: Feeding = MongoFeeding(state)
        #: Reads, for the API, the dashboard, the CLI and the analysis.
        self.reads: Reads = MongoReads(state)
        #: The dashboard's logins, for the web layer.
        self.sessions: Sessions = MongoSessions(state)
        #: The fair share's inputs (active sweeps, users, workers online), for the
        #: scheduler, the API and the dashboard.
        self.shares: Shares = MongoShares(state)
        blobs = (root_blobs(artifact_root, s3_endpoint_url) if artifact_root
                 else GridFSBlobs(self.db))  # fmt: skip
        #: The fair share's inputs (active sweeps, users, workers online), for the
        #: scheduler, the API and the dashboard.
        self.shares: Shares = MongoShares(state)
        #: Models, checkpoints and files of trials, for workers, the API and the CLI.
        self.artifacts: Artifacts = MongoArtifacts(
            state, blobs, max_bytes=max_artifact_bytes, max_sweep_bytes=max_sweep_artifact_bytes
        )
        #: Sweep administration, for the API and the scheduler.
        self.admin: SweepAdmin = MongoSweepAdmin(state, self.feeding, self.artifacts)

    @classmethod
    def connect(
        cls, url: str, db_name: str = "sweepstack", *, timeout_ms: int = 5000, **kwargs: Any
    ) -> Store:
        """A store on a new client for `url`; nothing is sent until the first call.

        A malformed URL raises `ConfigError`; an unreachable server raises
        `StoreUnavailable` from the first call, after `timeout_ms`. `kwargs` go to `Store`.
        """
        try:
            client: pymongo.MongoClient = pymongo.MongoClient(
                url,
                serverSelectionTimeoutMS=timeout_ms,
                connectTimeoutMS=timeout_ms,
                appname="sweepstack",
                tz_aware=True,
            )
        except (ConfigurationError, ValueError, TypeError) as exc:
            raise ConfigError(f"store URL is not a MongoDB URL: {exc}") from exc
        return cls(client, db_name, **kwargs)

    @available
    def ensure_indexes(self) -> None:
        """Create the indexes the module docstring lists; a no-op when they exist."""
        for name, models in INDEXES.items():
            self.db[name].create_indexes(models)
        self._state.indexed = True

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()

    @available
    def ping(self) -> float:
        """Seconds for one round trip to the server; `StoreUnavailable` if there is none."""
        start = time.perf_counter()
        self.db.command("ping")
        return time.perf_counter() - start
