"""The scheduler's side of early stopping: ask running attempts to stop
(`core.store.admin.SweepAdmin.request_prune`; implemented here).

The scheduler decides on the epoch rows that a trial should stop (Optuna's pruners,
`scheduler.search_session`) and writes the decision here; the worker that holds the attempt learns
it from its next heartbeat (`core.states.Heartbeat.PRUNE`), stops within an epoch, and
finishes the attempt ``pruned`` with ``pruned_epoch``, the last epoch it trained
(`workers.runner`). The request names the attempt, so a request for an attempt that was
lost meanwhile (requeued, taken over) never stops the attempt after it.

A trial's ``prune_requested`` is ``{attempt, epoch, at}``: the attempt asked to stop, the
epoch the decision was taken at, and when it was asked. Absent (or null) on a trial never
asked. Its finish keeps it, so a record shows when the stop was asked and when it came.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pymongo import UpdateOne

from core.errors import InvalidQuery
from core.states import TrialState
from core.store.batch_writes import not_pruned
from core.store.query import check_attempt, check_id
from core.store.state import StoreState

log = logging.getLogger(__name__)

_RUNNING = TrialState.RUNNING.value


def _check_request(trial_id: Any, request: Any) -> tuple[int, int]:
    """A checked (attempt, epoch) pair of a prune request (`InvalidQuery` naming the field)."""
    check_id("trial_id", trial_id)
    if not isinstance(request, tuple | list) or len(request) != 2:
        raise InvalidQuery(
            f"requests.{trial_id}", f"must be an (attempt, epoch) pair, got {request!r}"
        )
    attempt, epoch = request
    check_attempt(attempt)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise InvalidQuery("epoch", f"must be an integer >= 0, got {epoch!r}")
    return attempt, epoch


def request_prune(s: StoreState, requests: Mapping[str, tuple[int, int]]) -> list[str]:
    """`SweepAdmin.request_prune` (its docstring says what it does)."""
    if not isinstance(requests, Mapping):
        raise InvalidQuery("requests", f"must map trial ids to (attempt, epoch), got {requests!r}")
    checked = {t: _check_request(t, r) for t, r in requests.items()}
    if not checked:
        return []
    now = s.call_time()
    ops = [
        UpdateOne(
            {"_id": trial_id, "state": _RUNNING, "attempt": attempt, **not_pruned(attempt)},
            {"$set": {"prune_requested": {"attempt": attempt, "epoch": epoch, "at": now}}},
        )
        for trial_id, (attempt, epoch) in checked.items()
    ]
    done = s.trials.bulk_write(ops, ordered=False)
    if done.modified_count == len(checked):
        marked = list(checked)
    elif done.modified_count == 0:
        marked = []
    else:  # rare: some were finished, lost or asked already; which did this call mark?
        docs = s.docs(checked, {"prune_requested": 1})
        marked = [
            t
            for t, (attempt, _) in checked.items()
            if (docs.get(t, {}).get("prune_requested") or {}).get("at") == now
            and docs[t]["prune_requested"].get("attempt") == attempt
        ]
    log.info("prune requested for %d of %d trial(s)", len(marked), len(checked))
    return marked
