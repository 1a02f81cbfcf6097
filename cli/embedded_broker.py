"""The embedded broker's sending side, keeping the order messages are sent in.

kombu's filesystem transport names each message file ``{ms}_{uuid4}.{queue}.msg`` and a
worker takes the first name in sorted order. Messages sent within one millisecond (dozens,
when a sweep is enqueued) therefore come out in the order of random uuids, and the
longest-first order of `scheduler.order` would be lost. `Transport` differs only in the
name: ``{ms}_{sequence}-{uuid4}``, so that names sort in the order this process sent
them. Workers keep kombu's own transport (only the name written changes, not how it is
read), and a sender built with it stays on Celery's code path.

A message is written under a temporary name (``.{name}.tmp``, which no reader takes) and
renamed to its final name once whole (atomic on POSIX). kombu writes under the final name,
so a reader could take a message not yet written, and a sender killed mid-message (kill -9
of `sweepstack run`) left an empty file that made every worker exit on the next read.

Used by `sweepstack run` for the filesystem broker: ``app.conf.broker_transport =
ORDERED_TRANSPORT``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

ORDERED_TRANSPORT = f"{__name__}:Transport"

_sequence = itertools.count()
_sequence_lock = threading.Lock()


class Channel(filesystem.Channel):
    """kombu's filesystem channel, with message file names that sort in sending order."""

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        with _sequence_lock:
            number = next(_sequence)
        name = f"{round(monotonic() * 1000)}_{number:012d}-{uuid.uuid4()}.{queue}.msg"
        path = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.tmp")
        try:
            with open(partial, "wb", buffering=0) as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.rename(partial, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise ChannelError(f"Cannot add file {path!r} to directory") from exc


class Transport(filesystem.Transport):
    """kombu's filesystem transport with `Channel`."""

    Channel = Channel
