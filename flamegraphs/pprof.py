# SPDX-License-Identifier: GPL-2.0-only
"""A run's folded stacks as a pprof profile: profile.proto, gzipped.

The message is built with the protobuf library from a descriptor made
here (`google.protobuf.descriptor_pb2`), field by field from the numbers
the published profile.proto gives (package perftools.profiles), holding
only the fields qprof writes; no generated code and no .proto file is
shipped or fetched. Go's pprof (`go tool pprof`) reads what it makes.

Each folded line of a side is one sample: its frames, root (the process
name) to leaf, become locations leaf first, one per distinct frame name,
each a line in a function of that name. Its values, in the order of the
sample types:

    samples/count       the samples, as folded
    cpu/nanoseconds     samples x the cpu-clock period: CPU time
    cpu_per_byte/fs/B   that CPU time over the side's bytes, in whole
                        femtoseconds per byte (10^6 fs/B = 1 ns/B: pprof's
                        values are integers and a stack's ns/B is a
                        fraction); a --pattern rr run has
                        cpu_per_request/ps/request instead

Every sample carries the labels side, stack (the transport stack) and
run, so `pprof -tagfocus side=client` or `-tagroot side` splits them.
The default sample type is the per-byte (per-request) one.
"""

import datetime
import gzip
from functools import lru_cache
from typing import Dict, List, Mapping, Optional

from qprof.errors import BadStacks, NotBuilt

from . import normalize

PACKAGE = "perftools.profiles"
INT64_MAX = 2**63 - 1  # a sample's values are int64 in profile.proto

# profile.proto, the fields qprof writes: message -> (field, number, type, repeated).
# A type in capitals is a scalar (FieldDescriptorProto.TYPE_*), else a message here.
_SCHEMA = {
    "ValueType": [("type", 1, "INT64", False), ("unit", 2, "INT64", False)],
    "Label": [("key", 1, "INT64", False), ("str", 2, "INT64", False), ("num", 3, "INT64", False)],
    "Sample": [("location_id", 1, "UINT64", True), ("value", 2, "INT64", True), ("label", 3, "Label", True)],
    "Line": [("function_id", 1, "UINT64", False), ("line", 2, "INT64", False)],
    "Mapping": [("id", 1, "UINT64", False), ("filename", 5, "INT64", False), ("has_functions", 7, "BOOL", False)],
    "Location": [
        ("id", 1, "UINT64", False),
        ("mapping_id", 2, "UINT64", False),
        ("address", 3, "UINT64", False),
        ("line", 4, "Line", True),
    ],
    "Function": [("id", 1, "UINT64", False), ("name", 2, "INT64", False), ("system_name", 3, "INT64", False)],
    "Profile": [
        ("sample_type", 1, "ValueType", True),
        ("sample", 2, "Sample", True),
        ("mapping", 3, "Mapping", True),
        ("location", 4, "Location", True),
        ("function", 5, "Function", True),
        ("string_table", 6, "STRING", True),
        ("time_nanos", 9, "INT64", False),
        ("duration_nanos", 10, "INT64", False),
        ("period_type", 11, "ValueType", False),
        ("period", 12, "INT64", False),
        ("comment", 13, "INT64", True),
        ("default_sample_type", 14, "INT64", False),
    ],
}


@lru_cache(maxsize=None)
def message_classes() -> Dict[str, type]:
    """The profile.proto message classes, from _SCHEMA, in a pool of their own."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise NotBuilt("the Python package protobuf is missing, which pprof export needs; `make deps` installs it.")
    fdp = descriptor_pb2.FileDescriptorProto(name="qprof/profile.proto", package=PACKAGE, syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    for name, fields in _SCHEMA.items():
        msg = fdp.message_type.add(name=name)
        for field, number, typ, repeated in fields:
            f = msg.field.add(name=field, number=number)
            f.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if typ.isupper():
                f.type = getattr(F, f"TYPE_{typ}")
            else:
                f.type = F.TYPE_MESSAGE
                f.type_name = f".{PACKAGE}.{typ}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}")) for name in _SCHEMA}


class _Strings:
    """profile.proto's string table: index 0 is the empty string."""

    def __init__(self):
        self.table: List[str] = [""]
        self._index: Dict[str, int] = {"": 0}

    def __call__(self, s: str) -> int:
        if s not in self._index:
            self._index[s] = len(self.table)
            self.table.append(s)
        return self._index[s]


