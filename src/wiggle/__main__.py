"""``python -m wiggle``: the ``wiggle`` command (wiggle/cli.py), for where its script is not on PATH."""

import sys

from .cli import main

sys.exit(main())
