"""The hot paths, and the one place that picks their implementation.

``WIGGLE_IMPL`` is read once, at import: ``auto`` (default) uses the compiled Cython twins when
they import and the pure-Python twins otherwise, recording why in ``IMPL_REASON``; ``cython``
insists on the compiled twins (ImportError otherwise); ``python`` uses the pure twins. Nothing
else in Wiggle imports a ``*_c`` or ``*_py`` module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._env import IMPL_CHOICES, setting

__all__ = [
    "IMPL",
    "IMPL_REASON",
    "CompiledGraph",
    "diff",
    "apply_diff",
    "fold_join",
    "JoinConflict",
    "encode_batch",
    "decode_batch",
]

_CHOICES = IMPL_CHOICES  # declared with the variable (wiggle/_env.py)
_wanted = setting("WIGGLE_IMPL").lower()
if _wanted not in _CHOICES:
    # an import can only fail; the `wiggle` command checks first (wiggle/_env.py impl_choice)
    # and says so in one line, exit 2
    raise ImportError(f"WIGGLE_IMPL={_wanted!r} is not one of {', '.join(_CHOICES)}")

# MAX_BATCH_STEPS (the most steps one AdvanceRun batch may hold) is re-exported too, for the
# service to bound the repeated ``steps`` alike; not in __all__, which lists the twins' functions.
if TYPE_CHECKING:
    from .batch_py import MAX_BATCH_STEPS as MAX_BATCH_STEPS
    from .batch_py import decode_batch, encode_batch
    from .merge_py import JoinConflict, apply_diff, diff, fold_join
    from .traversal_py import CompiledGraph

    IMPL: str
    IMPL_REASON: str
elif _wanted == "python":
    from .batch_py import MAX_BATCH_STEPS as MAX_BATCH_STEPS
    from .batch_py import decode_batch, encode_batch
    from .merge_py import JoinConflict, apply_diff, diff, fold_join
    from .traversal_py import CompiledGraph

    IMPL = "python"
    IMPL_REASON = "WIGGLE_IMPL=python"
else:
    try:
        from .batch_c import MAX_BATCH_STEPS as MAX_BATCH_STEPS
        from .batch_c import decode_batch, encode_batch
        from .merge_c import JoinConflict, apply_diff, diff, fold_join
        from .traversal_c import CompiledGraph
    except ImportError as exc:
        if _wanted == "cython":
            raise ImportError(
                f"WIGGLE_IMPL=cython but the compiled extensions do not import ({exc}); "
                "reinstall with a C compiler available, or set WIGGLE_IMPL=auto"
            ) from exc
        from .batch_py import MAX_BATCH_STEPS as MAX_BATCH_STEPS
        from .batch_py import decode_batch, encode_batch
        from .merge_py import JoinConflict, apply_diff, diff, fold_join
        from .traversal_py import CompiledGraph

        IMPL = "python"
        IMPL_REASON = f"compiled extensions not importable: {exc}"
    else:
        IMPL = "cython"
        IMPL_REASON = "compiled extensions imported" + (
            " (WIGGLE_IMPL=cython)" if _wanted == "cython" else ""
        )
