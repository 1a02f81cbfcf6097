"""The parsed docker-compose.yml, once per module."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy import COMPOSE, load


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load(COMPOSE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]
