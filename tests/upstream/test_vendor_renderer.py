"""scripts/vendor_upstream_proto.py renders a descriptor back into .proto source that compiles to it.

Upstream's descriptor uses a small part of proto3 (tests/upstream/test_proto_drift.py covers it);
this file round-trips the rest the renderer claims to handle: nested messages and enums, maps,
streaming, reserved names and ranges, options, and both kinds of oneof.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]

RICH = """
syntax = "proto3";
package demo.rich.v2;
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
option java_package = "demo.rich";
option go_package = "example.invalid/rich";
option optimize_for = SPEED;

service Rich {
  rpc Unary(Outer) returns (Outer.Inner);
  rpc Both(stream Outer) returns (stream google.protobuf.Value) {
    option deprecated = true;
  }
}
enum Color {
  option allow_alias = true;
  COLOR_UNSPECIFIED = 0;
  RED = 1;
  CRIMSON = 1 [deprecated = true];
  reserved 5 to 7, 9;
  reserved "BLUE";
}
message Outer {
  option deprecated = true;
  enum Kind { KIND_UNSPECIFIED = 0; BIG = 2; }
  message Inner { repeated int64 ids = 1 [packed = false]; Kind kind = 2; }
  oneof pick {
    string text = 3;
    Inner inner = 4;
  }
  map<string, Inner> by_name = 5;
  map<int32, Color> colors = 6;
  optional sint64 maybe = 7 [json_name = "perhaps"];
  repeated bytes blobs = 8;
  google.protobuf.Timestamp at = 9;
  double d = 10; float f = 11; uint32 u = 12; fixed64 x = 13; sfixed32 y = 14;
  reserved 20, 30 to 40;
  reserved "gone";
}
"""


def _renderer() -> ModuleType:  # the script is not a package module; load it by path
    path = ROOT / "scripts" / "vendor_upstream_proto.py"
    spec = importlib.util.spec_from_file_location("vendor_upstream_proto", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(tmp: Path, name: str, source: str) -> descriptor_pb2.FileDescriptorProto:
    (tmp / name).write_text(source)
    out = tmp / (name + ".pb")
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    args = ["protoc", f"-I{tmp}", f"-I{well_known}", f"--descriptor_set_out={out}", str(tmp / name)]
    assert protoc.main(args) == 0, source
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return fds.file[0]


def test_rendered_source_compiles_to_the_same_descriptor(tmp_path: Path) -> None:
    original = _compile(tmp_path, "rich.proto", RICH)
    rendered = _renderer().Renderer(original).render(["header"])
    again = _compile(tmp_path, "again.proto", rendered)
    again.name = original.name
    assert again == original, rendered


def test_synthetic_oneofs_follow_the_real_ones_in_the_rendering(tmp_path: Path) -> None:
    source = 'syntax = "proto3";\nmessage M { optional int32 a = 1; oneof o { int32 b = 2; } }\n'
    original = _compile(tmp_path, "m.proto", source)
    assert [d.name for d in original.message_type[0].oneof_decl] == ["o", "_a"]
    rendered = _renderer().Renderer(original).render([])
    assert "optional int32 a = 1;" in rendered and "oneof o {" in rendered


def test_what_it_cannot_render_is_refused(tmp_path: Path) -> None:
    original = _compile(tmp_path, "p2.proto", 'syntax = "proto2";\nmessage M { optional int32 a = 1; }\n')
    with pytest.raises(SystemExit, match="only proto3"):
        _renderer().Renderer(original)
