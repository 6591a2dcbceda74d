"""Shards: one of N parts of the selected tests, whole worlds only, balanced on recorded durations.

::

    selected tests ─► world_of(path, class, name) ─► units (one per world) ─► weight of each unit
         (-k, markers, names)                          (a class; a module's           (recorded test times
                                                        @distributed functions         + its world start,
                                                        of one world size)             else estimates)
                                                              │
                                      assign(): longest first onto the lightest shard, then moves and swaps
                                                              ▼
                                                 shard I of N keeps its units' tests

The unit of a shard is a world (:func:`world_of`): a test class, or the hidden
class of a module's ``@distributed`` functions of one world size; a plain test
function is a unit of its own.  A world is never split, so no world starts in two
shards.  Every process computes the same assignment from the same selection and
the same durations file: ties are broken by a hash of the world's name, never by
the order at hand, so xdist workers and the N jobs of a CI matrix agree.

The durations file (``.ct_durations.json``, meant to be committed) is plain JSON::

    {"version": 1,
     "tests":  {"test/test_x.py::TestAllReduce::test_sum": 0.41, ...},
     "worlds": {"test/test_x.py::TestAllReduce": 2.3, ...}}

``tests`` holds each test's own time in seconds (its world start taken out),
``worlds`` the time one start of each world took.  A shard job that stores into
the file the shards read adds a ``pending`` part instead, ``{"count": N,
"shards": {"I": {"tests": ..., "worlds": ...}}}``: the split reads only
``tests`` and ``worlds``, so every job of one run splits alike whatever the
others stored before it, and the pending records are committed into them once
all N shards of the run stored (:meth:`Durations.record`).  Ids are pytest's node ids
(relative to pytest's rootdir; under ``run_tests()``, the file relative to the
current directory, then ``::Class::test``), so one file serves both runners.  A
test with no record counts as the median recorded test (:data:`DEFAULT_TEST_SECONDS`
with none), a world as the median recorded start (:data:`DEFAULT_WORLD_SECONDS`).

The shard comes from ``--ct-shard=I/N`` or ``CONTINUOUS_TEST_SHARD=I/N`` (I counts
from 1); with the value ``slurm``, from the Slurm job array the process runs in
(``SLURM_ARRAY_TASK_ID``, ``SLURM_ARRAY_TASK_MIN`` and ``SLURM_ARRAY_TASK_COUNT``).
Only when asked: an array whose tasks run other files, each whole, is no shard.

Touches: the durations file it is given, nothing else.  Stdlib only, and config's reading of integers.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import statistics
from dataclasses import dataclass, field
from typing import Callable, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, TypeVar

from continuous_test.config import digits, world_scope
from continuous_test.errors import ConfigError
from continuous_test.wire import files
from continuous_test.wire.env import ENV_DURATIONS, ENV_SHARD

__all__ = [
    "Shard",
    "Durations",
    "Unit",
    "Split",
    "world_of",
    "parse_shard",
    "shard_from_env",
    "assign",
    "split",
    "DEFAULT_DURATIONS_FILE",
    "DEFAULT_TEST_SECONDS",
    "DEFAULT_WORLD_SECONDS",
    "DURATIONS_VERSION",
    "INVALID_SHARD",
    "BAD_DURATIONS",
    "SHARD_LINE",
    "Kept",
    "keep",
]

DEFAULT_DURATIONS_FILE = ".ct_durations.json"
DURATIONS_VERSION = 1
DEFAULT_TEST_SECONDS = 0.5
DEFAULT_WORLD_SECONDS = 2.0
INVALID_SHARD = (
    "Invalid shard {value!r} from {source}: expected I/N with 1 <= I <= N (I counts from 1), e.g. 2/4, "
    "or slurm (the shard of this Slurm job array task)"
)
NOT_IN_AN_ARRAY = (
    "Invalid shard 'slurm' from {source}: this process is not a task of a Slurm job array "
    "({missing} not set); give I/N instead"
)
SLURM = "slurm"
# A shard is at least a world: more shards than any suite has worlds is a mistake (and a list that size).
MAX_SHARDS = 10000
TOO_MANY_SHARDS = "Invalid shard {value!r} from {source}: expected at most " + str(MAX_SHARDS) + " shards"
BAD_DURATIONS = "Invalid durations file {path}: {why}; remove it or write it again with --ct-store-durations"
SHARD_LINE = (
    "continuous_test: shard {index}/{count} ({source}): {tests} of {total} tests in {units} of {all_units} groups, "
    "estimated {seconds:.1f} s (shards {low:.1f}-{high:.1f} s)"
)
SLURM_ARRAY = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")
# Bounds on the improvement after longest-first: each step is quadratic in the units.
MAX_IMPROVEMENTS = 100
MAX_SWAP_UNITS = 400

T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (from 1) of ``count``, and where that was said (for messages)."""

    index: int
    count: int
    source: str


