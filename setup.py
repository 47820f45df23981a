"""Build hook for the optional Cython hot paths; pyproject.toml declares everything else.

``WIGGLE_IMPL`` at build time (the same variable the runtime selector reads):

- ``auto`` (default): compile ``wiggle._fast.{merge,traversal,batch}_c`` when Cython and a C
  compiler work; otherwise print a warning and install the pure-Python twins only. The wheel is
  then tagged ``py3-none-any``, because it holds no compiled code.
- ``cython``: the extensions are mandatory; any failure fails the build (what CI and
  cibuildwheel use, so a broken compile can never ship as a silently pure wheel).
- ``python``: no extensions at all: ``WIGGLE_IMPL=python python -m build --wheel`` makes the
  pure ``py3-none-any`` wheel that installs anywhere.

The sdist carries the ``.pyx`` sources, not generated C: Cython is a build requirement
(pyproject.toml), so the C is always generated from the sources it ships with.
"""

from __future__ import annotations

import os
import sys
import traceback

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1 (a non-isolated build on an old toolchain)
    from wheel.bdist_wheel import bdist_wheel

CHOICES = ("auto", "cython", "python")
IMPL = os.environ.get("WIGGLE_IMPL", "auto").strip().lower() or "auto"
if IMPL not in CHOICES:
    sys.exit(f"setup.py: WIGGLE_IMPL={IMPL!r} is not one of {', '.join(CHOICES)}")

HOT_PATHS = ("merge", "traversal", "batch")

# Cython directives live in each .pyx header too, so a hand-run ``cythonize`` agrees with this.
DIRECTIVES = {"language_level": "3", "boundscheck": False, "wraparound": False, "initializedcheck": False}


def extensions() -> list[Extension]:
    """The three compiled twins, or none when the build is asked to be pure."""
    if IMPL == "python":
        return []
    return [
        Extension(f"wiggle._fast.{area}_c", [f"src/wiggle/_fast/{area}_c.pyx"], optional=False)
        for area in HOT_PATHS
    ]


class OptionalBuildExt(build_ext):
    """build_ext that cythonizes first, and under ``auto`` degrades to a pure build on any failure."""

    def finalize_options(self) -> None:
        super().finalize_options()
        # the three extensions compile side by side (``-j``), unless the caller chose a number
        if not self.parallel:
            self.parallel = min(len(HOT_PATHS), os.cpu_count() or 1)

    def run(self) -> None:
        if not self.extensions:
            return
        try:
            from Cython.Build import cythonize
        except ImportError as exc:
            self._give_up(f"Cython is not importable ({exc})")
            return
        try:
            # cythonize here, not at setup() time, so an sdist never runs Cython; the generated
            # C replaces the .pyx in the Extension objects setuptools has already finalized.
            generated = cythonize(self.extensions, compiler_directives=DIRECTIVES, quiet=True)
            for ext, cythonized in zip(self.extensions, generated, strict=True):
                ext.sources = cythonized.sources
            super().run()
        except Exception as exc:  # a Cython error, CompileError, CCompilerError, no compiler...
            if IMPL == "cython":
                raise
            traceback.print_exc()
            self._give_up(f"{type(exc).__name__}: {exc}")

    def _give_up(self, why: str) -> None:
        if IMPL == "cython":
            raise SystemExit(f"WIGGLE_IMPL=cython but the hot-path extensions cannot be built: {why}")
        # Drop half-built outputs: the selector needs all three twins or none, and a stale
        # in-place .so from an earlier build must not outlive a failed rebuild.
        for ext in self.extensions:
            path = self.get_ext_fullpath(ext.name)
            if os.path.exists(path):
                os.remove(path)
        self.extensions[:] = []
        self.distribution.ext_modules = []
        banner = "*" * 78
        sys.stderr.write(
            f"\n{banner}\nWARNING: wiggle's Cython hot paths were NOT built: {why}\n"
            "Installing the pure-Python twins (wiggle._fast.IMPL will be 'python').\n"
            "Install Cython and a C compiler and reinstall for the compiled build, or set\n"
            "WIGGLE_IMPL=cython to make this failure fatal.\n"
            f"{banner}\n\n"
        )


class ContentTaggedWheel(bdist_wheel):
    """bdist_wheel that tags the wheel ``py3-none-any`` when the extensions were not built.

    bdist_wheel decides purity before building; under ``auto`` a failed compile leaves no
    compiled code, and a platform tag on a pure wheel would only stop it installing elsewhere.
    """

    def run_command(self, command: str) -> None:
        super().run_command(command)
        if command == "build" and not self.distribution.has_ext_modules():
            self.root_is_pure = True


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": OptionalBuildExt, "bdist_wheel": ContentTaggedWheel},
)
