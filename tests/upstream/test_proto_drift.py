"""Our vendored copy of upstream Wiggle's contract matches the published client, wiggle-client 0.1.1.

The package's own descriptor is read by a python that has it installed (``upstream_python``,
tests/upstream/conftest.py) and compared with the module generated from our vendored .proto
(src/wiggle/_rpc/upstream, from proto/wiggle/_rpc/upstream/wiggle.proto): messages, fields,
numbers, types, labels, oneofs, services and methods, then the whole descriptor except its file
name. ORIGIN must record the same version and hashes. Regenerate: see ORIGIN's ``regenerate``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from wiggle._rpc import wiggle_pb2 as ours_pb2
from wiggle._rpc.upstream import wiggle_pb2 as upstream_pb2
from wiggle._rpc.upstream import wiggle_pb2_grpc as upstream_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
ORIGIN = ROOT / "proto" / "wiggle" / "_rpc" / "upstream" / "ORIGIN"
EXPECTED_VERSION = "0.1.1"

# building .upstream-venv/ on first use downloads and installs packages: more than the default
pytestmark = pytest.mark.timeout(900)

DUMP = """
import base64, hashlib, json, importlib.metadata as metadata
from wiggle._proto import wiggle_pb2
dist = metadata.distribution("wiggle-client")
direct = json.loads(dist.read_text("direct_url.json") or "{}")
pb2 = next(f for f in dist.files if str(f).endswith("_proto/wiggle_pb2.py"))
print(json.dumps({
    "version": dist.version,
    "descriptor": base64.b64encode(wiggle_pb2.DESCRIPTOR.serialized_pb).decode(),
    "wheel_sha256": direct.get("archive_info", {}).get("hashes", {}).get("sha256"),
    "wiggle_pb2_sha256": hashlib.sha256(dist.locate_file(pb2).read_bytes()).hexdigest(),
}))
"""


@pytest.fixture(scope="module")
def upstream(upstream_python: Path) -> dict[str, Any]:
    """What the installed package says: version, serialized descriptor and hashes."""
    result = subprocess.run([str(upstream_python), "-I", "-c", DUMP], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    dump: dict[str, Any] = json.loads(result.stdout)
    dump["descriptor"] = base64.b64decode(dump["descriptor"])
    return dump


def _origin() -> dict[str, str]:
    """ORIGIN's ``key = "value"`` lines (TOML basic strings, written with json.dumps)."""
    pairs = (line.split(" = ", 1) for line in ORIGIN.read_text().splitlines() if " = " in line)
    return {key: json.loads(value) for key, value in pairs}


def _fdp(serialized: bytes) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto.FromString(serialized)


def _fields(message: descriptor_pb2.DescriptorProto) -> dict[str, tuple[object, ...]]:
    def oneof(f: descriptor_pb2.FieldDescriptorProto) -> str:
        return message.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else ""

    return {
        f.name: (f.number, f.type, f.label, f.type_name, oneof(f), f.proto3_optional, f.json_name)
        for f in message.field
    }


def _methods(service: descriptor_pb2.ServiceDescriptorProto) -> dict[str, tuple[object, ...]]:
    return {
        m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming) for m in service.method
    }


def test_the_installed_package_is_the_vendored_version(upstream: dict[str, Any]) -> None:
    assert upstream["version"] == EXPECTED_VERSION
    assert _origin()["version"] == EXPECTED_VERSION


def test_origin_records_the_package_and_its_hashes(upstream: dict[str, Any]) -> None:
    origin = _origin()
    assert origin["package"] == "wiggle-client"
    assert origin["descriptor_sha256"] == hashlib.sha256(upstream["descriptor"]).hexdigest()
    assert origin["descriptor_name"] == _fdp(upstream["descriptor"]).name
    assert origin["wiggle_pb2_sha256"] == upstream["wiggle_pb2_sha256"]
    # the fixture installs the downloaded wheel from its file, so pip recorded its hash
    assert origin["wheel_sha256"] == upstream["wheel_sha256"]


def test_vendored_descriptor_matches_the_package_field_by_field(upstream: dict[str, Any]) -> None:
    theirs, ours = _fdp(upstream["descriptor"]), _fdp(upstream_pb2.DESCRIPTOR.serialized_pb)
    assert (ours.package, ours.syntax) == (theirs.package, theirs.syntax) == ("dev.wiggle.proto", "proto3")
    assert list(ours.dependency) == list(theirs.dependency)
    assert ours.options == theirs.options
    assert [m.name for m in ours.message_type] == [m.name for m in theirs.message_type]
    for mine, their in zip(ours.message_type, theirs.message_type, strict=True):
        assert _fields(mine) == _fields(their), f"message {their.name}: fields differ"
        assert list(mine.field) == list(their.field), f"message {their.name}: field order differs"
        assert [o.name for o in mine.oneof_decl] == [o.name for o in their.oneof_decl], their.name
        assert mine == their, f"message {their.name} differs"
    assert list(ours.enum_type) == list(theirs.enum_type)
    assert [s.name for s in ours.service] == [s.name for s in theirs.service] == ["WiggleControlPlane"]
    for mine_service, their_service in zip(ours.service, theirs.service, strict=True):
        assert _methods(mine_service) == _methods(their_service)
        assert list(mine_service.method) == list(their_service.method), "method order differs"
    # and nothing else: equal but for the file name (theirs is wiggle.proto; ours must differ
    # from our own contract's, wiggle/_rpc/wiggle.proto, to share the descriptor pool)
    ours.ClearField("name")
    theirs.ClearField("name")
    assert ours == theirs


def test_the_vendored_proto_is_what_the_script_renders(upstream_python: Path) -> None:
    script = ROOT / "scripts" / "vendor_upstream_proto.py"
    result = subprocess.run([str(upstream_python), str(script), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_both_contracts_live_in_one_process() -> None:
    assert ours_pb2.DESCRIPTOR.name == "wiggle/_rpc/wiggle.proto"
    assert upstream_pb2.DESCRIPTOR.name == "wiggle/_rpc/upstream/wiggle.proto"
    assert ours_pb2.DESCRIPTOR.package == "wiggle.v1"
    assert upstream_pb2.DESCRIPTOR.package == "dev.wiggle.proto"
    service = upstream_pb2.DESCRIPTOR.services_by_name["WiggleControlPlane"]
    assert service.full_name == "dev.wiggle.proto.WiggleControlPlane"
    assert hasattr(upstream_pb2_grpc, "WiggleControlPlaneStub")
    assert hasattr(upstream_pb2_grpc, "add_WiggleControlPlaneServicer_to_server")
    request = upstream_pb2.StartInstanceRequest(workflow="w", version=3)
    assert request.HasField("version") and not request.HasField("correlation_id")