def sample_types(unit: normalize.Unit) -> List[tuple]:
    """(type, unit) of each value, in order."""
    return [("samples", "count"), ("cpu", "nanoseconds"), (f"cpu_per_{unit.name}", unit.count)]


def profile(
    stacks_by_side: Mapping[str, Mapping[str, int]],
    period_ns: int,
    divisors: Mapping[str, int],
    unit: normalize.Unit,
    labels: Mapping[str, str],
    comments: List[str] = (),
    source: str = "qprof",
    time_nanos: int = 0,
    duration_nanos: int = 0,
):
    """The Profile message of the sides' stacks: stacks_by_side {side:
    {folded stack: samples}}, each side divided by divisors[side] (its bytes
    or the requests answered); labels are put on every sample beside side;
    source names where the stacks come from (pprof's "File:")."""
    M = message_classes()
    strings = _Strings()
    prof = M["Profile"]()
    types = sample_types(unit)
    for typ, u in types:
        prof.sample_type.add(type=strings(typ), unit=strings(u))
    prof.default_sample_type = strings(types[-1][0])  # the type's name, in the string table
    prof.period_type.type, prof.period_type.unit = strings("cpu"), strings("nanoseconds")
    prof.period = period_ns
    prof.time_nanos, prof.duration_nanos = time_nanos, duration_nanos
    prof.comment.extend(strings(c) for c in comments)
    # One mapping for every location, its functions given: pprof then names
    # it as the profile's file and does not try to symbolize addresses.
    prof.mapping.add(id=1, filename=strings(source), has_functions=True)
    locations: Dict[str, int] = {}  # frame name -> location id (= function id)
    for side, stacks in stacks_by_side.items():
        per_unit = normalize.scaled(stacks, period_ns, divisors[side], unit)
        tags = [("side", side), *labels.items()]
        for stack, n in stacks.items():
            ids = []
            for frame in reversed(stack.split(";")):  # leaf first
                if frame not in locations:
                    lid = locations[frame] = len(locations) + 1
                    name = strings(frame)
                    prof.function.add(id=lid, name=name, system_name=name)
                    prof.location.add(id=lid, mapping_id=1).line.add(function_id=lid)
                ids.append(locations[frame])
            values = [n, n * period_ns, per_unit.get(stack, 0)]
            if max(values) > INT64_MAX:
                raise BadStacks(
                    f"the {side}'s stack {_cut(stack)!r} holds {n:,} samples, more CPU time than pprof's 64-bit "
                    "values hold, so its stacks file is damaged; make a new run with `qprof run`."
                )
            s = prof.sample.add(location_id=ids, value=values)
            for key, value in tags:
                s.label.add(key=strings(key), str=strings(value))
    prof.string_table.extend(strings.table)
    return prof


def _cut(stack: str) -> str:
    return stack if len(stack) <= 60 else "..." + stack[-57:]


def gzipped(prof) -> bytes:
    """As pprof reads and writes it; mtime 0, so the same profile gives the same bytes."""
    return gzip.compress(prof.SerializeToString(deterministic=True), mtime=0)


def time_nanos_of(measured_at: Optional[str]) -> int:
    """The record's measured_at (2026-11-22T05:38:50+0000) in ns since the epoch; 0 if unreadable."""
    try:
        return int(datetime.datetime.strptime(measured_at or "", "%Y-%m-%dT%H:%M:%S%z").timestamp()) * 10**9
    except ValueError:
        return 0
