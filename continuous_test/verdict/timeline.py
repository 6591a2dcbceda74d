"""The collective timeline: what each rank's last calls were, side by side.

How data flows::

    rank N: recorder ── fixed-size records ──► <world dir>/rankN.records (mmap'd ring)
                    └── (launched) snapshot() ──► RankOutcome.records ──► the store
                                                        │
    controller / launched rank: read_file() / parse() ──► RankCalls per rank
                                                        │
                                 build() ──► Timeline(text, divergent) ──► verdict.merge

The record layout is :mod:`continuous_test.wire.records`; this is the reading side
(the controller reads a rank's file itself: a rank whose Python is stuck, for
example holding the GIL in C code, cannot answer).  No torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from continuous_test.verdict.text import rank_list
from continuous_test.wire.records import STATUS_RAISED, STATUS_RETURNED, Call, RankCalls, read_file, records_path

__all__ = [
    "Timeline",
    "build",
    "for_world",
    "lazy",
    "HEADING",
    "DIVERGENCE",
    "MISMATCH",
]


# Operations whose tensors may differ in shape between ranks on purpose (uneven splits).
_ANY_SHAPE = frozenset({"all_to_all", "all_to_all_single", "all_reduce_coalesced", "all_gather_coalesced"})

HEADING = "collective timeline (last call of each rank in this test):"
DIVERGENCE = "first divergence at #{seq}{group}"
MISMATCH = "first divergence at #{seq}{group}: {op} with different shapes or dtypes"
NO_CALL = "no call #{seq}"
P2P_UNMATCHED = "point-to-point: rank {src} sent {sent} to rank {dst}, which received {received} from it"
# The recorder sees calls through torch.distributed's Python functions only (docs/timeline.rst).
NO_CALLS = ("no calls through torch.distributed's functions in this test "
            "(DDP's reducer and other C++ callers are not recorded)")
NO_RECORDS = "no records (recording off, or the rank never started this test)"
DROPPED = "({n} earlier calls of this test not kept)"


@dataclass(frozen=True)
class Timeline:
    """A formatted timeline, and whether the ranks' sequences differ."""

    text: str
    divergent: bool
    # Every rank's calls of the test are known and ended (none waiting, none that
    # returned a work handle whose wait is not recorded), and they pair up: nothing
    # one rank sent or started waits for a peer.
    settled: bool = False


# -- building the report --------------------------------------------------------------


def build(ranks: Dict[int, Optional[RankCalls]], dead: Iterable[int] = ()) -> Timeline:
    """Group ranks by their last call and find the first divergence; a ``dead`` rank's waiting call says so."""
    dead = set(dead)
    lines = _last_calls(ranks, dead)
    divergence = _first_divergence(ranks) + _unmatched_p2p(ranks)
    if divergence:
        lines.extend(divergence)
    ended = all(calls is not None and not calls.dropped and all(c.status in (STATUS_RETURNED, STATUS_RAISED)
                                                               for c in calls.calls) for calls in ranks.values())
    return Timeline("\n".join(lines), bool(divergence), settled=ended and not divergence and not dead)


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
    labels = {text: rank_list(members) + ":" for text, members in groups.items()}
    width = max((len(label) for label in labels.values()), default=0)
    return [f"{labels[text]:<{width}} {text}" for text, _ in sorted(groups.items(), key=lambda kv: kv[1])]


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


_SENDS = ("send", "isend")
_RECVS = ("recv", "irecv")


def _unmatched_p2p(ranks: Dict[int, Optional[RankCalls]]) -> List[str]:
    """Lines about ranks whose point-to-point sends and receives do not pair up (a p2p deadlock's trace).

    Counted per direction, from the sender's sends to a peer and the peer's receives
    from it; a receive from any source, or a rank whose early records were dropped,
    leaves its pairs unjudged.
    """
    sent: Dict[Tuple[int, int], int] = {}
    received: Dict[Tuple[int, int], int] = {}
    for rank, calls in ranks.items():
        if calls is None or calls.dropped:
            continue
        for call in calls.calls:
            if call.op in _SENDS and call.peer >= 0:
                sent[(rank, call.peer)] = sent.get((rank, call.peer), 0) + 1
            elif call.op in _RECVS and call.peer >= 0:
                received[(call.peer, rank)] = received.get((call.peer, rank), 0) + 1
    judged = {r for r, calls in ranks.items() if calls is not None and not calls.dropped}
    return [P2P_UNMATCHED.format(src=src, dst=dst, sent=sent.get((src, dst), 0), received=received.get((src, dst), 0))
            for src, dst in sorted(set(sent) | set(received))
            if src in judged and dst in judged and sent.get((src, dst), 0) != received.get((src, dst), 0)]


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
        details = [f"  {rank_list(rs)}: " + (_where(known[rs[0]]) if op else NO_CALL.format(seq=seq))
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
    details = [f"  {rank_list(rs)}: {sig} at {known[rs[0]].file}:{known[rs[0]].line}"  # type: ignore[union-attr]
               for sig, rs in sorted(signatures.items(), key=lambda kv: kv[1])]
    return [MISMATCH.format(seq=seq, group=where, op=calls[0].op)] + details


def _where(call: Optional[Call]) -> str:
    if call is None:
        return ""
    sig = call.signature()
    return f"{call.op}{' ' + sig if sig else ''} at {call.file}:{call.line}"


def for_world(world_dir: Optional[str], ranks: Iterable[int], dead: Iterable[int] = ()) -> Optional[Timeline]:
    """Read every rank's records file in ``world_dir`` and build the timeline; None when no rank has records."""
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
