"""What the CLI prints of a sweep's failed trials: their reasons, grouped and counted as the
dashboard's failed-trials card groups them (`core.analysis.failures`), so that a sweep whose
trials failed says so and why (``sweepstack run`` at its end, ``sweepstack status``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

from core.analysis.failures import failure_reasons

if TYPE_CHECKING:
    from core.store.store import Store

#: Failed trials read to group their reasons (pages of 1,000): a sweep with more is grouped
#: on its first ones, and says so.
MAX_READ = 10_000
#: Reasons shown, most frequent first.
SHOWN = 8


def sweep_failures(store: Store, sweep_id: str) -> tuple[list[dict[str, Any]], int]:
    """The sweep's failed trials grouped by reason (``{reason, n, example}``, most frequent
    first), and how many failed trials they were read from (at most `MAX_READ`)."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while len(rows) < MAX_READ:
        page, cursor = store.reads.trials(sweep_id, state="failed", limit=1000, cursor=cursor)
        rows.extend(page)
        if not cursor:
            break
    return failure_reasons(rows), len(rows)


def print_failures(console: Console, store: Store, sweep_id: str, counts: dict[str, int]) -> None:
    """A line for the failed trials, then one per reason (count, reason, an example trial);
    nothing when none failed."""
    failed = counts.get("failed", 0)
    if not failed:
        return
    total = sum(counts.values())
    reasons, read = sweep_failures(store, sweep_id)
    console.print(f"[red]{failed:,} of {total:,} trials failed[/]:", highlight=False)
    width = len(f"{reasons[0]['n']:,}") if reasons else 1
    for entry in reasons[:SHOWN]:
        console.print(
            f"  {entry['n']:>{width},}  {entry['reason']}  (e.g. trial #{entry['example']})",
            highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
    if len(reasons) > SHOWN:
        console.print(f"  … and {len(reasons) - SHOWN} other reasons", highlight=False)
    if read < failed:
        console.print(f"  (grouped over the first {read:,} failed trials)", highlight=False)
