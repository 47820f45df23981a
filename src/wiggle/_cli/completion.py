"""``wiggle completion bash|zsh|fish``: a shell completion script made from the ``wiggle`` parser.

shtab walks the same argparse parser the command runs (wiggle/_cli/parser.py), so every verb,
flag and choice completes as it is parsed; nothing is kept by hand.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parsers", "cmd_completion", "SHELLS"]

#: The shells a script is made for.
SHELLS = ("bash", "zsh", "fish")

EXAMPLE = """examples:
  wiggle completion bash > ~/.local/share/bash-completion/completions/wiggle
  wiggle completion zsh > "${fpath[1]}/_wiggle"        (then start a new shell)
  wiggle completion fish > ~/.config/fish/completions/wiggle.fish
  eval "$(wiggle completion bash)"                        (this shell only)"""


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    from .parser import build_parser

    parser = build_parser()
    print(shtab.complete(parser, shell=args.shell), end="")
    return 0


def add_parsers(sub: Any) -> None:
    """Add ``completion`` to the ``wiggle`` parser's subparsers ``sub``."""
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print a completion script for SHELL on stdout: every verb, flag and choice of "
        "this wiggle completes. Install it where your shell looks for completions.",
        epilog=EXAMPLE,
    )
    p.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    p.set_defaults(func=cmd_completion)
