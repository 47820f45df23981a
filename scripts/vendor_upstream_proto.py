"""Vendor upstream Wiggle's wire contract as .proto source, from the published Python client.

wiggle-client ships no .proto file, only generated code whose module holds the serialized
FileDescriptorProto. Run this script with a python that has wiggle-client installed (never our
venv: that package is also named ``wiggle``); the tests build one in .upstream-venv/
(tests/upstream/conftest.py)::

    .upstream-venv/bin/python scripts/vendor_upstream_proto.py [--check]
    .venv/bin/python scripts/gen_protos.py

It writes proto/wiggle/_rpc/upstream/wiggle.proto (rendered from the descriptor) and ORIGIN (what
it came from, with hashes). --check renders into memory and exits 1 if the committed files differ.
Compiling the rendered file gives the original descriptor except its ``name``;
tests/upstream/test_proto_drift.py checks that.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "proto" / "wiggle" / "_rpc" / "upstream"
DIST = "wiggle-client"
MODULE = "wiggle._proto.wiggle_pb2"
REGENERATE = "PYTHON_WITH_WIGGLE_CLIENT scripts/vendor_upstream_proto.py && python scripts/gen_protos.py"

# FieldDescriptorProto.Type -> .proto keyword (message, enum and group types are named instead)
SCALARS = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
    8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64",
    17: "sint32", 18: "sint64",
}  # fmt: skip
TYPE_GROUP, TYPE_MESSAGE, TYPE_ENUM, LABEL_REPEATED = 10, 11, 14, 3


def _value(field, value) -> str:  # a protobuf FieldDescriptor and its value
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    raise SystemExit(f"cannot render option {field.name}: {value!r}")


def _options(options) -> list[str]:  # any *Options message
    return [f"{f.name} = {_value(f, v)}" for f, v in options.ListFields()]


def _default_json_name(name: str) -> str:
    """protoc's json_name for a field that sets none: underscores dropped, the next letter upper."""
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _bracket(items: list[str]) -> str:
    return f" [{', '.join(items)}]" if items else ""


class Renderer:
    def __init__(self, fdp) -> None:  # a FileDescriptorProto
        if fdp.syntax != "proto3":
            raise SystemExit(f"only proto3 is rendered, the descriptor says {fdp.syntax!r}")
        if fdp.extension:
            raise SystemExit("extensions are not rendered")
        self.fdp = fdp
        self.prefix = f".{fdp.package}." if fdp.package else "."
        self.lines: list[str] = []

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text if text else "")

    def type_name(self, name: str) -> str:
        return name[len(self.prefix) :] if name.startswith(self.prefix) else name.lstrip(".")

    def field_type(self, f) -> str:  # a FieldDescriptorProto
        if f.type in (TYPE_MESSAGE, TYPE_ENUM):
            return self.type_name(f.type_name)
        if f.type == TYPE_GROUP or f.type not in SCALARS:
            raise SystemExit(f"field {f.name}: type {f.type} is not rendered")
        return SCALARS[f.type]

    def field(self, depth: int, f, maps: dict, in_oneof: bool) -> None:  # f: a FieldDescriptorProto
        items = _options(f.options)
        if f.HasField("json_name") and f.json_name != _default_json_name(f.name):
            items.insert(0, f"json_name = {json.dumps(f.json_name)}")
        entry = maps.get(f.type_name)
        if entry is not None:  # map<K, V>: a repeated synthetic *Entry message
            key, value = entry.field
            kind = f"map<{self.field_type(key)}, {self.field_type(value)}>"
        else:
            label = "repeated " if f.label == LABEL_REPEATED else "optional " if f.proto3_optional else ""
            kind = ("" if in_oneof else label) + self.field_type(f)
        self.emit(depth, f"{kind} {f.name} = {f.number}{_bracket(items)};")

    def enum(self, depth: int, e) -> None:  # an EnumDescriptorProto
        self.emit(depth, f"enum {e.name} {{")
        for option in _options(e.options):
            self.emit(depth + 1, f"option {option};")
        for v in e.value:
            self.emit(depth + 1, f"{v.name} = {v.number}{_bracket(_options(v.options))};")
        self.reserved(depth + 1, e.reserved_range, e.reserved_name, inclusive_end=True)
        self.emit(depth, "}")

    def reserved(self, depth: int, ranges, names, inclusive_end: bool) -> None:  # *ReservedRange
        spans = []
        for r in ranges:
            end = r.end if inclusive_end else r.end - 1
            spans.append(str(r.start) if end == r.start else f"{r.start} to {end}")
        if spans:
            self.emit(depth, f"reserved {', '.join(spans)};")
        if names:
            self.emit(depth, f"reserved {', '.join(json.dumps(n) for n in names)};")

    def message(self, depth: int, m, scope: str) -> None:  # a DescriptorProto
        if m.extension or m.extension_range:
            raise SystemExit(f"message {m.name}: extensions are not rendered")
        full = f"{scope}.{m.name}"
        maps = {f"{full}.{n.name}": n for n in m.nested_type if n.options.map_entry}
        self.emit(depth, f"message {m.name} {{")
        for option in _options(m.options):
            self.emit(depth + 1, f"option {option};")
        for e in m.enum_type:
            self.enum(depth + 1, e)
        for n in m.nested_type:
            if not n.options.map_entry:
                self.message(depth + 1, n, full)
        # proto3 `optional` makes a synthetic oneof per field; protoc puts them after the real ones
        real = {f.oneof_index for f in m.field if f.HasField("oneof_index") and not f.proto3_optional}
        if real != set(range(len(real))):
            raise SystemExit(f"message {m.name}: real oneofs are not declared first")
        done: set[int] = set()
        for i, f in enumerate(m.field):
            index = f.oneof_index if f.HasField("oneof_index") and not f.proto3_optional else None
            if index is None:
                self.field(depth + 1, f, maps, in_oneof=False)
                continue
            if index in done:
                continue
            members = [g for g in m.field if g.HasField("oneof_index") and g.oneof_index == index]
            if m.field[i : i + len(members)] != members:
                raise SystemExit(f"message {m.name}: oneof {m.oneof_decl[index].name} is not contiguous")
            done.add(index)
            self.emit(depth + 1, f"oneof {m.oneof_decl[index].name} {{")
            for option in _options(m.oneof_decl[index].options):
                self.emit(depth + 2, f"option {option};")
            for g in members:
                self.field(depth + 2, g, maps, in_oneof=True)
            self.emit(depth + 1, "}")
        self.reserved(depth + 1, m.reserved_range, m.reserved_name, inclusive_end=False)
        self.emit(depth, "}")

    def render(self, header: list[str]) -> str:
        fdp = self.fdp
        for line in header:
            self.emit(0, f"// {line}".rstrip())
        self.emit(0, 'syntax = "proto3";')
        if fdp.package:
            self.emit(0, "")
            self.emit(0, f"package {fdp.package};")
        if fdp.dependency:
            self.emit(0, "")
        for i, dep in enumerate(fdp.dependency):
            kind = "public " if i in fdp.public_dependency else "weak " if i in fdp.weak_dependency else ""
            self.emit(0, f'import {kind}"{dep}";')
        options = _options(fdp.options)
        if options:
            self.emit(0, "")
        for option in options:
            self.emit(0, f"option {option};")
        scope = f".{fdp.package}" if fdp.package else ""
        for s in fdp.service:
            self.emit(0, "")
            self.emit(0, f"service {s.name} {{")
            for option in _options(s.options):
                self.emit(1, f"option {option};")
            for r in s.method:
                args = ("stream " if r.client_streaming else "") + self.type_name(r.input_type)
                out = ("stream " if r.server_streaming else "") + self.type_name(r.output_type)
                opts = _options(r.options)
                end = " {\n" + "".join(f"    option {o};\n" for o in opts) + "  }" if opts else ";"
                self.emit(1, f"rpc {r.name}({args}) returns ({out}){end}")
            self.emit(0, "}")
        for e in fdp.enum_type:
            self.emit(0, "")
            self.enum(0, e)
        for m in fdp.message_type:
            self.emit(0, "")
            self.message(0, m, scope)
        return "\n".join(self.lines) + "\n"


