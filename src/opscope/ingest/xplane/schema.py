"""The XSpace protobuf schema (XProf's ``xplane.proto``), built as a descriptor in a private pool.

The message and field names, numbers and types below are those of the published
``xla/tsl/profiler/protobuf/xplane.proto`` (openxla/xla, Copyright The TensorFlow Authors, Apache License 2.0;
``package tensorflow.profiler``). We build its ``FileDescriptorProto`` here instead of shipping generated code:
a generated ``_pb2`` checks that the installed protobuf runtime is at least the generator's version, and a second
module defining ``tensorflow.profiler.XSpace`` in the default pool beside TensorFlow's own raises "duplicate
symbol". A private :class:`~google.protobuf.descriptor_pool.DescriptorPool` has neither problem.

Two extra message types read the same bytes lazily: ``LazySpace`` and ``LazyPlane`` have the field numbers of
``XSpace``/``XPlane`` but declare the planes and lines as ``bytes`` (the wire type of an embedded message is the
same length-delimited one), so the reader parses one plane's metadata and then one line at a time, and frees each
before the next, instead of holding the whole decoded space in memory.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any


def protobuf(module: str) -> Any:
    """``google.protobuf.<module>``, imported by name: protobuf ships no type stubs (types-protobuf is apart), and
    this keeps mypy from asking for them."""
    return importlib.import_module(f"google.protobuf.{module}")


def add_message(f: Any, name: str, fields: list[tuple], oneofs: tuple[str, ...] = ()) -> Any:
    """Declare message ``name`` in the file descriptor ``f``: each field ``(name, number, type, *extra)`` with type
    int64, uint64, bool, double, string, bytes or message and extras ``"repeated"``, ``".pkg.Type"`` (a message
    field's type), ``"oneof:NAME"``."""
    fd = protobuf("descriptor_pb2").FieldDescriptorProto
    types = {"int64": fd.TYPE_INT64, "uint64": fd.TYPE_UINT64, "bool": fd.TYPE_BOOL, "double": fd.TYPE_DOUBLE,
             "string": fd.TYPE_STRING, "bytes": fd.TYPE_BYTES, "message": fd.TYPE_MESSAGE}
    m = f.message_type.add(name=name)
    for oneof in oneofs:
        m.oneof_decl.add(name=oneof)
    for spec in fields:
        fname, number, ftype, *rest = spec
        label = fd.LABEL_REPEATED if "repeated" in rest else fd.LABEL_OPTIONAL
        field = m.field.add(name=fname, number=number, type=types[ftype], label=label)
        for extra in rest:
            if extra.startswith("."):
                field.type_name = extra
            elif extra.startswith("oneof:"):
                field.oneof_index = oneofs.index(extra[6:])
    return m


def _file() -> Any:
    descriptor_pb2 = protobuf("descriptor_pb2")
    fd = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="opscope_xplane.proto", package="tensorflow.profiler",
                                           syntax="proto3")

    def message(name: str, fields: list[tuple], oneofs: tuple[str, ...] = ()) -> Any:
        return add_message(f, name, fields, oneofs)

    def map_entry(parent: Any, name: str, value_type: str) -> None:
        entry = parent.nested_type.add(name=name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=fd.TYPE_INT64, label=fd.LABEL_OPTIONAL)
        entry.field.add(name="value", number=2, type=fd.TYPE_MESSAGE, label=fd.LABEL_OPTIONAL, type_name=value_type)

    pkg = ".tensorflow.profiler."
    message("XSpace", [("planes", 1, "message", "repeated", pkg + "XPlane"), ("errors", 2, "string", "repeated"),
                       ("warnings", 3, "string", "repeated"), ("hostnames", 4, "string", "repeated")])
    plane_fields: list[tuple] = [
        ("id", 1, "int64"), ("name", 2, "string"), ("lines", 3, "message", "repeated", pkg + "XLine"),
        ("event_metadata", 4, "message", "repeated", pkg + "XPlane.EventMetadataEntry"),
        ("stat_metadata", 5, "message", "repeated", pkg + "XPlane.StatMetadataEntry"),
        ("stats", 6, "message", "repeated", pkg + "XStat")]
    plane = message("XPlane", plane_fields)
    map_entry(plane, "EventMetadataEntry", pkg + "XEventMetadata")
    map_entry(plane, "StatMetadataEntry", pkg + "XStatMetadata")
    message("XLine", [("id", 1, "int64"), ("display_id", 10, "int64"), ("name", 2, "string"),
                      ("display_name", 11, "string"), ("timestamp_ns", 3, "int64"), ("duration_ps", 9, "int64"),
                      ("events", 4, "message", "repeated", pkg + "XEvent")])
    message("XEvent", [("metadata_id", 1, "int64"), ("offset_ps", 2, "int64", "oneof:data"),
                       ("num_occurrences", 5, "int64", "oneof:data"), ("duration_ps", 3, "int64"),
                       ("stats", 4, "message", "repeated", pkg + "XStat")], oneofs=("data",))
    message("XStat", [("metadata_id", 1, "int64"), ("double_value", 2, "double", "oneof:value"),
                      ("uint64_value", 3, "uint64", "oneof:value"), ("int64_value", 4, "int64", "oneof:value"),
                      ("str_value", 5, "string", "oneof:value"), ("bytes_value", 6, "bytes", "oneof:value"),
                      ("ref_value", 7, "uint64", "oneof:value")], oneofs=("value",))
    message("XEventMetadata", [("id", 1, "int64"), ("name", 2, "string"), ("display_name", 4, "string"),
                               ("metadata", 3, "bytes"), ("stats", 5, "message", "repeated", pkg + "XStat"),
                               ("child_id", 6, "int64", "repeated")])
    message("XStatMetadata", [("id", 1, "int64"), ("name", 2, "string"), ("description", 3, "string")])
    # opscope's lazy views of the same bytes (see the module docstring); PlaneHead reads a plane's id and name only
    message("PlaneHead", [("id", 1, "int64"), ("name", 2, "string")])
    message("LazySpace", [("planes", 1, "bytes", "repeated"), ("errors", 2, "string", "repeated"),
                          ("warnings", 3, "string", "repeated"), ("hostnames", 4, "string", "repeated")])
    lazy = message("LazyPlane", [*plane_fields[:2], ("lines", 3, "bytes", "repeated"), *plane_fields[3:]])
    lazy.field[3].type_name = pkg + "LazyPlane.EventMetadataEntry"
    lazy.field[4].type_name = pkg + "LazyPlane.StatMetadataEntry"
    map_entry(lazy, "EventMetadataEntry", pkg + "XEventMetadata")
    map_entry(lazy, "StatMetadataEntry", pkg + "XStatMetadata")
    return f


@functools.cache
def classes() -> dict[str, type]:
    """The message classes by short name (``XSpace``, ``XPlane``, ``XLine``, ..., ``LazySpace``, ``LazyPlane``)."""
    return message_classes(_file(), "tensorflow.profiler", (
        "XSpace", "XPlane", "XLine", "XEvent", "XStat", "XEventMetadata", "XStatMetadata", "LazySpace", "LazyPlane",
        "PlaneHead"))


def message_classes(file: Any, package: str, names: tuple[str, ...]) -> dict[str, type]:
    """The classes of the messages ``names`` of a private descriptor ``file`` (its own pool: never the process's
    default one), by short name."""
    descriptor_pool, message_factory = protobuf("descriptor_pool"), protobuf("message_factory")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{n}")) for n in names}
