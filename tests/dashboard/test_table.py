"""The in-memory sweep table on a real store: first read, changes, cursors, memos, eviction."""

from __future__ import annotations

import pytest

from core.errors import NotFound
from core.states import TrialState
from dashboard.blueprint import STATE_KEY
from dashboard.payloads import DashboardState
from dashboard.snapshots import SNAPSHOT_NAME, TABLE_SNAPSHOT_NAME, first_payload
from dashboard.table import SweepTable, Tables, digest
from dashboard.trials import FIRST_QUERY
from tests.core import heartbeat, make_sweep
from tests.dashboard.conftest import Sweep, fresh_app, login, small_sweep_spec


def test_first_sync_reads_the_whole_sweep_then_only_changes(sweep: Sweep) -> None:
    table = SweepTable(sweep.sweep_id)
    table.sync(sweep.store.reads, min_interval=0)
    assert sorted(table.rows) == list(range(16)) and table.sweep["name"] == "dashboard-test"
    since, rows = table.snapshot()
    assert len(rows) == 16 and since == int(sweep.clock.now.timestamp() * 1000)
    assert table.changed_after(since) == (since, [])

    sweep.clock.advance(2)
    sweep.finish(3, objective=0.9)
    table.sync(sweep.store.reads, min_interval=0)
    cursor, changed = table.changed_after(since)
    assert [(r["index"], r["state"]) for r in changed] == [(3, "complete")]
    assert cursor > since and table.changed_after(cursor) == (cursor, [])
    assert table.changed_after(cursor + 10_000)[0] == cursor + 10_000  # never moves back
    assert table.sweep["counts"]["complete"] == 1


def test_a_heartbeat_is_not_a_change(sweep: Sweep) -> None:
    table = SweepTable(sweep.sweep_id)
    claimed = sweep.store.lifecycle.claim(sweep.ids[0], {"name": "w"}, stale_after=60)
    assert claimed is not None
    table.sync(sweep.store.reads, min_interval=0)
    version = table.version
    cursor, _ = table.snapshot()
    sweep.clock.advance(5)
    heartbeat(sweep.store, sweep.ids[0], 1)
    table.sync(sweep.store.reads, min_interval=0)
    assert table.version == version and table.changed_after(cursor)[1] == []


def test_sync_is_skipped_within_the_interval(sweep: Sweep) -> None:
    table = SweepTable(sweep.sweep_id)
    table.sync(sweep.store.reads, min_interval=60)
    sweep.clock.advance(1)
    sweep.finish(0, objective=0.5)
    table.sync(sweep.store.reads, min_interval=60)
    assert table.rows[0]["state"] == "queued"
    table.sync(sweep.store.reads, min_interval=0)
    assert table.rows[0]["state"] == "complete"


def test_memo_recomputes_when_the_table_changes_and_digests_say_so(sweep: Sweep) -> None:
    table = SweepTable(sweep.sweep_id)
    table.sync(sweep.store.reads, min_interval=0)
    calls = []

    def complete(prep: object) -> int:
        calls.append(1)
        return len(prep.done)  # type: ignore[attr-defined]

    first = table.memo("complete", complete)
    assert first == (digest(0), 0) and table.memo("complete", complete) == first
    assert len(calls) == 1
    sweep.clock.advance(1)
    sweep.finish(1, objective=0.4)
    table.sync(sweep.store.reads, min_interval=0)
    assert table.memo("complete", complete, max_age=60) == first  # young enough to keep
    assert table.memo("complete", complete) == (digest(1), 1)
    sweep.clock.advance(1)
    sweep.finish(2, TrialState.FAILED, error="boom")
    table.sync(sweep.store.reads, min_interval=0)
    assert table.memo("complete", complete) == (digest(1), 1)  # same value, same digest
    assert len(calls) == 3


def test_tables_forget_unknown_sweeps_and_evict_the_least_recently_used(sweep: Sweep) -> None:
    tables = Tables(max_rows=20, min_interval=0)
    with pytest.raises(NotFound):
        tables.get(sweep.store.reads, "abcdef012345")
    assert tables.peek("abcdef012345") is None
    first = tables.get(sweep.store.reads, sweep.sweep_id)
    assert tables.peek(sweep.sweep_id) is first
    other, _ = make_sweep(sweep.store, small_sweep_spec(name="other"))
    tables.get(sweep.store.reads, other)  # 32 rows > 20: the older table goes
    assert tables.peek(sweep.sweep_id) is None and tables.peek(other) is not None
    idle = Tables(idle_seconds=0, min_interval=0)
    idle.get(sweep.store.reads, sweep.sweep_id)
    idle.get(sweep.store.reads, other)
    assert idle.peek(sweep.sweep_id) is None and idle.peek(other) is not None


