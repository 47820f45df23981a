"""Regenerate src/wiggle/_rpc from proto/ (the only way the generated code is made).

Usage: python scripts/gen_protos.py [--check]
--check regenerates into a temporary folder and exits 1 if the committed code differs.
"""

from __future__ import annotations

import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTOS = ["wiggle/_rpc/wiggle.proto"]
GENERATED = ["wiggle_pb2.py", "wiggle_pb2.pyi", "wiggle_pb2_grpc.py"]


def generate(out: Path) -> None:
    from grpc_tools import protoc  # dev dependency only

    for proto in PROTOS:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
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
        produced = out / "wiggle" / "_rpc"
        target = ROOT / "src" / "wiggle" / "_rpc"
        if check:
            drift = [
                n
                for n in GENERATED
                if not (target / n).exists() or not filecmp.cmp(produced / n, target / n, shallow=False)
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
        for n in GENERATED:
            shutil.copyfile(produced / n, target / n)
        print("wrote " + ", ".join(GENERATED) + " to " + str(target.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
