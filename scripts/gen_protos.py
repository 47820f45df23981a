"""Regenerate src/wiggle/_rpc from proto/ (the only way the generated code is made).

Usage: python scripts/gen_protos.py [--check]
--check regenerates into a temporary folder and exits 1 if the committed code differs.

Two contracts: ours (proto/wiggle/_rpc/wiggle.proto, package wiggle.v1) and upstream Wiggle's,
vendored by scripts/vendor_upstream_proto.py (proto/wiggle/_rpc/upstream/wiggle.proto, package
dev.wiggle.proto). Their paths differ, so both modules register in one descriptor pool.
"""

from __future__ import annotations

import filecmp
import importlib.resources
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTOS = ["wiggle/_rpc/wiggle.proto", "wiggle/_rpc/upstream/wiggle.proto"]
GENERATED = ["wiggle_pb2.py", "wiggle_pb2.pyi", "wiggle_pb2_grpc.py"]


def _outputs() -> list[Path]:
    """Each generated file, relative to src/ (and to protoc's output folder)."""
    return [Path(proto).parent / name for proto in PROTOS for name in GENERATED]


def generate(out: Path) -> None:
    from grpc_tools import protoc  # dev dependency only

    well_known = importlib.resources.files("grpc_tools") / "_proto"  # google/protobuf/*.proto
    for proto in PROTOS:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_ROOT / proto),
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")


def main() -> int:
    check = "--check" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        src = ROOT / "src"
        if check:
            drift = [
                str(n)
                for n in _outputs()
                if not (src / n).exists() or not filecmp.cmp(out / n, src / n, shallow=False)
            ]
            if drift:
                print(
                    "generated code drifted from proto/: "
                    + ", ".join(drift)
                    + "; run python scripts/gen_protos.py"
                )
                return 1
            print("generated code matches proto/")
            return 0
        for n in _outputs():
            shutil.copyfile(out / n, src / n)
        print("wrote " + ", ".join(str(n) for n in _outputs()) + " to src/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