def _record_sha256(dist: metadata.Distribution, suffix: str) -> str:
    """The hex sha256 that the installed dist's RECORD gives the file, checked against the file."""
    for entry in dist.files or ():
        if str(entry).endswith(suffix) and entry.hash is not None:
            recorded = base64.urlsafe_b64decode(entry.hash.value + "==").hex()
            actual = hashlib.sha256(Path(str(dist.locate_file(entry))).read_bytes()).hexdigest()
            if recorded != actual:
                raise SystemExit(f"{entry} differs from its RECORD entry: the installation was modified")
            return recorded
    raise SystemExit(f"{DIST}'s RECORD lists no {suffix}")


def build() -> dict[str, str]:
    """The vendored files' contents, by name, from the installed package."""
    try:
        from google.protobuf import descriptor_pb2
        from wiggle._proto import wiggle_pb2  # the upstream client's generated module
    except ImportError as e:
        raise SystemExit(f"run this with a python that has {DIST} installed (not our venv): {e}") from None
    dist = metadata.distribution(DIST)
    serialized = wiggle_pb2.DESCRIPTOR.serialized_pb
    fdp = descriptor_pb2.FileDescriptorProto.FromString(serialized)
    version = dist.version
    header = [
        f"Upstream Wiggle's wire contract, generated from {DIST} {version}'s serialized",
        f"descriptor ({MODULE}) by scripts/vendor_upstream_proto.py: do not edit;",
        "ORIGIN beside this file says where it came from. The package ships no .proto, and its",
        "descriptor carries no comments. Generated Python code: src/wiggle/_rpc/upstream",
        "(python scripts/gen_protos.py).",
    ]
    proto = Renderer(fdp).render(header)
    origin = {
        "package": DIST,
        "version": version,
        "module": MODULE,
        "descriptor_name": fdp.name,
        "descriptor_sha256": hashlib.sha256(serialized).hexdigest(),
        "wiggle_pb2_sha256": _record_sha256(dist, "_proto/wiggle_pb2.py"),
    }
    direct = dist.read_text("direct_url.json")  # present when pip installed the wheel from a file
    wheel = json.loads(direct).get("archive_info", {}).get("hashes", {}).get("sha256") if direct else None
    if wheel:
        origin["wheel_sha256"] = wheel
    else:
        print("note: the wheel's own sha256 is unknown (installed from an index); ORIGIN omits it")
    origin["regenerate"] = REGENERATE
    lines = ["# Where wiggle.proto beside this file comes from (scripts/vendor_upstream_proto.py)."]
    lines += [f"{key} = {json.dumps(value)}" for key, value in origin.items()]
    return {"wiggle.proto": proto, "ORIGIN": "\n".join(lines) + "\n"}


def main() -> int:
    check = "--check" in sys.argv[1:]
    files = build()
    if check:
        drift = [n for n, text in files.items() if not (OUT / n).exists() or (OUT / n).read_text() != text]
        if drift:
            print(f"vendored upstream proto drifted: {', '.join(drift)}; regenerate: {REGENERATE}")
            return 1
        print("vendored upstream proto matches the installed package")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (OUT / name).write_text(text)
    print(f"wrote {', '.join(files)} to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
