"""Cycle finding for the repository's graphs (ensemble steps, ensembles nested in ensembles)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar


class _Sortable(Protocol):
    def __lt__(self, other, /) -> bool: ...


Node = TypeVar("Node", bound=_Sortable)  # a model's name, a step's number: sortable, for a stable report


def find_cycles(edges: Mapping[Node, Iterable[Node]]) -> list[list[Node]]:
    """One cycle per group of nodes that reach each other (self-loops included), as the list of its
    nodes in edge order; nodes are visited in sorted order so the report is stable."""
    found: list[list[Node]] = []
    groups: list[set[Node]] = []
    state: dict[Node, str] = {}  # node -> "open" while on the current path, "done" after
    path: list[Node] = []

    def visit(node: Node) -> None:
        state[node] = "open"
        path.append(node)
        for successor in sorted(edges.get(node, ())):
            if state.get(successor) == "open":
                cycle = path[path.index(successor) :]
                if not any(set(cycle) <= group or group <= set(cycle) for group in groups):
                    groups.append(set(cycle))
                    found.append(cycle)
            elif successor not in state:
                visit(successor)
        path.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found
