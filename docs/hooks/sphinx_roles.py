"""A griffe extension for the API reference: the docstrings' Sphinx roles become links.

The docstrings are Google style, but name other objects with reST roles (``:class:`~pkg.Name```,
``:meth:`search```), which mkdocstrings would print as they are. Before rendering, each role becomes
an optional cross-reference: a link where the target is documented on some page of the site, plain
code where it is not (so ``mkdocs build --strict`` never fails on a target the reference leaves out).
An ``Example:`` section (which ruff's Google convention accepts, griffe reads only as ``Examples:``)
is renamed so its doctest renders as code. Loaded by ``mkdocs.yml`` (``extensions:`` of the python
handler); nothing in the package imports it.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|data|mod|attr|exc|obj|const):`(?P<target>[^`]+)`")
EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", flags=re.M)
CALLABLE_ROLES = (":meth:", ":func:")


def _identifier(obj: griffe.Object, name: str) -> str | None:
    """The full path ``name`` means inside ``obj``'s docstring, or None if it resolves nowhere."""
    name = name.lstrip(".")
    if name.startswith("personamem."):
        return name
    head, _, rest = name.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            found = scope.resolve(head)
        except (griffe.NameResolutionError, KeyError, ValueError, AttributeError):
            scope = scope.parent
            continue
        return f"{found}.{rest}" if rest else found
    return None


def _link(obj: griffe.Object, match: re.Match[str]) -> str:
    """One role as an optional autorefs link (``<autoref ... optional>``) around its code."""
    target = match["target"].strip()
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<name>[^>]+)>", target)  # :class:`Title <pkg.Name>`
    if explicit:
        shown, target = explicit["title"], explicit["name"]
    elif target.startswith("~"):
        target = target[1:]
        shown = target.rsplit(".", 1)[-1]
    else:
        shown = target.lstrip(".")
    if match.group(0).startswith(CALLABLE_ROLES) and not shown.endswith(")"):
        shown += "()"
    code = f"<code>{html.escape(shown)}</code>"
    identifier = _identifier(obj, target)
    if identifier is None:
        return code
    return f'<autoref identifier="{html.escape(identifier)}" optional>{code}</autoref>'


class SphinxRoles(griffe.Extension):
    """Rewrites every loaded object's docstring, once the whole package is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring (an alias shares its target's, rewritten with the target)."""
        if obj.is_alias or obj.docstring is None:
            return
        text = EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
        obj.docstring.value = ROLE.sub(lambda match: _link(obj, match), text)
