"""Write the settings tables from their one declaration: the README's and the site's.

Usage: python scripts/gen_settings_table.py [--check]
--check exits 1 if a table differs from what this script makes (CI runs it).

- README.md, "Configuration": the server settings (wiggle/_server/config.py, ``ServerConfig``
  fields and their ``Setting``).
- docs/configuration.md: the server settings with their bounds, and the worker options
  (wiggle/_worker/options.py: ``WorkerOptions`` fields, described in its docstring's
  ``Attributes:`` section), and what clients present (wiggle/_security/credentials.py:
  ``Credentials`` and ``ENV_VARS``), and the other variables (wiggle/_env.py: ``VARIABLES``),
  each between its pair of marker lines.
"""

from __future__ import annotations

import enum
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import msgspec

from wiggle._env import VARIABLES
from wiggle._security.credentials import ENV_VARS as CREDENTIAL_VARS
from wiggle._security.credentials import Credentials
from wiggle._server.config import DECLARED, ServerConfig, env_name
from wiggle._worker.options import WorkerOptions

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CONFIG_PAGE = ROOT / "docs" / "configuration.md"
WORKER_PREFIX = "WIGGLE_WORKER_"  # wiggle/_cli/worker.py ENV_PREFIX


def _markers(what: str) -> tuple[str, str]:
    return (
        f"<!-- {what}: made by scripts/gen_settings_table.py from wiggle/_server/config.py -->"
        if what == "settings"
        else f"<!-- {what}: made by scripts/gen_settings_table.py -->",
        "<!-- end of settings -->" if what == "settings" else f"<!-- end of {what} -->",
    )


def _default(value: object) -> str:
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if value == "" or value is None:
        return "unset"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _meaning(field: str) -> str:
    setting = DECLARED[field]
    meaning = setting.help
    olds = ", ".join(f"`{o}`" for o in setting.old)
    if olds:
        meaning += f" (formerly {olds}: still read, with a warning)"
    return _cell(meaning)


def _bounds(field: str) -> str:
    setting = DECLARED[field]
    if setting.low is None or setting.high is None:
        return ""
    return f"{setting.low:g} – {setting.high:g}"


def table() -> str:
    """The README's table: every server setting's variable, flag, default and meaning."""
    defaults = ServerConfig()
    rows = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for field in DECLARED:
        flag = "--" + field.replace("_", "-")
        rows.append(
            f"| `{env_name(field)}` | `{flag}` | {_default(getattr(defaults, field))} | {_meaning(field)} |"
        )
    return "\n".join(rows)


def server_reference() -> str:
    """The site's server table: the README's columns and each numeric setting's bounds."""
    defaults = ServerConfig()
    rows = [
        "| variable | flag | default | bounds | meaning |",
        "|---|---|---|---|---|",
    ]
    for field in DECLARED:
        flag = "--" + field.replace("_", "-")
        rows.append(
            f"| `{env_name(field)}` | `{flag}` | {_default(getattr(defaults, field))} | "
            f"{_bounds(field)} | {_meaning(field)} |"
        )
    return "\n".join(rows)


def attributes(cls: type) -> dict[str, str]:
    """Each field's description from ``cls``'s docstring (its ``Attributes:`` section)."""
    doc = cls.__doc__ or ""
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    found: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        entry = re.match(r"^ {8}(\w+): (.*)$", line)
        if entry:
            name = entry.group(1)
            found[name] = entry.group(2).strip()
        elif name and line.startswith(" " * 12):
            found[name] += " " + line.strip()
        elif line.strip():
            name = ""
    return found


def worker_reference() -> str:
    """The site's worker table: every WorkerOptions field as the option, variable and default
    ``wiggle worker`` takes (its defaults as they are with no WIGGLE_ variable set)."""
    described = attributes(WorkerOptions)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    with mock.patch.dict(os.environ, clean, clear=True):
        defaults = WorkerOptions()
    rows = [
        "| field | `wiggle worker` option | variable | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for info in msgspec.structs.fields(WorkerOptions):
        meaning = described.get(info.name)
        if meaning is None:
            raise SystemExit(
                f"WorkerOptions.{info.name} is not described in the docstring's Attributes section"
            )
        flag = "--" + info.name.replace("_", "-")
        var = WORKER_PREFIX + info.name.upper()
        value = getattr(defaults, info.name)
        default = f"`{str(value).lower()}`" if isinstance(value, bool) else _default(value)
        rows.append(f"| `{info.name}` | `{flag}` | `{var}` | {default} | {_cell(meaning)} |")
    return "\n".join(rows)


def credentials_reference() -> str:
    """The site's table of what a client or a worker presents: each Credentials field's variable."""
    described = attributes(Credentials)
    rows = ["| field | variable | meaning |", "|---|---|---|"]
    for info in msgspec.structs.fields(Credentials):
        meaning = described.get(info.name)
        if meaning is None:
            raise SystemExit(
                f"Credentials.{info.name} is not described in the docstring's Attributes section"
            )
        rows.append(f"| `{info.name}` | `{CREDENTIAL_VARS[info.name]}` | {_cell(meaning)} |")
    return "\n".join(rows)


def other_variables() -> str:
    """The site's table of the variables no settings class holds (wiggle/_env.py VARIABLES)."""
    rows = ["| variable | read by | default | meaning |", "|---|---|---|---|"]
    for variable in VARIABLES.values():
        rows.append(
            f"| `{variable.name}` | {_cell(variable.read_by)} | {_default(variable.default)} | {_cell(variable.help)} |"
        )
    return "\n".join(rows)


def _fill(text: str, what: str, make: Callable[[], str], where: str) -> str:
    begin, end = _markers(what)
    if begin not in text or end not in text:
        raise SystemExit(f"{where} has no {what} markers ({begin!r} ... {end!r})")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{make()}\n{end}{tail}"


def made() -> dict[Path, str]:
    """Each file as this script makes it."""
    readme = _fill(README.read_text(), "settings", table, "README.md")
    page = CONFIG_PAGE.read_text()
    page = _fill(page, "server settings", server_reference, "docs/configuration.md")
    page = _fill(page, "worker options", worker_reference, "docs/configuration.md")
    page = _fill(page, "client credentials", credentials_reference, "docs/configuration.md")
    page = _fill(page, "other variables", other_variables, "docs/configuration.md")
    return {README: readme, CONFIG_PAGE: page}


def main(argv: list[str]) -> int:
    stale = [path for path, text in made().items() if path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(
                f"{path.relative_to(ROOT)}'s settings table is stale: run python scripts/gen_settings_table.py",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for path, text in made().items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
