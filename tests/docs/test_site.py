"""The documentation site's pages (docs/, built by mkdocs.yml): their examples run, their
configuration reference is complete.

A ```python block whose first line is ``# file: NAME.py`` is a complete example
(docs/contributing.md, "Runnable examples"). Every such block of a page is written into one
folder, as a user would save it, and then:

- ``test_*.py`` runs under pytest, with no configuration of ours, and every test in it passes;
- a file with ``if __name__ == "__main__":`` runs as ``python NAME.py`` and exits 0. If it
  names the address ``127.0.0.1:7233`` it is a client of a running server: a real
  ``wiggle server`` (in memory) and ``wiggle worker NAME`` (the module's blueprints) are started
  on loopback first, and the file is pointed at that server. A ```console block of the page that
  starts with ``$ python NAME.py`` is the output to expect, line for line;
- any other file is a module the others import: it must import cleanly.

Every other ```python block is a fragment: it must still be valid Python.
"""

from __future__ import annotations

import ast
import enum
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from upstream.servers import WIGGLE, ServerProcess, server_env

from wiggle._security.credentials import ENV_VARS, Credentials
from wiggle._server.config import DECLARED, ServerConfig, env_name
from wiggle._worker.options import WorkerOptions

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SERVED_TARGET = "127.0.0.1:7233"
FENCE = re.compile(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
FILE_LINE = re.compile(r"\A# file: (\S+\.py)\s*\n")


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _blocks(page: Path, language: str) -> list[str]:
    return [
        textwrap.dedent(textwrap.indent(body, indent) if indent else body)
        for indent, lang, body in FENCE.findall(page.read_text())
        if lang == language
    ]


def examples(page: Path) -> dict[str, str]:
    """The page's complete examples: file name -> code."""
    found: dict[str, str] = {}
    for code in _blocks(page, "python"):
        marker = FILE_LINE.match(code)
        if marker:
            assert marker.group(1) not in found, f"{page.name} has two blocks for {marker.group(1)}"
            found[marker.group(1)] = code
    return found


def expected_outputs(page: Path) -> dict[str, str]:
    """File name -> the output a ```console block shows for ``$ python NAME.py``."""
    found: dict[str, str] = {}
    for block in _blocks(page, "console"):
        first, _, rest = block.partition("\n")
        command = re.fullmatch(r"\$ python (\S+\.py)", first.strip())
        if command:
            found[command.group(1)] = rest.rstrip("\n")
    return found


PAGES_WITH_EXAMPLES = [p for p in _pages() if examples(p)]


def test_the_site_has_runnable_examples() -> None:
    names = {p.relative_to(DOCS).as_posix() for p in PAGES_WITH_EXAMPLES}
    # the pages whose examples are complete programs (a page losing its markers would pass vacuously)
    assert {"getting-started.md", "workflows.md", "features.md", "testing.md"} <= names, names


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_python_block_is_valid_python(page: Path) -> None:
    for code in _blocks(page, "python"):
        try:
            ast.parse(code)
        except SyntaxError as exc:
            pytest.fail(f"{page.name}: a python block does not parse ({exc}):\n{code}")


PROTECTED = re.compile(r"(^([ \t]*)```.*?^\2```)|(<!--.*?-->)|(``.*?``|`[^`]*`)", re.M | re.S)


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_no_placeholder_in_prose_is_taken_for_html(page: Path) -> None:
    """``<worker>`` in prose is an unknown HTML tag to Markdown: the word silently disappears.
    Outside code it must be written ``&lt;worker&gt;`` (or put in backticks)."""
    prose = PROTECTED.sub("", page.read_text())
    swallowed = re.findall(r"<[A-Za-z][^>\n]*>", prose)
    assert not swallowed, f"{page.name}: {swallowed} would vanish from the page"


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=server_env(), capture_output=True, text=True, timeout=timeout)


