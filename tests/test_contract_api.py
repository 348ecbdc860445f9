"""The operations are declared once (``personamem.contract.MemoryApi``): every surface offers each of them.

``PersonaMem`` (in process), ``Client`` (HTTP) and ``AsyncClient`` (HTTP, awaited) must each define
every operation of the protocol with its parameters (names, kinds, defaults, order); a surface may add
optional keyword-only parameters of its own (``PersonaMem.add_many``'s ``batch_size``, the deprecated
``pipeline`` of ``context``). A new operation added to the protocol fails here until all three have it.
"""

from __future__ import annotations

import inspect

import pytest

from personamem.client import AsyncClient, Client
from personamem.contract import MemoryApi
from personamem.memory import PersonaMem

OPERATIONS = sorted(
    name for name, value in vars(MemoryApi).items() if inspect.isfunction(value) and not name.startswith("_")
)
CLIENT_ONLY = {"close", "aclose", "health"}  # connection handling and the server's health probe


def test_the_protocol_declares_what_the_clients_offer() -> None:
    """Nothing public on a client escapes the protocol: a new call is declared there first."""
    for surface in (Client, AsyncClient):
        public = {name for name in vars(surface) if not name.startswith("_")}
        assert public - CLIENT_ONLY == set(OPERATIONS), surface.__name__
    assert {"add", "search", "context", "feedback", "get", "records", "delete", "forget"} <= set(OPERATIONS)


@pytest.mark.parametrize("name", OPERATIONS)
@pytest.mark.parametrize("surface", [PersonaMem, Client, AsyncClient], ids=lambda c: c.__name__)
def test_every_surface_offers_the_operation_with_its_signature(surface: type, name: str) -> None:
    assert name in vars(surface), f"{surface.__name__} does not define {name}"
    declared = inspect.signature(getattr(MemoryApi, name))
    offered = inspect.signature(getattr(surface, name))
    assert inspect.iscoroutinefunction(getattr(surface, name)) == (surface is AsyncClient)
    wanted, wanted_rest = _split(declared)
    given, given_rest = _split(offered)
    assert [(p.name, p.kind, p.default) for p in given[: len(wanted)]] == [
        (p.name, p.kind, p.default) for p in wanted
    ], f"{surface.__name__}.{name}{offered} differs from MemoryApi.{name}{declared}"
    assert [(p.name, p.annotation) for p in given_rest] == [(p.name, p.annotation) for p in wanted_rest]
    for extra in given[len(wanted) :]:  # only optional keywords may be added, before a trailing **
        optional = (
            extra.kind is inspect.Parameter.KEYWORD_ONLY and extra.default is not inspect.Parameter.empty
        )
        assert optional, f"{surface.__name__}.{name} adds a required parameter {extra.name}"
    assert offered.return_annotation == declared.return_annotation, f"{surface.__name__}.{name}"


def _split(signature: inspect.Signature) -> tuple[list[inspect.Parameter], list[inspect.Parameter]]:
    """The named parameters, and the trailing ``**`` (the read options' ``**read``) if there is one."""
    named = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    rest = [p for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    return named, rest


def test_the_sync_surfaces_are_the_protocol_for_type_checkers_too() -> None:
    """``PersonaMem`` and ``Client`` subclass the protocol, so mypy checks their overrides."""
    assert MemoryApi in PersonaMem.__mro__ and MemoryApi in Client.__mro__