def parse_shard(value: object, source: str, env: Mapping[str, str] = os.environ) -> Shard:
    """Validate ``I/N``, or ``slurm`` (the array task's shard, from ``env``); a ConfigError naming ``source``
    for anything else (0/4, 5/4, x, slurm outside an array)."""
    text = str(value).strip()
    if text.lower() == SLURM:
        return _slurm_shard(env, source)
    index_text, slash, count_text = text.partition("/")
    index, count = digits(index_text) or 0, digits(count_text) or 0
    if not slash or not 1 <= index <= count:
        raise ConfigError(INVALID_SHARD.format(value=value, source=source))
    if count > MAX_SHARDS:
        raise ConfigError(TOO_MANY_SHARDS.format(value=value, source=source))
    return Shard(index, count, source)


def shard_from_env(env: Mapping[str, str] = os.environ) -> Optional[Shard]:
    """The shard ``CONTINUOUS_TEST_SHARD`` names (``slurm``: the job array task's), else None: an array's
    variables alone shard nothing."""
    raw = env.get(ENV_SHARD, "").strip()
    if raw:
        return parse_shard(raw, f"{ENV_SHARD} environment variable", env)
    return None


def _slurm_shard(env: Mapping[str, str], asked: str) -> Shard:
    """The shard of this Slurm job array task: I = TASK_ID - TASK_MIN + 1 of N = TASK_COUNT."""
    missing = [name for name in SLURM_ARRAY if not env.get(name, "").strip()]
    if missing:
        raise ConfigError(NOT_IN_AN_ARRAY.format(source=asked, missing=", ".join(missing)))
    task, low, count = (env[name].strip() for name in SLURM_ARRAY)
    source = (f"Slurm job array, asked by {asked}: {SLURM_ARRAY[0]}={task}, {SLURM_ARRAY[1]}={low}, "
              f"{SLURM_ARRAY[2]}={count}")
    first, low_number = digits(task), digits(low)
    if first is None or low_number is None:
        raise ConfigError(INVALID_SHARD.format(value=f"{task}-{low}+1/{count}", source=source))
    return parse_shard(f"{first - low_number + 1}/{count}", source)


def world_of(path: str, cls: Optional[type], name: str, world_size: Optional[int] = None) -> str:
    """The one answer to "which world does this test belong to", as the world's id.

    ``path`` is the test file (relative, as in node ids), ``cls`` the test's class
    (a ``@distributed`` function's hidden class, one per module and world size), or
    None for a plain function, which is a unit of its own; ``world_size`` is for a
    test whose world size is one of its parameters (each size its own world).  The
    classes of a module (or of the run) whose ``world_scope`` lets them share a world
    are one unit, whichever of them share it.
    """
    if cls is None:
        return f"{path}::{name}"
    try:
        scope = world_scope(cls)
    except ConfigError:  # its tests fail naming the attribute, wherever they run
        scope = "class"
    # Classes that may share a world (world_scope) are one unit: their module's, or the session's.
    world = {"class": f"{path}::{cls.__qualname__}", "module": f"{path}::<world_scope module>",
             "session": "<world_scope session>"}[scope]
    return world if world_size is None else f"{world}[ws{world_size}]"


