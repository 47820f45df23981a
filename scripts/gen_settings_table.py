"""Write the README's table of server settings from their one declaration (wiggle/_server/config.py).

Usage: python scripts/gen_settings_table.py [--check]
--check exits 1 if README.md's table differs from what this script makes (CI runs it).
The table stands between the two marker lines below, in README.md's "Configuration" section.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path

from wiggle._server.config import DECLARED, ServerConfig, env_name

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN = "<!-- settings: made by scripts/gen_settings_table.py from wiggle/_server/config.py -->"
END = "<!-- end of settings -->"


def _default(value: object) -> str:
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if value == "":
        return "unset"
    return f"`{value}`"


def table() -> str:
    defaults = ServerConfig()
    rows = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for field, setting in DECLARED.items():
        meaning = setting.help
        olds = ", ".join(f"`{o}`" for o in setting.old)
        if olds:
            meaning += f" (formerly {olds}: still read, with a warning)"
        flag = "--" + field.replace("_", "-")
        rows.append(f"| `{env_name(field)}` | `{flag}` | {_default(getattr(defaults, field))} | {meaning} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        print(f"README.md has no settings markers ({BEGIN!r} ... {END!r})", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    made = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if "--check" in argv:
        if made != text:
            print(
                "README.md's settings table is stale: run python scripts/gen_settings_table.py",
                file=sys.stderr,
            )
            return 1
        return 0
    README.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
