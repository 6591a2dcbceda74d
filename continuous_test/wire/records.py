"""The collective records' layout: what a rank's recorder writes and any process reads back.

A rank keeps its last calls as fixed-size records (:data:`RECORD`) after a header
(:data:`HEADER`), in an mmap'd ring file under its world's directory, or in memory
under a launcher.  The layout is defined here, once, for the writer
(:mod:`continuous_test.rank.recorder`) and the readers
(:mod:`continuous_test.verdict.timeline`); a controller reads a rank's file
itself, so a rank whose Python is stuck still gets its timeline.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Optional, Tuple


MAGIC = b"CTREC001"


# magic, capacity, record size, rank, recording on in this test (0/1), records written
# so far (when the test began: a reader counts the records, which carry their index),
# current test number, records written before the current test began
HEADER = struct.Struct("<8sIIiIQI4xQ")
COUNT_OFFSET = struct.calcsize("<8sIIiI")
TEST_OFFSET = COUNT_OFFSET + 8
TEST_START_OFFSET = TEST_OFFSET + 8
MAX_DIMS = 6


# index, test, seq, op, flags, status, dtype, ndim, count, peer, line, dims, group, file
RECORD = struct.Struct(f"<QIIBBBBbxxxiiI{MAX_DIMS}q40s64s")
STATUS_OFFSET = struct.calcsize("<QIIBB")
STATUS_WAITING, STATUS_RETURNED, STATUS_RAISED = 1, 2, 3
# Returned a work handle (async_op=True, isend, irecv, batch_isend_irecv): the call is
# under way, and its wait() is not recorded; the stacks say whether the rank is in it.
STATUS_ASYNC = 4
FLAG_P2P, FLAG_OBJECTS, FLAG_LIST = 1, 2, 4


# Operation codes are indexes into OPS; the recorder and the readers share them.
OPS: Tuple[str, ...] = (
    "?", "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter", "barrier",
    "monitored_barrier", "all_gather_object", "gather_object", "broadcast_object_list",
    "scatter_object_list", "send_object_list", "recv_object_list", "send", "recv", "isend", "irecv",
    "batch_isend_irecv", "all_reduce_coalesced", "all_gather_coalesced",
)


# dtype codes are indexes into DTYPES (names as torch prints them, without "torch.").
DTYPES: Tuple[str, ...] = (
    "?", "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64",
)
_STATUS = {STATUS_WAITING: "waiting", STATUS_RETURNED: "returned", STATUS_RAISED: "raised",
           STATUS_ASYNC: "returned a work handle; its wait is not recorded"}


@dataclass(frozen=True)
class Call:
    """One recorded collective or point-to-point call."""

    index: int
    seq: int
    op: str
    flags: int
    status: int
    dtype: str
    shape: Optional[Tuple[int, ...]]
    count: int
    peer: int
    group: str
    file: str
    line: int

    @property
    def p2p(self) -> bool:
        """True for point-to-point calls, which have no place in a group's collective sequence."""
        return bool(self.flags & FLAG_P2P)

    def signature(self) -> str:
        """``[float32(8)]``, ``[2 x float32(8)]`` or ``[3 objects]``; empty for a barrier."""
        if self.flags & FLAG_OBJECTS:
            return f"[{self.count} object{'s' if self.count != 1 else ''}]" if self.count >= 0 else ""
        if self.shape is None:
            return f"[{self.count} ops]" if self.count >= 0 else ""
        tensor = f"{self.dtype}({','.join(map(str, self.shape))})"
        if self.flags & FLAG_LIST:
            return f"[{self.count} x {tensor}]"
        return f"[{tensor}]"

    def name(self) -> str:
        """``all_reduce #7`` or, for point-to-point, ``send(peer 1) #2``; with its group when not the default."""
        peer = f"(peer {self.peer})" if self.p2p and self.peer >= 0 else ""
        group = f" on {self.group}" if self.group else ""
        return f"{self.op}{peer} #{self.seq}{group}"

    def describe(self, dead: bool = False) -> str:
        """``all_reduce #7 [float32(8)] at test_x.py:42 (waiting)``."""
        status = _STATUS.get(self.status, "?")
        if dead and self.status == STATUS_WAITING:
            status += "; the rank died"
        sig = self.signature()
        return f"{self.name()}{' ' + sig if sig else ''} at {self.file}:{self.line} ({status})"


@dataclass(frozen=True)
class RankCalls:
    """The calls of one rank in its current test, oldest first."""

    rank: int
    test: int
    calls: Tuple[Call, ...]
    dropped: int = 0


def records_path(world_dir: str, rank: int) -> str:
    """Where rank ``rank`` of a controller's world (shared or fresh) in ``world_dir`` keeps its records."""
    return os.path.join(world_dir, f"rank{rank}.records")


def read_file(path: str) -> Optional[RankCalls]:
    """Read a rank's records file without the rank's help; None if it has none."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return parse(data)


def parse(data: bytes) -> Optional[RankCalls]:
    """Decode a records file (or a snapshot of one): the current test's calls, oldest first."""
    if len(data) < HEADER.size:
        return None
    magic, capacity, size, rank, on, count, test, test_start = HEADER.unpack_from(data, 0)
    if magic != MAGIC or size != RECORD.size or len(data) < HEADER.size + capacity * size or not on:
        return None
    slots = [RECORD.unpack_from(data, HEADER.size + slot * size) for slot in range(capacity)]
    count = max([count] + [fields[0] + 1 for fields in slots if fields[5]])
    # A record of another test is not this test's; one whose index is outside the
    # ring's window is stale.
    calls = [_call(fields) for fields in slots if fields[1] == test and count - capacity <= fields[0] < count
             and fields[5]]
    calls.sort(key=lambda c: c.index)
    dropped = max(0, count - capacity - test_start)
    return RankCalls(rank, test, tuple(calls), dropped)


def _call(fields: tuple) -> Call:
    index, _test, seq, op, flags, status, dtype, ndim, count, peer, line = fields[:11]
    dims = fields[11:11 + MAX_DIMS]
    group, file = fields[11 + MAX_DIMS], fields[12 + MAX_DIMS]
    shape = tuple(dims[:min(ndim, MAX_DIMS)]) if ndim >= 0 else None
    return Call(index, seq, OPS[op] if op < len(OPS) else "?", flags, status,
                DTYPES[dtype] if dtype < len(DTYPES) else "?", shape, count, peer,
                group.rstrip(b"\0").decode("utf-8", "replace"), file.rstrip(b"\0").decode("utf-8", "replace"), line)
