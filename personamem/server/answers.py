"""How a route answers: a model as its JSON, and a tenant's unknown id as a 404.

Shared by the SDK's routes (``routes.py``) and the server's own (webhooks, jobs), which ``routes.py``
gathers and so cannot import back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from personamem.errors import InvalidInputError

__all__ = ["answer", "or_404"]

T = TypeVar("T")


def answer(result: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``result`` as its model dumps it (pydantic serializes once; no second validation)."""
    return Response(result.model_dump_json(), status, headers=headers, media_type="application/json")


def or_404(call: Callable[[], T]) -> T:
    """``call()``; the ``InvalidInputError`` of an id the tenant does not have is a 404 with its message."""
    try:
        return call()
    except InvalidInputError as exc:
        raise HTTPException(404, str(exc)) from None
