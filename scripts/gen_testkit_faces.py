"""Generate the test kit's other two faces from WorkflowEnvironment (src/wiggle/_testing/environment.py).

Usage: python scripts/gen_testkit_faces.py [--check]
--check exits 1 if the committed src/wiggle/_testing/sync.py differs from what this script makes
(tests/testkit/test_faces_drift.py runs it).

The environment's API is written once, in WorkflowEnvironment. SyncWorkflowEnvironment (blocking)
and AsyncView (``env.aio``: awaitable from any event loop) forward each of its public methods
with its own signature and docstring: the sync face runs a coroutine on the environment's loop
and waits for it (``self._call``) or calls a plain method as it is (reading the clock); the view
awaits the coroutine from the caller's loop (``self._await``). Only those forwarded methods are
generated, between two marker comments in each class of sync.py; the rest of the file (the
thread, the loop, the lifecycle, ``target``, ``client``) is written by hand.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "wiggle" / "_testing" / "environment.py"
TARGET = ROOT / "src" / "wiggle" / "_testing" / "sync.py"

BEGIN = "    # --- forwarded to WorkflowEnvironment: made by scripts/gen_testkit_faces.py, do not edit ---\n"
END = "    # --- end of the forwarded methods ---\n"
#: The environment's own lifecycle: each face has its own (the sync face's thread, the fixture).
LIFECYCLE = {"start", "stop"}
#: Not generated for AsyncView: its start_worker / stop_worker are written by hand in
#: wiggle/_testing/sync.py (a worker started from the view runs on the environment's loop), as
#: are its plain clock reads; tests/testkit/test_api_parity.py holds them to the environment's.
NOT_ON_THE_VIEW = {"start_worker", "stop_worker"}
LINE_LENGTH = 110  # pyproject.toml [tool.ruff]


def _methods(source: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """WorkflowEnvironment's public methods (no properties), in source order."""
    tree = ast.parse(source)
    (cls,) = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WorkflowEnvironment")
    return [
        node
        for node in cls.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not node.name.startswith("_")
        and node.name not in LIFECYCLE
        and not node.decorator_list
    ]


def _arguments(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The call passing every parameter on as it came (``self`` left out)."""
    a = node.args
    out = [arg.arg for arg in [*a.posonlyargs, *a.args][1:]]
    if a.vararg:
        out.append(f"*{a.vararg.arg}")
    out += [f"{arg.arg}={arg.arg}" for arg in a.kwonlyargs]
    if a.kwarg:
        out.append(f"**{a.kwarg.arg}")
    return out


def _header(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef, is_async: bool) -> list[str]:
    """The method's ``def`` lines as the environment has them, ``async`` as the face needs; a
    signature split only for its length (no trailing comma) is joined when it now fits, as ruff
    format would."""
    docstring = node.body[0]
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant), node.name
    head = lines[node.lineno - 1 : docstring.lineno - 1]
    prefix = "    async def " if is_async else "    def "
    head[0] = prefix + head[0].split("def ", 1)[1]
    if len(head) == 3 and not head[1].rstrip().endswith(","):
        joined = head[0].rstrip("\n") + head[1].strip() + head[2].lstrip()
        if len(joined.rstrip("\n")) <= LINE_LENGTH:
            head = [joined]
    return head


def _body(target: str, name: str, args: list[str], returns: bool) -> list[str]:
    """``return <target>.<name>(<args>)``, wrapped in ``wrap`` (``self._call(``...``)``), on one
    line if it fits, else with one argument a line (a trailing comma keeps ruff from joining)."""
    wrap, inner = target.split("|")
    lead = "        " + ("return " if returns else "")
    one = f"{lead}{wrap}{inner}.{name}({', '.join(args)}){')' if wrap else ''}\n"
    if len(one.rstrip("\n")) <= LINE_LENGTH:
        return [one]
    if not wrap:
        return [f"{lead}{inner}.{name}(\n", *[f"            {a},\n" for a in args], "        )\n"]
    return [
        f"{lead}{wrap}\n",
        f"            {inner}.{name}(\n",
        *[f"                {a},\n" for a in args],
        "            )\n",
        "        )\n",
    ]


def _face(source: str, view: bool) -> str:
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    for node in _methods(source):
        is_async = isinstance(node, ast.AsyncFunctionDef)
        if view and (not is_async or node.name in NOT_ON_THE_VIEW):
            continue
        docstring = node.body[0]
        returns = not (isinstance(node.returns, ast.Constant) and node.returns.value is None)
        if view:
            target = "await self._await(|self._env"
        elif is_async:
            target = "self._call(|self.env"
        else:
            target = "|self.env"
        out.append("\n")
        out += _header(lines, node, is_async=view)
        out += lines[docstring.lineno - 1 : docstring.end_lineno]
        out += _body(target, node.name, _arguments(node), returns)
    return "".join(out)


def generate(source: str, target: str) -> str:
    """sync.py (``target``'s text) with both faces' forwarded methods made from ``source``."""
    parts = target.split(BEGIN)
    if len(parts) != 3 or any(END not in part for part in parts[1:]):
        raise SystemExit(f"{TARGET} must hold two sections between {BEGIN.strip()!r} and {END.strip()!r}")
    made = [parts[0]]
    for part, view in zip(parts[1:], (False, True), strict=True):
        made.append(BEGIN + _face(source, view).lstrip("\n") + "\n" + END + part.split(END, 1)[1])
    return "".join(made)


def main(argv: list[str]) -> int:
    """Write sync.py, or with --check compare it; returns the exit code."""
    current = TARGET.read_text()
    made = generate(SOURCE.read_text(), current)
    if "--check" in argv:
        if current != made:
            print(f"{TARGET} is out of date; run: python scripts/gen_testkit_faces.py")
            return 1
        return 0
    TARGET.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
