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


#: Options whose value is a file (completed with file names) or a folder.
FILE_OPTIONS = frozenset(
    {
        "from_file",
        "tls_ca",
        "client_cert",
        "client_key",
        "token_file",
        "tls_cert",
        "tls_key",
        "tls_client_ca",
        "auth_file",
    }
)
FOLDER_OPTIONS = frozenset({"path"})


def _mark_paths(parser: argparse.ArgumentParser, shtab: Any) -> None:
    """Tell shtab which options take a file or a folder, in every verb."""
    for action in parser._actions:
        if action.dest in FILE_OPTIONS:
            action.complete = shtab.FILE  # type: ignore[attr-defined]
        elif action.dest in FOLDER_OPTIONS:
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _mark_paths(sub, shtab)


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    from .parser import build_parser

    parser = build_parser()
    _mark_paths(parser, shtab)
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