@dataclass
class Durations:
    """Recorded seconds: each test's own time and each world's start (see the module docstring).

    ``tests`` and ``worlds`` are the committed records, the only ones a split reads;
    ``pending`` the records of the shards of a run not yet complete (shard index -> its
    records), ``pending_count`` that run's number of shards (0: none pending).
    """

    tests: Dict[str, float] = field(default_factory=dict)
    worlds: Dict[str, float] = field(default_factory=dict)
    pending: Dict[int, "Durations"] = field(default_factory=dict)
    pending_count: int = 0

    @classmethod
    def load(cls, path: str, missing_ok: bool = True) -> "Durations":
        """Read ``path``; an empty record when it does not exist (and ``missing_ok``)."""
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device would block or never end
                raise ConfigError(BAD_DURATIONS.format(path=path, why="not a regular file"))
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            if missing_ok:
                return cls()
            raise ConfigError(BAD_DURATIONS.format(path=path, why="no such file")) from None
        except ConfigError:
            raise
        except RecursionError:
            raise ConfigError(BAD_DURATIONS.format(path=path, why="nested too deeply")) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(BAD_DURATIONS.format(path=path, why=exc)) from None
        loaded = cls(_seconds(data, "tests", path), _seconds(data, "worlds", path))
        loaded.pending_count, loaded.pending = _pending(data, path)
        return loaded

    def _json(self) -> Dict[str, object]:
        return {"tests": dict(sorted(self.tests.items())), "worlds": dict(sorted(self.worlds.items()))}

    def save(self, path: str) -> None:
        """Write the record to ``path`` at once (``wire/files.write_text``: a regular file through a temporary
        file renamed, keeping its mode), sorted, so that diffs stay small."""
        data: Dict[str, object] = {"version": DURATIONS_VERSION, **self._json()}
        if self.pending:
            data["pending"] = {"count": self.pending_count,
                               "shards": {str(i): self.pending[i]._json() for i in sorted(self.pending)}}
        files.write_text(path, json.dumps(data, indent=1) + "\n")

    def update(self, other: "Durations") -> None:
        """Take ``other``'s records over this one's (a shard's run updates only its own tests)."""
        self.tests.update(other.tests)
        self.worlds.update(other.worlds)

    def record(self, run: "Durations", shard: Optional[Shard]) -> List[int]:
        """Add the records of one job's ``run`` to the file the shards read; the shards still to store.

        Without a shard (or of one shard) they are committed at once.  A shard's records stay
        pending, so that the other jobs of its run split on the same committed records as it
        did, whichever order they run in; a job of the same shard replaces its shard's
        (a job run again), one of another shard count starts a new run's.  Once all
        ``shard.count`` shards stored, their records are committed, shard 1 first.
        """
        if shard is None or shard.count == 1:
            self.update(run)
            return []
        if self.pending_count != shard.count:
            self.pending, self.pending_count = {}, shard.count
        self.pending[shard.index] = Durations(dict(run.tests), dict(run.worlds))
        missing = [index for index in range(1, shard.count + 1) if index not in self.pending]
        if not missing:
            for index in sorted(self.pending):
                self.update(self.pending[index])
            self.pending, self.pending_count = {}, 0
        return missing

    def test_seconds(self, test: str) -> float:
        """Recorded seconds of ``test``, else the median of the recorded tests."""
        return self.tests[test] if test in self.tests else _median(self.tests, DEFAULT_TEST_SECONDS)

    def world_seconds(self, world: str) -> float:
        """Recorded seconds of one start of ``world``, else the median recorded start."""
        return self.worlds[world] if world in self.worlds else _median(self.worlds, DEFAULT_WORLD_SECONDS)


def _seconds(data: object, key: str, path: str) -> Dict[str, float]:
    if not isinstance(data, dict) or data.get("version") != DURATIONS_VERSION:
        raise ConfigError(BAD_DURATIONS.format(path=path, why=f"expected an object with \"version\": {DURATIONS_VERSION}"))
    values = data.get(key, {})
    if not isinstance(values, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in values.values()):
        raise ConfigError(BAD_DURATIONS.format(path=path, why=f"{key!r} must map ids to seconds"))
    return {str(k): float(v) for k, v in values.items()}


def _pending(data: Dict[str, object], path: str) -> Tuple[int, Dict[int, Durations]]:
    """The ``pending`` part: the shard count of the run in progress and each stored shard's records."""
    pending = data.get("pending")
    if pending is None:
        return 0, {}
    why = 'expected "pending" to be {"count": N, "shards": {"I": {"tests": ..., "worlds": ...}}}'
    if not isinstance(pending, dict) or not isinstance(pending.get("shards"), dict):
        raise ConfigError(BAD_DURATIONS.format(path=path, why=why))
    count = pending.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 2:
        raise ConfigError(BAD_DURATIONS.format(path=path, why=why))
    shards: Dict[int, Durations] = {}
    for key, part in pending["shards"].items():
        if not (1 <= (digits(key) or 0) <= count and isinstance(part, dict)):
            raise ConfigError(BAD_DURATIONS.format(path=path, why=why))
        records = {**part, "version": DURATIONS_VERSION}
        shards[int(key.strip())] = Durations(_seconds(records, "tests", path), _seconds(records, "worlds", path))
    return count, shards


def _median(values: Dict[str, float], default: float) -> float:
    return statistics.median(values.values()) if values else default


@dataclass
class Unit(Generic[T]):
    """One world of the selection: its tests, in the runner's order, and its estimated seconds."""

    world: str
    tests: List[T]
    seconds: float


@dataclass
class Split(Generic[T]):
    """The selection cut into shards: ``shards[i]`` the units of shard i + 1."""

    shards: List[List[Unit[T]]]

    def seconds(self) -> List[float]:
        """Estimated seconds of each shard."""
        return [sum(unit.seconds for unit in shard) for shard in self.shards]

    def tests(self, index: int) -> List[T]:
        """The tests of shard ``index`` (from 1)."""
        return [test for unit in self.shards[index - 1] for test in unit.tests]


