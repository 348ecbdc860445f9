"""LangGraph adapter: a long-term memory store (``BaseStore``) whose items are personamem records.

Give it to an agent (``create_agent(..., store=PersonaMemStore(mem))``) or a graph
(``graph.compile(store=...)``) and what nodes and tools ``put`` becomes a user's searchable memory,
erased by ``PersonaMem.forget`` and seen by the application's own searches, ``context()`` and trained
selectors. Install with ``pip install "personamem[langgraph]"``.

How LangGraph's items map to personamem:

- **namespace → user.** ``user_of(namespace)`` names the user who owns an item; by default the first
  element, as in LangGraph's ``(user_id, "memories")``. A namespace (or search prefix) without a
  non-blank user element is an :class:`~personamem.errors.InvalidInputError` (a ``ValueError``): a
  search across users is exactly what per-user memory refuses.
- **item → one record of that user.** Record id ``lg:`` + 32 hex digits of SHA-256 of the JSON list
  ``[*namespace, key]``: stable, so a second ``put`` replaces the record in place, and fixed-length
  however deep the namespace. Kind ``note``; ``timestamp`` = the item's ``updated_at``. The text
  embedded is the first field of ``text_fields`` (LangGraph field paths, as in an ``IndexConfig``)
  that holds non-blank text, else the whole value as sorted JSON; a ``put(..., index=[paths])``
  names the fields for that item. Record metadata holds only JSON scalars, so the item is kept there
  as ``langgraph_namespace`` (a JSON list), ``langgraph_key``, ``langgraph_value`` (a JSON object)
  and ``langgraph_created_at`` (ISO 8601).
- **Records this adapter did not write** (the application's own, or ones whose metadata does not
  decode to an item owned by their user) are invisible to ``get``, ``search`` and
  ``list_namespaces``; they still share the user's memory and so the ranking of a query search.

Semantics, following LangGraph's own stores where personamem allows:

- In one ``batch``, reads see the store as it was before the batch's writes, and writes to the same
  (namespace, key) are deduplicated with the last one winning (InMemoryStore and PostgresStore).
- ``put`` keeps the item's ``created_at`` (PostgresStore does; InMemoryStore resets it). A ``None``
  value deletes the record, leaving no trace of it (``PersonaMem.delete``, whose cost grows with the
  user's record count). One put is written behind like ``PersonaMem.add``; several go in one
  transaction per batch.
- ``search`` without a query: the user's items under the prefix that pass the filter, most recently
  updated first (PostgresStore's order; ties in the order first written). With a query: the user's
  memory ranked by ``method`` (any name of :mod:`personamem.methods`; by default the pipeline the
  memory serves, as ``PersonaMem.search`` ranks with no method), kept under the prefix and filter,
  with the method's score. ``filters=`` at construction (personamem's grammar, as in
  ``PersonaMem.search``) narrows both to the records it admits, e.g. by ``timestamp`` (the item's
  ``updated_at``). A search's own ``filter`` compares value fields for equality
  (nested objects and lists too) or with ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, as
  InMemoryStore does, except that a missing or non-numeric field fails an ordering instead of raising.
- ``list_namespaces`` reads every record of every user: linear in the size of the store, meant for
  inspection rather than the request path.

A put's ``ttl`` (minutes) becomes the record's ``expires_at``: the item is hidden once it passes and
erased by the store's sweep. Reads do not refresh a TTL (``refresh_ttl`` is ignored).

Not supported: ``index=False``: every personamem record is embedded, so such an item is still found
by a query search. Values must be JSON-serializable, as LangGraph requires of every store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from personamem.errors import InvalidInputError, MissingExtraError

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        get_text_at_path,
        validate_op_namespace,
    )
except ImportError as exc:  # an adapter module: without its framework it has nothing to offer
    raise MissingExtraError(["langgraph"], "langgraph") from exc

from personamem.contract import MemoryApi
from personamem.memory import PersonaMem
from personamem.records import Record, RecordKind
from personamem.store.filters import parse_filters

__all__ = ["TEXT_FIELDS", "PersonaMemStore"]

TEXT_FIELDS = ("text", "content", "memory", "data")
"""Value fields embedded by default, first present first: the names LangGraph and LangMem examples use."""

_NAMESPACE = "langgraph_namespace"
_KEY = "langgraph_key"
_VALUE = "langgraph_value"
_CREATED = "langgraph_created_at"

_ORDERINGS: dict[str, Callable[[float, float], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def _first_element(namespace: tuple[str, ...]) -> str:
    """The default owner of a namespace: its first element, as in ``(user_id, "memories")``."""
    return namespace[0]


def _record_id(namespace: tuple[str, ...], key: str) -> str:
    """The id of the record that holds the item at (namespace, key): stable and fixed-length."""
    digest = hashlib.sha256(json.dumps([*namespace, key]).encode("utf-8")).hexdigest()
    return f"lg:{digest[:32]}"


class PersonaMemStore(BaseStore):
    """LangGraph long-term memory over any :class:`~personamem.contract.MemoryApi`, one user per namespace.

    The module docstring gives the mapping and the semantics. The store calls only the contract's
    operations, so ``memory`` may be a :class:`~personamem.PersonaMem` (or a tenant view of it) or a
    :class:`~personamem.client.Client` of a ``personamem serve`` (its key's tenant). Async calls run
    :meth:`batch` in a worker thread: the memory and the client are thread-safe, and a batch is many
    calls in an order (reads before writes) that one thread keeps simply.

    Args:
        memory: the memory, tenant view or client that holds the items.
        user_of: picks the user id from a namespace (default: its first element). It also receives
            search prefixes, so every prefix must reach the element it reads.
        method: how a search with a query ranks, a name from :mod:`personamem.methods` (None: the
            pipeline the memory serves).
        text_fields: LangGraph field paths tried in order for the text to embed.
        filters: only records this personamem filter admits are searched or listed (None: all).

    Raises:
        MethodError: an unknown method, or one that needs an LLM the memory does not have; over a
            ``PersonaMem`` the pipeline is built here, so this fails at construction rather than on
            the first search (over a client, the server answers it at the first search: the
            contract has no cheap call that builds a method).
        InvalidInputError: a bad filter.

    Examples:
        >>> store = PersonaMemStore(mem)  # doctest: +SKIP
        >>> store.put(("alice", "memories"), "diet", {"text": "I'm vegetarian."})  # doctest: +SKIP
        >>> store.search(("alice", "memories"), query="what should I cook?")  # doctest: +SKIP
    """

    supports_ttl = True

    def __init__(
        self,
        memory: MemoryApi,
        *,
        user_of: Callable[[tuple[str, ...]], str] = _first_element,
        method: str | None = None,
        text_fields: Sequence[str] = TEXT_FIELDS,
        filters: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(memory, PersonaMem):
            memory.pipeline(method)
        self.memory = memory
        self.user_of = user_of
        self.method = method
        self.text_fields = tuple(text_fields)
        self.filters = filters
        self._filter = parse_filters(filters)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` and return their results in order; reads see the store as before the writes.

        Raises:
            InvalidInputError: a namespace or prefix that names no user, or an unknown filter operator.
            InvalidNamespaceError: a namespace label LangGraph refuses (empty, or holding a ``.``).
        """
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise InvalidInputError(f"unknown store operation {type(op).__name__}")
        self._write(list(puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- operations -------------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        return self._item(self.memory.get(self._user(op.namespace), _record_id(op.namespace, op.key)))

    def _search(self, op: SearchOp) -> list[SearchItem]:
        user = self._user(op.namespace_prefix)
        found: list[tuple[Item | None, float | None]]
        if op.query:
            # rank the user's whole memory, then filter: asking for only offset + limit hits could
            # lose matches to other namespaces or to the application's records, and pages of one
            # ranking stay consistent; per-user memories are small, and searches score every record
            count = self.memory.count(user)
            hits = (
                self.memory.search(user, op.query, k=count, method=self.method, filters=self.filters)
                if count
                else []
            )
            found = [(self._item(hit.record), hit.score) for hit in hits]
        else:
            records = self.memory.records(user)
            admitted = records if self._filter is None else [r for r in records if self._filter.matches(r)]
            items = [self._item(record) for record in admitted]
            newest = sorted((item for item in items if item is not None), key=_updated, reverse=True)
            found = [(item, None) for item in newest]
        prefix = tuple(op.namespace_prefix)
        kept = [
            SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)
            for item, score in found
            if item is not None and item.namespace[: len(prefix)] == prefix and _passes(item.value, op.filter)
        ]
        return kept[op.offset : op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = {
            item.namespace
            for user in self.memory.users()
            for record in self.memory.records(user)
            if (item := self._item(record)) is not None
        }
        conditions = op.match_conditions or ()
        matching = {ns for ns in namespaces if all(_matches(condition, ns) for condition in conditions)}
        if op.max_depth is not None:
            matching = {ns[: op.max_depth] for ns in matching}
        return sorted(matching)[op.offset : op.offset + op.limit]

    def _write(self, puts: Sequence[PutOp]) -> None:
        """Apply the batch's final puts; every record is built (and checked) before anything is written."""
        now = datetime.now(UTC)
        records: list[dict[str, Any]] = []
        deletes: dict[str, list[str]] = {}
        for op in puts:
            user = self._user(op.namespace)
            rid = _record_id(op.namespace, op.key)
            if op.value is None:
                deletes.setdefault(user, []).append(rid)
                continue
            value = dict(op.value)
            old = self._item(self.memory.get(user, rid))
            records.append(
                {
                    "user_id": user,
                    "id": rid,
                    "text": self._text(value, op.index if isinstance(op.index, list) else self.text_fields),
                    "kind": RecordKind.NOTE,
                    "timestamp": now,
                    # LangGraph's TTL is in minutes; the store's sweep erases the item (reads do not
                    # refresh it: refresh_ttl is ignored)
                    "expires_at": None if op.ttl is None else now + timedelta(minutes=op.ttl),
                    "metadata": {
                        _NAMESPACE: json.dumps(list(op.namespace), ensure_ascii=False),
                        _KEY: op.key,
                        _VALUE: json.dumps(value, ensure_ascii=False),
                        _CREATED: (now if old is None else old.created_at).isoformat(),
                    },
                }
            )
        if len(records) == 1:
            self.memory.add(**records[0])  # written behind: the chat path's one memory per turn
        elif records:
            self.memory.add_many(records)
        for user, ids in deletes.items():
            self.memory.delete(user, ids)

    # -- mapping ----------------------------------------------------------------------------------

    def _user(self, namespace: tuple[str, ...]) -> str:
        """The user who owns ``namespace`` (or every namespace under a search prefix)."""
        try:
            user = self.user_of(namespace)
        except IndexError:
            user = ""
        if not isinstance(user, str) or not user.strip():
            raise InvalidInputError(
                f"namespace {namespace!r} names no user: PersonaMemStore keeps each user's items apart, "
                "so every namespace and search prefix must reach the element user_of reads "
                "(by default the first)"
            )
        return user

    def _text(self, value: dict[str, Any], paths: Sequence[str]) -> str:
        for path in paths:
            texts = [text for text in get_text_at_path(value, path) if text.strip()]
            if texts:
                return "\n".join(texts)
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    def _item(self, record: Record | None) -> Item | None:
        """The item ``record`` holds; None for no record or one this adapter did not write for its owner."""
        if record is None or record.timestamp is None:
            return None
        meta = record.metadata
        labels, key, value, created = (meta.get(name) for name in (_NAMESPACE, _KEY, _VALUE, _CREATED))
        if not (
            isinstance(labels, str)
            and isinstance(key, str)
            and isinstance(value, str)
            and isinstance(created, str)
        ):
            return None
        try:
            namespace = tuple(json.loads(labels))
            item = Item(
                value=json.loads(value),
                key=key,
                namespace=namespace,
                created_at=datetime.fromisoformat(created),
                updated_at=record.timestamp,
            )
            owned = self._user(namespace) == record.user_id
        except (TypeError, ValueError):  # not ours (InvalidInputError is a ValueError)
            return None
        valid = isinstance(item.value, dict) and all(isinstance(label, str) for label in namespace)
        return item if valid and owned and record.id == _record_id(namespace, key) else None


def _updated(item: Item) -> datetime:
    return item.updated_at


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether ``namespace`` starts (or ends) with the condition's path, ``"*"`` matching any label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        labels = namespace[: len(path)]
    elif condition.match_type == "suffix":
        labels = namespace[len(namespace) - len(path) :]
    else:
        raise InvalidInputError(f"unknown namespace match type {condition.match_type!r}")
    return all(want in ("*", label) for want, label in zip(path, labels, strict=True))


def _passes(value: dict[str, Any], conditions: dict[str, Any] | None) -> bool:
    """Whether ``value`` passes a LangGraph filter: every field compares as :func:`_compare` says."""
    return not conditions or all(_compare(value.get(field), want) for field, want in conditions.items())


def _compare(found: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if any(name.startswith("$") for name in want):
            return all(_apply(found, name, operand) for name, operand in want.items())
        return isinstance(found, dict) and _passes(found, want)
    if isinstance(want, list | tuple):
        return (
            isinstance(found, list | tuple)
            and len(found) == len(want)
            and all(_compare(f, w) for f, w in zip(found, want, strict=True))
        )
    return found == want


def _apply(found: Any, name: str, operand: Any) -> bool:
    if name == "$eq":
        return found == operand
    if name == "$ne":
        return found != operand
    ordering = _ORDERINGS.get(name)
    if ordering is None:
        raise InvalidInputError(f"unsupported filter operator {name!r}; use $eq, $ne, $gt, $gte, $lt or $lte")
    try:
        return ordering(float(found), float(operand))
    except (TypeError, ValueError):  # a missing or non-numeric field fails, where InMemoryStore raises
        return False
