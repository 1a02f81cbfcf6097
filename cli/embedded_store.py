"""``python -m cli.embedded_store``: SecantusDB for `sweepstack run`, stopped once.

`secantusd-py` stops from inside a signal handler; a second SIGTERM arriving while the
first handler holds the server's stop event re-enters it and deadlocks on that event's lock
(seen after a ``kill -9`` of `sweepstack run`: the store's parent-death signal came more
than once and the store never exited). Here SIGTERM and SIGINT are blocked in every thread
and the main thread takes them with `sigwait`: the first one stops the server, any more
wait in the queue, and the process exits.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import socket
import sys

_STOP = {signal.SIGTERM, signal.SIGINT}


def _wake_accept(server: object) -> None:
    """Shut the listening socket down so that the thread blocked in ``accept`` returns now.

    `SecantusDBServer.stop` closes that socket, which on Linux does not wake ``accept``,
    and then waits 2 s for the thread: most of the store's stop time. ``shutdown`` wakes it.
    """
    listener = getattr(server, "_socket", None)
    if isinstance(listener, socket.socket):
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cli.embedded_store",
        description="Serve a SecantusDB store until SIGTERM or SIGINT.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--storage-path", required=True)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--sync-on-commit",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fsync the journal before acknowledging each write (default; off only to "
        "measure what it costs: bench.bench_store_durability)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Blocked before the server starts its threads, so that they inherit the mask and
    # the signals wait for `sigwait` below instead of interrupting some thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP)
    from secantus import SecantusDBServer

    # Standalone, as a single mongod: no replica-set advertisement, and so no oplog. The
    # oplog serves change streams, which Sweepstack never opens, and each entry is one more
    # document written per insert or update (every epoch row, claim and finish).
    # Durable whatever ``SECANTUS_TEST_FAST_STORAGE`` says (the journal on, a checkpoint at
    # close), and the journal synced at every commit, before the write is acknowledged:
    # without it a ``kill -9`` of the store lost acknowledged writes (47 of 4,079 in a
    # chaos run, #29: their journal records were not written out yet); with it, none
    # (`tests/cli/test_embedded_store_durability.py`; the cost: `bench.bench_store_durability`).
    server = SecantusDBServer(
        host=args.host,
        port=args.port,
        storage_path=args.storage_path,
        enable_test_commands=False,
        replica_set_name=None,
        durable=True,
        sync_on_commit=args.sync_on_commit,
    )
    server.start()
    received = signal.sigwait(_STOP)
    logging.getLogger(__name__).info("%s: stopping", signal.Signals(received).name)
    _wake_accept(server)
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
