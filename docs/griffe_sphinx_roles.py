"""A griffe extension for the API reference: Sphinx roles in docstrings become code spans.

aiokprod's docstrings use reST roles (``:class:`ProducerConfig```, ``:meth:`start```) that
Markdown would print literally. Before mkdocstrings renders a docstring, each role becomes a
plain code span; ``~a.b.C`` becomes ``C``, as Sphinx shows it. Only the rendered reference
changes, never the code. (Enabled in mkdocs.yml, under the python handler's extensions.)
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|exc|data|mod|obj|const):`(~?)([^`]+)`")


def _code_span(match: re.Match[str]) -> str:
    target = match.group(2).strip()
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def strip_roles(text: str) -> str:
    """``:class:`~a.B``` -> ```B```; text without roles comes back unchanged."""
    return _ROLE.sub(_code_span, text)


class SphinxRoles(griffe.Extension):
    """Rewrites every loaded object's docstring with :func:`strip_roles`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Called by griffe for every object it loads."""
        if obj.docstring is not None:
            obj.docstring.value = strip_roles(obj.docstring.value)
