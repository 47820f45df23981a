"""A workflow graph as SVG, each node coloured by its state in one instance (or plain).

Layout: nodes in layers by their distance from the start node (breadth first), each layer one
row, edges as straight lines with arrow heads. Enough for the graphs the DSL builds; no
dependency, no client-side layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from ..._model import WorkflowDefinition

__all__ = ["layers", "render_svg", "NODE_W", "NODE_H"]

NODE_W, NODE_H = 168, 56
GAP_X, GAP_Y = 28, 40
PAD = 16


def layers(definition: WorkflowDefinition) -> list[list[str]]:
    """The node ids by layer (distance from the start), unreachable ones last."""
    nodes = definition.node_map()
    depth: dict[str, int] = {definition.start_node: 0}
    queue = [definition.start_node]
    while queue:
        node_id = queue.pop(0)
        n = nodes.get(node_id)
        if n is None:
            continue
        for nxt in (n.next, n.alt_next, *n.branches):
            if nxt and nxt not in depth:
                depth[nxt] = depth[node_id] + 1
                queue.append(nxt)
    last = max(depth.values(), default=0) + 1
    for n in definition.nodes:
        depth.setdefault(n.id, last)
    rows: dict[int, list[str]] = {}
    for n in definition.nodes:  # definition order inside a row: stable from version to version
        rows.setdefault(depth[n.id], []).append(n.id)
    return [rows[k] for k in sorted(rows)]


def render_svg(
    definition: WorkflowDefinition,
    states: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    links: Mapping[str, str] | None = None,
) -> str:
    """The graph as an inline ``<svg>``; ``states`` maps node id -> state (a CSS class), ``links``
    node id -> a page the node leads to (a sub-workflow's child: the node is a link to it)."""
    states = states or {}
    labels = labels or {}
    links = links or {}
    rows = layers(definition)
    widest = max((len(r) for r in rows), default=1)
    width = PAD * 2 + widest * NODE_W + (widest - 1) * GAP_X
    height = PAD * 2 + len(rows) * NODE_H + (len(rows) - 1) * GAP_Y
    pos: dict[str, tuple[int, int]] = {}
    for y, row in enumerate(rows):
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        x0 = (width - row_w) // 2
        for x, node_id in enumerate(row):
            pos[node_id] = (x0 + x * (NODE_W + GAP_X), PAD + y * (NODE_H + GAP_Y))
    out = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="graph of {escape(definition.name)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#667"/>'
        "</marker></defs>",
    ]
    for n in definition.nodes:
        for nxt, dashed in ((n.next, False), (n.alt_next, True), *((b, False) for b in n.branches)):
            if not nxt or nxt not in pos:
                continue
            x1, y1 = pos[n.id]
            x2, y2 = pos[nxt]
            sx, sy = x1 + NODE_W // 2, y1 + NODE_H
            ex, ey = x2 + NODE_W // 2, y2
            if y2 <= y1:  # an edge back up (a loop): leave from the side
                sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H // 2, x2 + NODE_W, y2 + NODE_H // 2
            dash = ' stroke-dasharray="5 4"' if dashed else ""
            out.append(
                f'<line x1="{sx}" y1="{sy}" x2="{ex}" y2="{ey}" stroke="#667" stroke-width="1.4"'
                f'{dash} marker-end="url(#arrow)"/>'
            )
    for n in definition.nodes:
        x, y = pos[n.id]
        state = states.get(n.id, "")
        label = labels.get(n.id, state)
        title = f"{n.id} ({n.kind.value})" + (f": {label}" if label else "")
        first, then = _two_lines(label or n.kind.value.lower())
        href = links.get(n.id)
        if href:
            out.append(f'<a class="node-link" href="{escape(href)}">')
        out.append(
            f'<g class="node {escape(state)}" data-node="{escape(n.id)}" data-state="{escape(state)}">'
            f"<title>{escape(title)}</title>"
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8"/>'
            f'<text x="{x + NODE_W // 2}" y="{y + 18}" text-anchor="middle" class="name">'
            f"{escape(_short(n.id, 22))}</text>"
            f'<text x="{x + NODE_W // 2}" y="{y + 34}" text-anchor="middle" class="sub">'
            f"{escape(_short(first, 26))}</text>"
            f'<text x="{x + NODE_W // 2}" y="{y + 48}" text-anchor="middle" class="sub when">'
            f"{escape(_short(then, 26))}</text></g>"
        )
        if href:
            out.append("</a>")
    out.append("</svg>")
    return "".join(out)


def _two_lines(label: str, n: int = 26) -> tuple[str, str]:
    """A label on a node's two lines: its second part (when its wait ends, how long its attempt
    may run: after ", ") on a line of its own; a long one without it ("waits for child wi-...")
    broken at its last space that fits, rather than cut."""
    first, _, then = label.partition(", ")
    if then or len(first) <= n:
        return first, then
    cut = first.rfind(" ", 0, n + 1)
    if cut <= 0:
        return first, ""
    return first[:cut], first[cut + 1 :]


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
