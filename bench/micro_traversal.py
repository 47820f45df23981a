"""pyperf micro-benchmarks of graph traversal: successor/classify walks, graph compilation.

    python bench/micro_traversal.py --impl cython -o traversal-cython.json
    python bench/micro_traversal.py --impl python -o traversal-python.json
    python bench/micro_traversal.py --impl naive  -o traversal-naive.json
    python -m pyperf compare_to traversal-python.json traversal-cython.json traversal-naive.json --table

``--impl python|cython`` picks the twin through the selector (``WIGGLE_IMPL``); ``naive`` walks
the definition's Node objects through a dict each time, with no compiled graph.
Graphs: a 20-node linear graph, and a 60-node graph of forks, predicates, sleeps and user tasks.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

import pyperf

IMPLS = ("python", "cython", "naive")


def _impl_from_argv() -> str:
    # Importing anything from wiggle runs the selector, which reads WIGGLE_IMPL once: it must be
    # set before the first wiggle import, in the parent and in every pyperf worker alike.
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == "--impl" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--impl="):
            return arg.split("=", 1)[1]
    return "cython"


if _impl_from_argv() in ("python", "cython"):
    os.environ["WIGGLE_IMPL"] = _impl_from_argv()

from wiggle._model import Handback, Node, NodeKind, WorkflowDefinition  # noqa: E402

WORKER_KINDS = (NodeKind.TASK, NodeKind.PREDICATE)


def add_cmdline_args(cmd: list[str], args: Any) -> None:
    cmd.extend(("--impl", args.impl))


# graphs -----------------------------------------------------------------------------------------


def linear20() -> WorkflowDefinition:
    nodes = [Node(id=f"s{i}", kind=NodeKind.TASK, next=f"s{i + 1}") for i in range(19)]
    return WorkflowDefinition(
        name="line", start_node="s0", nodes=(*nodes, Node(id="s19", kind=NodeKind.END))
    ).validate()


def forks60() -> WorkflowDefinition:
    """Six segments of ten nodes: task, predicate, sleep, user task, fork of two branches, join."""
    nodes: list[Node] = []
    for k in range(6):
        after = f"g{k + 1}.task" if k < 5 else "end"
        nodes += [
            Node(id=f"g{k}.task", kind=NodeKind.TASK, next=f"g{k}.check"),
            Node(id=f"g{k}.check", kind=NodeKind.PREDICATE, next=f"g{k}.fork", alt_next=f"g{k}.nap"),
            Node(id=f"g{k}.nap", kind=NodeKind.SLEEP, sleep_millis=10, next=f"g{k}.approve"),
            Node(id=f"g{k}.approve", kind=NodeKind.USER_TASK, next=f"g{k}.fork"),
            Node(id=f"g{k}.fork", kind=NodeKind.FORK, branches=(f"g{k}.a1", f"g{k}.b1"), join=f"g{k}.join"),
            Node(id=f"g{k}.a1", kind=NodeKind.TASK, next=f"g{k}.a2"),
            Node(id=f"g{k}.a2", kind=NodeKind.TASK, next=f"g{k}.a3"),
            Node(id=f"g{k}.a3", kind=NodeKind.TASK, next=f"g{k}.join"),
            Node(id=f"g{k}.b1", kind=NodeKind.TASK, queue="gpu", next=f"g{k}.join"),
            Node(id=f"g{k}.join", kind=NodeKind.JOIN, fork=f"g{k}.fork", next=after),
        ]
    nodes.append(Node(id="end", kind=NodeKind.END))
    return WorkflowDefinition(
        name="forks", start_node="g0.task", nodes=tuple(nodes), checkpoints=("g2.a2",)
    ).validate()


# naive baseline ---------------------------------------------------------------------------------


class NaiveGraph:
    """No precomputation beyond a node dict: every call reads the Node objects."""

    def __init__(self, definition: WorkflowDefinition) -> None:
        self.definition = definition
        self.nodes = definition.node_map()

    def successor(self, node_id: str, predicate_value: bool = True) -> str | None:
        node = self.nodes[node_id]
        return node.alt_next if node.kind == NodeKind.PREDICATE and not predicate_value else node.next

    def classify(self, node_id: str, queues: Collection[str]) -> Handback | None:
        node = self.nodes[node_id]
        if node.kind in WORKER_KINDS:
            return None if (node.queue or self.definition.name) in queues else Handback.OTHER_QUEUE
        return {
            NodeKind.SLEEP: Handback.SLEEP,
            NodeKind.FORK: Handback.FORK,
            NodeKind.JOIN: Handback.JOIN,
            NodeKind.USER_TASK: Handback.USER_TASK,
            NodeKind.END: Handback.TERMINAL,
        }[node.kind]

    def is_checkpoint(self, node_id: str) -> bool:
        return node_id in self.definition.checkpoints


# benchmarks -------------------------------------------------------------------------------------


def bench_traversal(runner: pyperf.Runner, graph_type: Any) -> None:
    line, forks = linear20(), forks60()
    line_queues, fork_queues = frozenset({"line"}), frozenset({"forks"})
    g_line, g_forks = graph_type(line), graph_type(forks)
    fork_ids = [n.id for n in forks.nodes]

    def walk(graph: Any, ids: list[str], queues: frozenset[str]) -> Callable[[int], float]:
        # The checks a driver makes after each worker step: where next, may I run it, flush now?
        def timed(loops: int) -> float:
            t0 = time.perf_counter()
            for _ in range(loops):
                for node_id in ids:
                    nxt = graph.successor(node_id, True)
                    if nxt is not None:
                        graph.classify(nxt, queues)
                    graph.is_checkpoint(node_id)
            return time.perf_counter() - t0

        return timed

    def compile_graph(definition: WorkflowDefinition) -> Callable[[int], float]:
        def timed(loops: int) -> float:
            t0 = time.perf_counter()
            for _ in range(loops):
                graph_type(definition)
            return time.perf_counter() - t0

        return timed

    line_ids = [n.id for n in line.nodes if n.kind is NodeKind.TASK]
    runner.bench_time_func("traversal.walk[linear 20]", walk(g_line, line_ids, line_queues))
    runner.bench_time_func("traversal.walk[forks 60]", walk(g_forks, fork_ids, fork_queues))
    runner.bench_time_func("traversal.CompiledGraph()[forks 60]", compile_graph(forks))


def main() -> None:
    runner = pyperf.Runner(add_cmdline_args=add_cmdline_args)
    runner.argparser.add_argument(
        "--impl", choices=IMPLS, default="cython", help="which implementation to time"
    )
    args = runner.parse_args()
    runner.metadata["wiggle_impl"] = args.impl
    if args.impl == "naive":
        bench_traversal(runner, NaiveGraph)
        return
    import wiggle._fast as fast

    if fast.IMPL != args.impl:
        raise SystemExit(f"asked for {args.impl} but wiggle._fast.IMPL is {fast.IMPL}: {fast.IMPL_REASON}")
    bench_traversal(runner, fast.CompiledGraph)


if __name__ == "__main__":
    main()
