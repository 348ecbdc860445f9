"""Coroutine twins of sync calls, for callers on an event loop (``PersonaMem.aadd = twin(add)``).

Each runs its sync call on a worker thread (``asyncio.to_thread``), so the encoder, SQL and an LLM
stage's wait do not block the loop; the arguments, results and exceptions are the sync call's.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["twin"]

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


def twin(call: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """The method ``call`` as a coroutine method with its signature, named ``a<name>``.

    The twin looks the sync method up on the object it is called on, so a subclass's or an
    instance's own ``search`` is what ``asearch`` runs.
    """
    name = call.__name__

    @functools.wraps(call)
    async def run(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        sync: Callable[P, R] = getattr(self, name)
        return await asyncio.to_thread(sync, *args, **kwargs)

    run.__name__ = f"a{call.__name__}"
    run.__qualname__ = f"{call.__qualname__.rpartition('.')[0]}.a{call.__name__}".lstrip(".")
    run.__doc__ = f":meth:`{call.__name__}` without blocking the event loop (it runs on a worker thread)."
    return run
