"""The collective timeline: what each rank's last calls were, side by side.

How data flows::

    rank N: recorder ── fixed-size records ──► <world dir>/rankN.records (mmap'd ring)
                    └── (torchrun) snapshot() ──► RankOutcome.records ──► the store
                                                        │
    controller / launched rank: read_file() / parse() ──► RankCalls per rank
                                                        │
                                 build() ──► Timeline(text, divergent) ──► outcome.merge

The record layout (:data:`HEADER`, :data:`RECORD`) is defined here, once, for the
writer (:mod:`continuous_test.recorder`, in the ranks) and the readers (the
controller, which reads the file itself: a rank whose Python is stuck, for
example holding the GIL in C code, cannot answer).

Side-neutral: imports neither torch nor the controller.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = [
    "HEADER",
    "RECORD",
    "MAGIC",
    "OPS",
    "DTYPES",
    "MAX_DIMS",
    "STATUS_WAITING",
    "STATUS_RETURNED",
    "STATUS_RAISED",
    "FLAG_P2P",
    "FLAG_OBJECTS",
    "FLAG_LIST",
    "Call",
    "RankCalls",
    "Timeline",
    "records_path",
    "read_file",
    "parse",
    "build",
    "for_world",
    "lazy",
    "HEADING",
    "DIVERGENCE",
    "MISMATCH",
]

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
FLAG_P2P, FLAG_OBJECTS, FLAG_LIST = 1, 2, 4

# Operation codes are indexes into OPS; the recorder and the readers share them.
OPS: Tuple[str, ...] = (
    "?", "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter", "barrier",
    "monitored_barrier", "all_gather_object", "gather_object", "broadcast_object_list",
    "scatter_object_list", "send_object_list", "recv_object_list", "send", "recv", "isend", "irecv",
    "batch_isend_irecv", "all_reduce_coalesced", "all_gather_coalesced",
)
# Operations whose tensors may differ in shape between ranks on purpose (uneven splits).
_ANY_SHAPE = frozenset({"all_to_all", "all_to_all_single", "all_reduce_coalesced", "all_gather_coalesced"})
# dtype codes are indexes into DTYPES (names as torch prints them, without "torch.").
DTYPES: Tuple[str, ...] = (
    "?", "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64",
)
_STATUS = {STATUS_WAITING: "waiting", STATUS_RETURNED: "returned", STATUS_RAISED: "raised"}

HEADING = "collective timeline (last call of each rank in this test):"
DIVERGENCE = "first divergence at #{seq}{group}"
MISMATCH = "first divergence at #{seq}{group}: {op} with different shapes or dtypes"
NO_CALL = "no call #{seq}"
NO_CALLS = "no collective calls in this test"
NO_RECORDS = "no records (recording off, or the rank never started this test)"
DROPPED = "({n} earlier calls of this test not kept)"


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


@dataclass(frozen=True)
class Timeline:
    """A formatted timeline, and whether the ranks' sequences differ."""

    text: str
    divergent: bool


def records_path(world_dir: str, rank: int) -> str:
    """Where rank ``rank`` of a dispatcher world keeps its records."""
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


# -- building the report --------------------------------------------------------------


def build(ranks: Dict[int, Optional[RankCalls]], dead: Iterable[int] = ()) -> Timeline:
    """Group ranks by their last call and find the first divergence; readers call this on failure."""
    dead = set(dead)
    lines = _last_calls(ranks, dead)
    divergence = _first_divergence(ranks)
    if divergence:
        lines.extend(divergence)
    return Timeline("\n".join(lines), bool(divergence))


def _last_calls(ranks: Dict[int, Optional[RankCalls]], dead: set) -> List[str]:
    groups: Dict[str, List[int]] = {}
    for rank, calls in sorted(ranks.items()):
        if calls is None:
            text = NO_RECORDS
        elif not calls.calls:
            text = NO_CALLS
        else:
            text = calls.calls[-1].describe(dead=rank in dead)
            if calls.dropped:
                text += " " + DROPPED.format(n=calls.dropped)
        groups.setdefault(text, []).append(rank)
    labels = {text: _rank_label(members) + ":" for text, members in groups.items()}
    width = max((len(label) for label in labels.values()), default=0)
    return [f"{labels[text]:<{width}} {text}" for text, _ in sorted(groups.items(), key=lambda kv: kv[1])]


def _rank_label(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))


