"""Settings: one object built from ``SWEEPSTACK_*`` environment variables.

Only entry points (the CLI, the WSGI app, the Celery app module) call `Settings.from_env`;
everything below takes the object as an argument. Every variable is listed in
``configs/.env.example``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from core.errors import ConfigError

PREFIX = "SWEEPSTACK_"
#: Attempts of a trial whose worker process died (killed, crashed) before it ends failed.
DEFAULT_MAX_ATTEMPTS = 3
#: What SWEEPSTACK_QUEUE_TYPE may say (`core.broker.trial_queue`).
QUEUE_TYPES = ("classic", "quorum")


#: Tokens shorter than this are refused at start: a guessable token is no login.
MIN_TOKEN_LENGTH = 32
#: The least strength of a token (`token_bits`): a right token is never throttled
#: (`web.auth`), so guessing must be hopeless by itself.
MIN_TOKEN_BITS = 96


#: What a sweep may keep of its trials' weights (`core.spec.artifacts`).
ARTIFACTS_KEEP = ("best", "top_k", "all", "none")

#: The write concern the store's writes ask for unless ``SWEEPSTACK_WRITE_CONCERN`` or the
#: store's URL says otherwise (pymongo's `WriteConcern` arguments): acknowledged by a
#: majority of a replica set's members, each once the write is in its on-disk journal, so
#: that no acknowledged write is lost to a crash or a failover (a standalone server takes
#: ``majority`` as itself).
DEFAULT_WRITE_CONCERN: Mapping[str, Any] = MappingProxyType({"w": "majority", "j": True})
#: ``SWEEPSTACK_WRITE_CONCERN``'s keys, as the MongoDB URL options of the same names
#: (lower case), and pymongo's `WriteConcern` argument each sets.
_WRITE_CONCERN_KEYS = {"w": "w", "journal": "j", "wtimeoutms": "wtimeout"}


def _tokens(raw: str) -> dict[str, str]:
    """Parse ``name:token,name:token`` into {token: name}; each token at least
    `MIN_TOKEN_LENGTH` characters and given to one name only (errors name the owner,
    never the token)."""
    out: dict[str, str] = {}
    for i, pair in enumerate(p.strip() for p in raw.split(",") if p.strip()):
        name, sep, token = pair.partition(":")
        if not sep or not name or not token:
            shown = name if sep else "<no name>"
            raise ConfigError(
                f"{PREFIX}API_TOKENS item {i}: must be name:token, got an item for {shown!r}"
            )
        if token in out:
            raise ConfigError(
                f"{PREFIX}API_TOKENS: {out[token]!r} and {name!r} have the same token; "
                "each token must belong to one name"
            )
        out[token] = name
    check_tokens(out)
    return out


def token_bits(token: str) -> float:
    """A token's strength as a guesser sees it at best: its length times the bits of a
    character drawn from the distinct characters it uses (``a`` x 32: 0 bits; 32 random hex
    digits: about 120)."""
    distinct = len(set(token))
    return len(token) * math.log2(distinct) if distinct > 1 else 0.0


def check_tokens(tokens: Mapping[str, str]) -> None:
    """`ConfigError` naming the owner of any token under `MIN_TOKEN_LENGTH` characters or
    `MIN_TOKEN_BITS` bits (`token_bits`), never the token itself."""
    for token, name in tokens.items():
        if len(token) < MIN_TOKEN_LENGTH:
            raise ConfigError(
                f"{PREFIX}API_TOKENS: the token of {name!r} has {len(token)} characters; "
                f"at least {MIN_TOKEN_LENGTH} are required (e.g. `openssl rand -hex 24`)"
            )
        if token_bits(token) < MIN_TOKEN_BITS:
            raise ConfigError(
                f"{PREFIX}API_TOKENS: the token of {name!r} is too easy to guess (it repeats "
                f"a few characters: {token_bits(token):.0f} bits, at least {MIN_TOKEN_BITS} "
                "are required); make one with `openssl rand -hex 24`"
            )


def write_concern(raw: str) -> dict[str, Any]:
    """Parse ``SWEEPSTACK_WRITE_CONCERN`` (``w=majority,journal=true``: the URL options
    ``w``, ``journal`` and ``wtimeoutMS``, comma-separated) into pymongo's `WriteConcern`
    arguments. ``w`` is ``majority``, a number of members (at least 1: the store reads
    what each write changed, which an unacknowledged write does not say) or a tag set's
    name."""
    name = f"{PREFIX}WRITE_CONCERN"
    out: dict[str, Any] = {}
    for item in (part.strip() for part in raw.split(",") if part.strip()):
        key, sep, value = (x.strip() for x in item.partition("="))
        option = _WRITE_CONCERN_KEYS.get(key.lower())
        if not sep or not value or option is None:
            raise ConfigError(
                f"{name}: each item must be w=..., journal=... or wtimeoutMS=..., got {item!r}"
            )
        if option in out:
            raise ConfigError(f"{name}: {key} is given twice")
        if option == "j":
            if value.lower() not in ("true", "false"):
                raise ConfigError(f"{name}: journal must be true or false, got {value!r}")
            out[option] = value.lower() == "true"
        elif option == "wtimeout" or value.isdigit():
            if not value.isdigit() or (option == "w" and int(value) < 1):
                rule = "an integer >= 0" if option == "wtimeout" else "majority, a tag or >= 1"
                raise ConfigError(f"{name}: {key} must be {rule}, got {value!r}")
            out[option] = int(value)
        else:
            out[option] = value
    if not out:
        raise ConfigError(f"{name}: no option given in {raw!r}")
    return out


def _names(raw: str) -> frozenset[str]:
    return frozenset(n.strip() for n in raw.split(",") if n.strip())


_INT_FIELDS = frozenset(
    {
        "api_max_body_bytes",
        "api_max_trials",
        "api_max_epochs",
        "api_page_size",
        "api_max_page_size",
        "max_attempts",
        "auth_failures",
        "auth_window_seconds",
        "trusted_proxies",
        "torch_threads",
        "feed_window",
        "artifacts_top_k",
        "max_artifact_bytes",
        "max_sweep_artifact_bytes",
        "quota_running",
        "quota_trials",
        "quota_sweeps",
    }
)
# Ceilings on what a spec may ask for (core.spec.limits), checked at submit by the API and the CLI.
_CEILING_FIELDS = frozenset(
    {
        "max_world_size",
        "max_model_parameters",
        "max_dataset_elements",
        "max_epoch_samples",
        "max_description_bytes",
        "max_prototxt_bytes",
        "max_string_bytes",
        "max_activation_elements",
        "max_caffe_layers",
    }
)
_PATH_FIELDS = frozenset({"data_dir", "datasets_dir"})
_SECURE_CHOICES = ("auto", "true", "false")
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_BOOL_FIELDS = frozenset({"task_events"})
_SECONDS_FIELDS = frozenset(
    {"heartbeat_seconds", "stale_after_seconds", "api_timeout_seconds", "shutdown_grace_seconds"}
)


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{PREFIX}{name.upper()}: must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise ConfigError(f"{PREFIX}{name.upper()}: must be > 0, got {raw}")
    return value


@dataclass(frozen=True)
class Settings:
    """Where the broker and store are, and the knobs every process shares."""

    broker_url: str | None = None
    mongo_url: str | None = None
    mongo_db: str = "sweepstack"
    queue: str = "sweepstack.trials"
    # The trials queue's RabbitMQ type (core.broker.trial_queue): classic, or quorum
    # (replicated on a cluster's nodes, with a delivery limit of max_attempts).
    queue_type: str = "classic"
    data_dir: Path = field(default_factory=lambda: Path.home() / ".sweepstack")
    api_tokens: dict[str, str] = field(default_factory=dict)
    heartbeat_seconds: float = 10.0
    stale_after_seconds: float = 120.0
    # Seconds a worker sent SIGTERM (a scale-down) has to hand its trials back and exit
    # (`workers.shutdown`); compose's stop_grace_period and Kubernetes'
    # terminationGracePeriodSeconds must be longer.
    shutdown_grace_seconds: float = 30.0
    # The address other hosts reach this worker's data-parallel ranks at (workers.gang);
    # unset: this host's address on the route to the broker.
    rendezvous_host: str | None = None
    # A trial whose worker died this many times (lost attempts) ends failed: a poison trial.
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    log_level: str = "INFO"
    # REST API limits (api/): request body bytes, trials per sweep, epochs per trial, page sizes.
    api_max_body_bytes: int = 1_048_576
    api_max_trials: int = 100_000
    api_max_epochs: int = 10_000
    api_page_size: int = 50
    api_max_page_size: int = 500
    # Seconds the API waits for the store or broker before answering 503.
    api_timeout_seconds: float = 5.0
    flower_url: str | None = None
    # Inputs (core.spec.limits): the folder every dataset.path must lie in (resolved, symlinks
    # followed; the API checks it at submit, the worker again before reading), and the
    # ceilings a spec is held to at submit (422 naming the field and the limit).
    datasets_dir: Path = field(default_factory=Path.cwd)
    max_world_size: int = 8
    max_model_parameters: int = 100_000_000
    max_dataset_elements: int = 100_000_000
    max_epoch_samples: int = 10_000_000_000
    max_description_bytes: int = 4096
    # A Caffe spec's net and solver texts (core.spec.caffe.spec), each, in UTF-8 bytes.
    max_prototxt_bytes: int = 500_000
    # Every other string and key of a spec (dataset.target, a trainable's string parameters,
    # name ...; core.spec.strings), in UTF-8 bytes.
    max_string_bytes: int = 4096
    # The elements of one trial's blobs at once (batch x every blob of a sample, summed), the
    # worst trial of the sweep: a Caffe net's graph, the built-in network's layers, or what
    # a training function declares (core.spec.ceilings.activation_problem).
    max_activation_elements: int = 1 << 28
    # Layers of a Caffe net (each phase built per distinct net at submit, in the request).
    max_caffe_layers: int = 1000
    # Web auth (web/auth.py): owner names of SWEEPSTACK_API_TOKENS who see every sweep on the
    # dashboard; the key signing session cookies (unset: random per server start); Secure on
    # the cookie (auto: when the request came over https); failed logins or bearer tokens
    # allowed per client address per window before 429; the limiter's storage.
    admins: frozenset[str] = frozenset()
    secret_key: str | None = None
    session_cookie_secure: str = "auto"
    auth_failures: int = 10
    auth_window_seconds: int = 60
    ratelimit_storage_url: str = "memory://"
    # Reverse proxies in front of the web app whose X-Forwarded-For / -Proto it believes
    # (Werkzeug's ProxyFix): the client's address the throttle counts, and https. 0: none.
    trusted_proxies: int = 0
    # The address the web server is bound to, set by the `sweepstack` launchers; with no
    # tokens and a loopback address the dashboard is open (web.local_open.local_open).
    bind_host: str | None = None
    # Torch threads per worker process; None: `sweepstack worker` (and `run`) give each of
    # its training processes cores / processes (`cli.worker.worker_commands`), and a
    # worker started otherwise uses one.
    torch_threads: int | None = None
    # Celery task events from the workers (Flower's task list). Off by default: each event is
    # a publish the worker's main process waits on (publisher confirms), several ms a trial.
    # Flower turns them on at run time (`celery control enable_events`) whatever this says.
    task_events: bool = False
    # Trials in flight at once for a grid or random sweep without pruning (scheduler.feed):
    # submit stores this many, the scheduler creates the rest as the queue drains.
    feed_window: int = 2000
    # What sweeps keep of what they trained (core.spec.artifacts, core.store.artifacts): the
    # default of a spec without `artifacts:` (keep: best | top_k | all | none; top_k), where
    # the bytes go (unset: GridFS in the store; a folder, file:// or s3:// URL, with
    # s3_endpoint_url for an S3-compatible server), and the ceilings per file and per sweep.
    artifacts_keep: str = "top_k"
    artifacts_top_k: int = 10
    artifact_root: str | None = None
    s3_endpoint_url: str | None = None
    max_artifact_bytes: int = 2 << 30
    max_sweep_artifact_bytes: int = 50 << 30
    # The write concern of the store's writes (`write_concern`, `DEFAULT_WRITE_CONCERN`);
    # an option the store's URL names itself (w, journal, wtimeoutMS) wins over this.
    write_concern: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_WRITE_CONCERN))
    # Per-user quotas (core.shares, api/shares.py), each user's unless an admin set its own
    # (PUT /api/v1/users/NAME); unset: none. Trials running at once (the scheduler holds a
    # user's share to it), trials stored and sweeps active (a submit over either is 429).
    quota_running: int | None = None
    quota_trials: int | None = None
    quota_sweeps: int | None = None

    def store_options(self) -> dict[str, Any]:
        """What `core.store.store.Store` takes of these settings: the artifact root and
        ceilings, the write concern."""
        return {
            "write_concern": self.write_concern,
            "artifact_root": self.artifact_root,
            "s3_endpoint_url": self.s3_endpoint_url,
            "max_artifact_bytes": self.max_artifact_bytes,
            "max_sweep_artifact_bytes": self.max_sweep_artifact_bytes,
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from the environment (or any mapping, for tests)."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            if f.name == "api_tokens":
                values[f.name] = _tokens(raw)
            elif f.name == "admins":
                values[f.name] = _names(raw)
            elif f.name == "session_cookie_secure":
                if raw.lower() not in _SECURE_CHOICES:
                    raise ConfigError(
                        f"{PREFIX}SESSION_COOKIE_SECURE: must be auto, true or false, got {raw!r}"
                    )
                values[f.name] = raw.lower()
            elif f.name == "queue_type":
                if raw not in QUEUE_TYPES:
                    raise ConfigError(
                        f"{PREFIX}QUEUE_TYPE: must be one of {', '.join(QUEUE_TYPES)}, got {raw!r}"
                    )
                values[f.name] = raw
            elif f.name == "write_concern":
                values[f.name] = write_concern(raw)
            elif f.name == "artifacts_keep":
                if raw not in ARTIFACTS_KEEP:
                    raise ConfigError(
                        f"{PREFIX}ARTIFACTS_KEEP: must be one of {', '.join(ARTIFACTS_KEEP)}, "
                        f"got {raw!r}"
                    )
                values[f.name] = raw
            elif f.name in _BOOL_FIELDS:
                if raw.lower() not in _BOOLEANS:
                    raise ConfigError(
                        f"{PREFIX}{f.name.upper()}: must be true or false, got {raw!r}"
                    )
                values[f.name] = _BOOLEANS[raw.lower()]
            elif f.name in _PATH_FIELDS:
                values[f.name] = Path(raw).expanduser()
            elif f.name in _INT_FIELDS or f.name in _CEILING_FIELDS:
                values[f.name] = _positive_int(f.name, raw)
            elif f.name in _SECONDS_FIELDS:
                try:
                    values[f.name] = float(raw)
                except ValueError as exc:
                    raise ConfigError(
                        f"{PREFIX}{f.name.upper()}: must be a number, got {raw!r}"
                    ) from exc
                if values[f.name] <= 0:  # type: ignore[operator]
                    raise ConfigError(f"{PREFIX}{f.name.upper()}: must be > 0, got {raw}")
            else:
                values[f.name] = raw
        settings = cls(**values)  # type: ignore[arg-type]
        unknown = sorted(settings.admins - set(settings.api_tokens.values()))
        if unknown:
            raise ConfigError(
                f"{PREFIX}ADMINS: {', '.join(unknown)} not among the names of {PREFIX}API_TOKENS"
            )
        return settings
