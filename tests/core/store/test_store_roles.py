"""The roles' page (`core.store.roles`) is the whole interface, and true to its implementations.

Each implementation subclasses its Protocol and defines every method of it itself, with the
same signature; it has no public method the page does not document; every method of the page
says what it does; and `Store` hands out each role as its implementation. No server needed.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest

from core.store import roles
from core.store.admin import MongoSweepAdmin
from core.store.artifacts import MongoArtifacts
from core.store.feeding import MongoFeeding
from core.store.lifecycle import MongoTrialLifecycle
from core.store.reads import MongoReads
from core.store.store import Store

ROLES = [
    (roles.TrialLifecycle, MongoTrialLifecycle, "lifecycle"),
    (roles.SweepAdmin, MongoSweepAdmin, "admin"),
    (roles.Feeding, MongoFeeding, "feeding"),
    (roles.Reads, MongoReads, "reads"),
    (roles.Artifacts, MongoArtifacts, "artifacts"),
]


def methods(cls: type) -> set[str]:
    """The public methods a class defines itself."""
    return {name for name, value in vars(cls).items() if callable(value) and name[0] != "_"}


@pytest.fixture
def store() -> Iterator[Store]:
    """A store on a client that never connects (nothing is sent before the first call)."""
    made = Store.connect("mongodb://127.0.0.1:9/?connect=false", timeout_ms=10)
    yield made
    made.close()


@pytest.mark.parametrize(("protocol", "impl", "attribute"), ROLES)
def test_each_implementation_holds_every_method_of_its_page(
    protocol: type, impl: type, attribute: str
) -> None:
    assert protocol in impl.__mro__  # (a Protocol answers no issubclass unless runtime_checkable)
    assert not impl.__abstractmethods__
    assert methods(impl) == methods(protocol)
    for name in methods(protocol):
        assert inspect.signature(getattr(impl, name)) == inspect.signature(
            getattr(protocol, name)
        ), name
        assert (inspect.getdoc(getattr(protocol, name)) or "").strip(), name


@pytest.mark.parametrize(("protocol", "impl", "attribute"), ROLES)
def test_the_store_hands_out_each_role(
    store: Store, protocol: type, impl: type, attribute: str
) -> None:
    role = getattr(store, attribute)
    assert type(role) is impl and protocol in impl.__mro__


def test_a_missing_method_cannot_hide_behind_the_page() -> None:
    class Partial(roles.Feeding):
        def add_trials(self, *args: object, **kwargs: object) -> list[str]:
            return []

    with pytest.raises(TypeError, match="abstract"):
        Partial()  # type: ignore[abstract]