def _served(name: str, code: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run ``name`` against a real ``wiggle server`` and ``wiggle worker`` for its module."""
    assert code.count(SERVED_TARGET) == 1, f"{name} names the server's address once"
    server = ServerProcess(folder / "server.log", server_env())
    worker = None
    try:
        (folder / name).write_text(code.replace(SERVED_TARGET, server.target))
        with open(folder / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [*WIGGLE, "--target", server.target, "worker", name.removesuffix(".py")],
                cwd=folder,
                env=server_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        run = _run([sys.executable, name], folder)
        worker.terminate()  # SIGTERM drains the worker, which then exits 0
        assert worker.wait(30) == 0, (folder / "worker.log").read_text()
        worker = None
        assert "lease expired" not in (folder / "worker.log").read_text()
        return run
    finally:
        if worker is not None:
            worker.kill()
            worker.wait(30)
        server.stop()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_the_page_examples_run(page: Path, tmp_path: Path) -> None:
    files = examples(page)
    outputs = expected_outputs(page)
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # a user's defaults, not this repository's
    assert set(outputs) <= set(files), f"{page.name} shows the output of a file it does not define"
    for name, code in files.items():
        if name.startswith("test_"):
            run = _run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pytest.ini", name],
                tmp_path,
            )
            tests = len(re.findall(r"^(?:async )?def test_", code, re.M))
            assert run.returncode == 0, f"{page.name}: {name}\n{run.stdout}{run.stderr}"
            assert f"{tests} passed" in run.stdout and "skipped" not in run.stdout, run.stdout
        elif 'if __name__ == "__main__":' in code:
            run = (
                _served(name, code, tmp_path)
                if SERVED_TARGET in code
                else _run([sys.executable, name], tmp_path)
            )
            assert run.returncode == 0, f"{page.name}: {name}\n{run.stdout}{run.stderr}"
            if name in outputs:
                assert run.stdout.rstrip("\n") == outputs[name], f"{page.name}: {name} printed\n{run.stdout}"
        else:
            module = name.removesuffix(".py")
            run = _run([sys.executable, "-c", f"import {module}"], tmp_path)
            assert run.returncode == 0, f"{page.name}: {name} does not import\n{run.stderr}"


# ---------------------------------------------------------------- the configuration reference


def _rows(page: Path) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        for line in page.read_text().splitlines()
        if line.startswith("| `")
    ]


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if value in ("", None):
        return "unset"
    return f"`{value}`"


def test_the_configuration_reference_lists_every_server_setting() -> None:
    rows = {row[0]: row for row in _rows(DOCS / "configuration.md")}
    defaults = ServerConfig()
    for field in ServerConfig.__struct_fields__:
        var = env_name(field)
        assert f"`{var}`" in rows, f"docs/configuration.md has no row for {field} ({var})"
        row = rows[f"`{var}`"]
        assert row[1] == f"`--{field.replace('_', '-')}`", row
        assert row[2] == _shown(getattr(defaults, field)), row
        assert DECLARED[field].help in row[4], row
        for old in DECLARED[field].old:
            assert f"`{old}`" in row[4], row
    assert len([r for r in rows if r.startswith("`WIGGLE_") and rows[r][1].startswith("`--")]) >= len(
        ServerConfig.__struct_fields__
    )


def test_the_configuration_reference_lists_every_worker_option_and_credential() -> None:
    rows = {row[0]: row for row in _rows(DOCS / "configuration.md")}
    for info in msgspec.structs.fields(WorkerOptions):
        row = rows.get(f"`{info.name}`")
        assert row is not None, f"docs/configuration.md has no row for WorkerOptions.{info.name}"
        assert row[1] == f"`--{info.name.replace('_', '-')}`", row
        assert row[2] == f"`WIGGLE_WORKER_{info.name.upper()}`", row
        assert row[4], f"WorkerOptions.{info.name} has no meaning in the table"
    for info in msgspec.structs.fields(Credentials):
        row = rows.get(f"`{info.name}`")
        assert row is not None and row[1] == f"`{ENV_VARS[info.name]}`", (info.name, row)


def test_the_settings_tables_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_settings_table.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------- the API reference


def test_the_api_reference_covers_every_public_name() -> None:
    """Each name ``wiggle`` and ``wiggle.testing`` export is rendered by a ``:::`` directive of
    docs/api/ (itself, or the module that holds it: ``wiggle.errors``, ``wiggle.testing``)."""
    import wiggle
    import wiggle.errors

    directives = {
        line.split(":::", 1)[1].strip()
        for page in (DOCS / "api").glob("*.md")
        for line in page.read_text().splitlines()
        if line.startswith(":::")
    }
    whole_modules = {m for m in directives if m in ("wiggle.errors", "wiggle.testing")}
    assert whole_modules == {"wiggle.errors", "wiggle.testing"}, directives
    missing = [
        name
        for name in wiggle.__all__
        if name != "__version__"
        and f"wiggle.{name}" not in directives
        and name not in wiggle.errors.__all__ + ["RetryableError"]
    ]
    assert not missing, f"not in the API reference: {missing}"


def test_the_upgrading_page_lists_every_migration() -> None:
    # docs/upgrading.md "Schema migrations" names the packaged SQL files; it stopped at 0010 once
    listed = re.findall(r"^- `(\d{4}_\w+\.sql)`$", (DOCS / "upgrading.md").read_text(), re.MULTILINE)
    packaged = sorted(p.name for p in (ROOT / "src/wiggle/_storage/postgres/sql").glob("*.sql"))
    assert listed == packaged