def _finish_sixteen(sweep: Sweep) -> None:
    """Trials 0-15 finished, objective index / 20; trial 3 failed ("boom")."""
    for index in range(16):
        sweep.finish(
            index,
            TrialState.FAILED if index == 3 else TrialState.COMPLETE,
            objective=index / 20,
            error="boom" if index == 3 else None,
        )


def _fresh_payload(sweep: Sweep) -> dict:
    """The first payload of the sweep page as a newly started server process answers it."""
    state = DashboardState(Tables(min_interval=0))
    payload = first_payload(state, sweep.store.reads, sweep.sweep_id, sweep.clock.now)
    return {"payload": payload, "table_read": state.tables.peek(sweep.sweep_id) is not None}


def test_a_finished_sweeps_first_payload_is_kept_for_the_next_server_process(
    sweep: Sweep,
) -> None:
    _finish_sixteen(sweep)
    computed = _fresh_payload(sweep)
    assert computed["table_read"]
    served = _fresh_payload(sweep)
    assert not served["table_read"]  # from the stored snapshot: no trial read
    assert served["payload"] == computed["payload"]

    # A retry moves the sweep on: the snapshot no longer matches, the page is computed.
    sweep.store.admin.retry_failed(sweep.sweep_id)
    live = _fresh_payload(sweep)
    assert live["table_read"] and live["payload"]["summary"]["counts"]["queued"] == 1
    sweep.finish(3, objective=0.99)
    again = _fresh_payload(sweep)
    assert again["table_read"] and again["payload"]["top"][0]["index"] == 3
    assert _fresh_payload(sweep) == {"payload": again["payload"], "table_read": False}


def test_a_running_sweeps_first_payload_is_never_kept(sweep: Sweep) -> None:
    sweep.finish(0, objective=0.5)
    assert _fresh_payload(sweep)["table_read"]
    assert _fresh_payload(sweep)["table_read"]
    assert sweep.store.reads.view_snapshot(sweep.sweep_id, SNAPSHOT_NAME) is None


def _fresh_table_page(sweep: Sweep, url: str, db_name: str, query: str = FIRST_QUERY) -> dict:
    """A page of the trials table as a newly started server process answers it."""
    app = fresh_app(sweep.store, url, db_name)
    with app.test_client() as client:
        login(client)
        answer = client.get(f"/dashboard/data/sweeps/{sweep.sweep_id}/table?{query}")
        assert answer.status_code == 200, answer.get_data(as_text=True)
        read = app.extensions[STATE_KEY].tables.peek(sweep.sweep_id) is not None
        return {"page": answer.get_json(), "table_read": read}


def test_a_finished_sweeps_first_table_page_is_kept_beside_its_first_payload(
    sweep: Sweep, secantus_url: str, db_name: str
) -> None:
    _finish_sixteen(sweep)
    computed = _fresh_table_page(sweep, secantus_url, db_name)
    assert computed["table_read"]
    _fresh_payload(sweep)  # the first open of the sweep page stores both
    assert sweep.store.reads.view_snapshot(sweep.sweep_id, TABLE_SNAPSHOT_NAME) is not None
    served = _fresh_table_page(sweep, secantus_url, db_name)
    assert served == {"page": computed["page"], "table_read": False}
    assert [row["index"] for row in served["page"]["rows"]] == list(range(16))

    # Any other query reads the sweep, as before.
    other = _fresh_table_page(sweep, secantus_url, db_name, "sort=objective&order=desc")
    assert other["table_read"] and other["page"]["rows"][0]["index"] == 15

    # A retry moves the sweep on: the kept page is stale, the table is read.
    sweep.store.admin.retry_failed(sweep.sweep_id)
    live = _fresh_table_page(sweep, secantus_url, db_name)
    assert live["table_read"] and live["page"]["rows"][3]["state"] == "queued"