def _first_divergence(ranks: Dict[int, Optional[RankCalls]]) -> List[str]:
    """Lines about the earliest collective where the ranks differ, per group; empty if none."""
    found: List[Tuple[int, List[str]]] = []
    last = {r: calls.calls[-1] for r, calls in ranks.items() if calls and calls.calls}
    for group in _group_names(ranks):
        members = _members(group, ranks)
        sequences = {r: {c.seq: c for c in ranks[r].calls if not c.p2p and c.group == group}  # type: ignore[union-attr]
                     for r in members}
        # Calls older than the ring holds are unknown, not missing.
        first_known = {r: min(s, default=1) if ranks[r].dropped else 1  # type: ignore[union-attr]
                       for r, s in sequences.items()}
        highest = max((max(s, default=0) for s in sequences.values()), default=0)
        for seq in range(1, highest + 1):
            known = {r: sequences[r].get(seq) for r in members if seq >= first_known[r]}
            lines = _compare(seq, group, known, last)
            if lines:
                found.append((seq, lines))
                break
    found.sort(key=lambda item: item[0])
    return [line for _, lines in found for line in lines]


def _group_names(ranks: Dict[int, Optional[RankCalls]]) -> List[str]:
    names = {c.group for calls in ranks.values() if calls for c in calls.calls if not c.p2p}
    return sorted(names)


def _members(group: str, ranks: Dict[int, Optional[RankCalls]]) -> List[int]:
    """Ranks of ``group`` that have records: all, for the default group; those in its label otherwise."""
    present = [r for r, calls in sorted(ranks.items()) if calls is not None]
    if group.startswith("ranks "):
        try:
            listed = {int(r) for r in group[len("ranks "):].split(",")}
            return [r for r in present if r in listed]
        except ValueError:
            pass
    if group:
        return [r for r in present if any(c.group == group for c in ranks[r].calls)]  # type: ignore[union-attr]
    return present


def _compare(seq: int, group: str, known: Dict[int, Optional[Call]], last: Dict[int, Call]) -> List[str]:
    where = f" on {group}" if group else ""
    kinds: Dict[str, List[int]] = {}
    for rank, call in known.items():
        kinds.setdefault(call.op if call else "", []).append(rank)
    if len(kinds) > 1:
        if all(call is not None and call is last.get(rank) for rank, call in known.items()):
            return [DIVERGENCE.format(seq=seq, group=where)]  # the last calls above show it
        details = [f"  {_rank_label(rs)}: " + (_where(known[rs[0]]) if op else NO_CALL.format(seq=seq))
                   for op, rs in sorted(kinds.items(), key=lambda kv: kv[1])]
        return [DIVERGENCE.format(seq=seq, group=where)] + details
    calls = [c for c in known.values() if c is not None]
    if not calls or calls[0].op in _ANY_SHAPE and len({c.dtype for c in calls}) == 1:
        return []
    signatures: Dict[str, List[int]] = {}
    for rank, call in known.items():
        signatures.setdefault(call.signature(), []).append(rank)  # type: ignore[union-attr]
    if len(signatures) == 1:
        return []
    details = [f"  {_rank_label(rs)}: {sig} at {known[rs[0]].file}:{known[rs[0]].line}"  # type: ignore[union-attr]
               for sig, rs in sorted(signatures.items(), key=lambda kv: kv[1])]
    return [MISMATCH.format(seq=seq, group=where, op=calls[0].op)] + details


def _where(call: Optional[Call]) -> str:
    if call is None:
        return ""
    sig = call.signature()
    return f"{call.op}{' ' + sig if sig else ''} at {call.file}:{call.line}"


def for_world(world_dir: Optional[str], ranks: Iterable[int], dead: Iterable[int] = ()) -> Optional[Timeline]:
    """Read every rank's records file in ``world_dir`` and build the timeline; the controller calls this on failure."""
    if not world_dir:
        return None
    calls = {r: read_file(records_path(world_dir, r)) for r in ranks}
    if all(c is None for c in calls.values()):
        return None  # recording is off in this world
    return build(calls, dead)


def lazy(build_it: Callable[[], Optional[Timeline]]) -> Callable[[], Optional[Timeline]]:
    """``build_it``, with any error turned into None: a report must never fail for its timeline."""
    def safe() -> Optional[Timeline]:
        try:
            return build_it()
        except Exception:
            return None
    return safe