def split(tests: Sequence[T], world: Callable[[T], str], test_id: Callable[[T], str], has_world: Callable[[T], bool],
          count: int, durations: Durations) -> Split[T]:
    """Group ``tests`` into their worlds, weigh each (tests + one world start where it has ranks) and assign them."""
    units: Dict[str, Unit[T]] = {}
    test_default = _median(durations.tests, DEFAULT_TEST_SECONDS)  # once: the estimate of every unknown test
    world_default = _median(durations.worlds, DEFAULT_WORLD_SECONDS)
    for test in tests:
        key = world(test)
        unit = units.get(key)
        if unit is None:
            start = durations.worlds.get(key, world_default) if has_world(test) else 0.0
            unit = units[key] = Unit(key, [], start)
        unit.tests.append(test)
        unit.seconds += durations.tests.get(test_id(test), test_default)
    placed = assign({key: unit.seconds for key, unit in units.items()}, count)
    shards: List[List[Unit[T]]] = [[] for _ in range(count)]
    for key, unit in units.items():  # the runner's order within each shard
        shards[placed[key]].append(unit)
    return Split(shards)


@dataclass
class Kept(Generic[T]):
    """What one shard keeps of the selection: its tests, in the selection's order, and the line that says so."""

    tests: List[T]
    line: str


def keep(tests: Sequence[T], world: Callable[[T], str], test_id: Callable[[T], str], has_world: Callable[[T], bool],
         chosen: Shard, durations: Durations) -> Kept[T]:
    """Shard ``chosen`` of ``tests`` (:func:`split`) and its :data:`SHARD_LINE`; called by pytest's plugin and by
    unittest's suite alike, so both runners cut and say the same."""
    cut = split(tests, world, test_id, has_world, chosen.count, durations)
    kept_ids = {id(test) for test in cut.tests(chosen.index)}
    kept = [test for test in tests if id(test) in kept_ids]  # the order at hand (the loader's, a shuffled one)
    seconds = cut.seconds()
    line = SHARD_LINE.format(index=chosen.index, count=chosen.count, source=chosen.source, tests=len(kept),
                             total=len(tests), units=len(cut.shards[chosen.index - 1]),
                             all_units=sum(map(len, cut.shards)), seconds=seconds[chosen.index - 1],
                             low=min(seconds), high=max(seconds))
    return Kept(kept, line)


def _tie(key: str) -> bytes:
    return hashlib.blake2b(key.encode(), digest_size=8).digest()


def assign(weights: Mapping[str, float], count: int, improve: bool = True) -> Dict[str, int]:
    """Shard (from 0) of each unit: longest first onto the lightest shard, then single moves and swaps
    that lower the heaviest shard (unless not ``improve``); deterministic (ties broken by a hash of the unit's id)."""
    loads = [0.0] * count
    members: List[List[str]] = [[] for _ in range(count)]
    for key in sorted(weights, key=lambda k: (-weights[k], _tie(k))):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        loads[lightest] += weights[key]
        members[lightest].append(key)
    swaps = len(weights) <= MAX_SWAP_UNITS
    for _ in range(MAX_IMPROVEMENTS if improve else 0):
        if not _improve(weights, loads, members, swaps):
            break
    return {key: shard for shard, keys in enumerate(members) for key in keys}


def _improve(weights: Mapping[str, float], loads: List[float], members: List[List[str]], swaps: bool) -> bool:
    """One move or swap out of the heaviest shard that lowers the larger of the two shards it touches."""
    heavy = max(range(len(loads)), key=lambda i: (loads[i], -i))
    best: Optional[Tuple[float, int, str, Optional[str]]] = None
    for other in sorted(range(len(loads)), key=lambda i: (loads[i], i)):
        if other == heavy:
            continue
        gap = loads[heavy] - loads[other]
        for a in members[heavy]:
            for b in [None, *(members[other] if swaps else ())]:
                delta = weights[a] - (weights[b] if b is not None else 0.0)
                if 1e-9 < delta < gap - 1e-9:
                    peak = max(loads[heavy] - delta, loads[other] + delta)
                    if best is None or peak < best[0] - 1e-9:
                        best = (peak, other, a, b)
    if best is None:
        return False
    _, other, a, b = best
    heavy_keys, other_keys = members[heavy], members[other]
    heavy_keys.remove(a)
    other_keys.append(a)
    delta = weights[a]
    if b is not None:
        other_keys.remove(b)
        heavy_keys.append(b)
        delta -= weights[b]
    loads[heavy] -= delta
    loads[other] += delta
    return True


def durations_path(option: Optional[str], root: str) -> str:
    """The durations file: ``option`` (relative to ``root``), else ``CONTINUOUS_TEST_DURATIONS``, else the default in ``root``."""
    chosen = option or os.environ.get(ENV_DURATIONS, "").strip() or DEFAULT_DURATIONS_FILE
    return os.path.join(root, os.path.expanduser(chosen))
