"""Why a sweep's trials failed: failed trials grouped by their reason, most frequent first.

One grouping for every surface that shows it: the dashboard's failed-trials card and its
first screen when nothing completed, ``sweepstack run``'s end and ``sweepstack status``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from core.states import TrialState

_FAILED = TrialState.FAILED.value
#: What a failed trial with no recorded error is grouped under.
NO_REASON = "(no reason recorded)"


def reason_of(error: Any) -> str:
    """The reason a failed trial is grouped under: the first line of its error."""
    if not isinstance(error, str) or not error.strip():
        return NO_REASON
    return error.strip().splitlines()[0]


def failure_reasons(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The failed ones of `rows` (trials with ``state``, ``error`` and ``index``) grouped by
    `reason_of` their error, most frequent first: ``{reason, n, example}``, where
    ``example`` is the index of the first such trial met."""
    counts: Counter[str] = Counter()
    example: dict[str, int] = {}
    for row in rows:
        if row["state"] != _FAILED:
            continue
        reason = reason_of(row.get("error"))
        counts[reason] += 1
        example.setdefault(reason, row["index"])
    return [
        {"reason": reason, "n": n, "example": example[reason]}
        for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
