"""Write upstream Wiggle's definition JSON for a set of DSL workflows to tests/upstream/golden/.

Run it with the Python of a virtual environment that has PyPI ``wiggle-client`` installed (that
package is also named ``wiggle``, so it must never be installed next to ours):

    /tmp/wcvenv/bin/python scripts/gen_upstream_golden.py

Each file holds the ``definition`` dict the upstream client sends to RegisterWorkflow. The tests
(tests/upstream/test_definitions.py) read only these files; they never import the upstream
package. Handlers are never called here: only the graph matters.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import wiggle

if not hasattr(wiggle, "Blueprint") or not hasattr(wiggle, "Branch"):
    sys.exit("this needs the upstream client (pip install wiggle-client) in a separate venv, not ours")

from wiggle import Branch, Case, Retry, Workflow  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "upstream" / "golden"


def same(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


def yes(ctx: dict[str, Any]) -> bool:
    return True


def quickstart() -> Any:
    """The upstream README's quick start."""
    return (
        Workflow("order")
        .step("validate", same)
        .gate("in-stock", yes)
        .step("charge", same, queue="payments", retry=Retry.exponential(5, 0.1))
        .sleep("cool-off", seconds=1)
        .effect("notify", same)
        .build()
    )


def fork_gate() -> Any:
    """A fork whose second branch has a gate: its false path goes to the join."""
    return (
        Workflow("fork-gate")
        .step("validate", same)
        .fork(
            Branch.of("payment", lambda b: b.step("charge", same)),
            Branch.of("shipping", lambda b: b.gate("deliverable", yes).step("label", same)),
        )
        .step("notify", same)
        .build()
    )


def nested_fork() -> Any:
    """A fork inside a fork's branch, then more work in that branch before the outer join."""
    return (
        Workflow("nested-fork")
        .fork(
            Branch.of(
                "outer-a",
                lambda b: b.fork(
                    Branch.of("inner-a", lambda c: c.step("ia", same)),
                    Branch.of("inner-b", lambda c: c.step("ib", same)),
                    Branch.of("inner-c", lambda c: c.step("ic", same)),
                ).step("after-inner", same),
            ),
            Branch.of("outer-b", lambda b: b.step("ob", same)),
        )
        .step("done", same)
        .build()
    )


def choose_otherwise() -> Any:
    return (
        Workflow("choose-otherwise")
        .choose(
            Case.when("vip", yes, lambda b: b.step("concierge", same)),
            Case.when("regular", yes, lambda b: b.step("standard", same)),
            Case.otherwise("unknown", lambda b: b.step("thanks", same)),
        )
        .step("notify", same)
        .build()
    )


def choose_no_otherwise() -> Any:
    return (
        Workflow("choose-plain")
        .step("start", same)
        .choose(Case.when("vip", yes, lambda b: b.step("concierge", same)))
        .step("notify", same)
        .build()
    )


def do_while() -> Any:
    return (
        Workflow("do-while")
        .step("init", same)
        .do_while("more", yes, lambda b: b.step("work", same).step("count", same))
        .step("finish", same)
        .build()
    )


def fork_each() -> Any:
    """The upstream README's runtime fan-out."""
    return (
        Workflow("charge")
        .fork_each("charge-items", "items", "item", lambda b: b.step("price", same))
        .step("summarise", same)
        .build()
    )


def sub_child() -> Any:
    return Workflow("child").step("child-step", same).build()


def sub_parent() -> Any:
    return (
        Workflow("parent")
        .step("prepare", same)
        .sub_workflow("run-child", "child")
        .step("after", same)
        .build()
    )


def signal_timeout() -> Any:
    """A wait without a deadline, then one whose deadline fails the instance."""
    return (
        Workflow("signals")
        .await_signal("approved")
        .await_signal("shipped", timeout_s=30)
        .step("close", same)
        .build()
    )


def signal_escalation() -> Any:
    return (
        Workflow("escalation")
        .await_signal("approved", timeout_s=3600, escalation=lambda b: b.step("escalate", same))
        .step("close", same)
        .build()
    )


def explicit_version() -> Any:
    return Workflow("pinned", version=7).step("only", same).build()


def retries() -> Any:
    """Retry.none / fixed / forever / exponential, the default (forever), a queue per step."""
    return (
        Workflow("retries", default_queue="work")
        .step("none", same, retry=Retry.none())
        .step("fixed", same, retry=Retry.fixed(4, 2.5))
        .step("forever", same, retry=Retry.forever())
        .step("default", same)
        .gate("checked", yes, retry=Retry.exponential(3, 0.5), queue="gates")
        .build()
    )


def id_clash() -> Any:
    """Steps named like the ids the builder gives other nodes ("n2" is the sleep, "end4" the END)."""
    return Workflow("clash").step("n2", same).sleep("nap", millis=5).step("end4", same).build()


def empty() -> Any:
    """A workflow with no steps: its start is its END."""
    return Workflow("empty").build()


BUILDERS: dict[str, Callable[[], Any]] = {
    "quickstart": quickstart,
    "fork_gate": fork_gate,
    "nested_fork": nested_fork,
    "choose_otherwise": choose_otherwise,
    "choose_no_otherwise": choose_no_otherwise,
    "do_while": do_while,
    "fork_each": fork_each,
    "sub_workflow_child": sub_child,
    "sub_workflow_parent": sub_parent,
    "signal_timeout": signal_timeout,
    "signal_escalation": signal_escalation,
    "explicit_version": explicit_version,
    "retries": retries,
    "id_clash": id_clash,
    "empty": empty,
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, build in BUILDERS.items():
        text = json.dumps(build().definition, indent=2, sort_keys=False) + "\n"
        (OUT / f"{name}.json").write_text(text, encoding="utf-8")
        print(f"wrote {OUT / name}.json")


if __name__ == "__main__":
    main()
