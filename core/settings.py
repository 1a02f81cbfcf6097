"""Settings: one object built from ``SWEEPSTACK_*`` environment variables.

Only entry points (the CLI, the WSGI app, the Celery app module) call `Settings.from_env`;
everything below takes the object as an argument. Every variable is listed in
``configs/.env.example``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from core.errors import ConfigError

PREFIX = "SWEEPSTACK_"


def _tokens(raw: str) -> dict[str, str]:
    """Parse ``name:token,name:token`` into {token: name}."""
    out: dict[str, str] = {}
    for i, pair in enumerate(p.strip() for p in raw.split(",") if p.strip()):
        name, sep, token = pair.partition(":")
        if not sep or not name or not token:
            raise ConfigError(f"{PREFIX}API_TOKENS item {i}: must be name:token, got {pair!r}")
        out[token] = name
    return out


_INT_FIELDS = frozenset(
    {
        "api_max_body_bytes",
        "api_max_trials",
        "api_max_epochs",
        "api_page_size",
        "api_max_page_size",
        "torch_threads",
    }
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
    data_dir: Path = field(default_factory=lambda: Path.home() / ".sweepstack")
    api_tokens: dict[str, str] = field(default_factory=dict)
    heartbeat_seconds: float = 10.0
    stale_after_seconds: float = 120.0
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
    # Torch threads per worker process (`sweepstack worker` sets it from cores / concurrency).
    torch_threads: int = 1

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
            elif f.name == "data_dir":
                values[f.name] = Path(raw).expanduser()
            elif f.name in _INT_FIELDS:
                values[f.name] = _positive_int(f.name, raw)
            elif f.name in ("heartbeat_seconds", "stale_after_seconds", "api_timeout_seconds"):
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
        return cls(**values)  # type: ignore[arg-type]
