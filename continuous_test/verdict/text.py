"""The wording every report shares: lists of ranks, rank-prefixed output, indented blocks.

One format of a rank list for every message (failures, leaks, timelines, heartbeats):
``rank 1``, ``ranks 0, 2``, ``ranks 0-3`` (runs of three or more collapse).
"""
from __future__ import annotations


def short_test_name(test_id: str) -> str:
    """A test's name without its file, module and class, as notes name it: ``test_lr[0.1]`` of
    ``f.py::test_lr[0.1]``, ``test_x`` of ``Class.test_x``; a dot in its parameters (``[0.1]``,
    ``[torch.float32]``, a fixture's ``[3.0]``) is part of the name."""
    name, bracket, params = test_id.partition("[")
    return name.rsplit("::", 1)[-1].rsplit(".", 1)[-1] + bracket + params


def rank_list(ranks) -> str:
    """``rank 1``, ``ranks 0, 2`` or ``ranks 0-3`` (runs of three or more collapse)."""
    numbers = sorted(set(ranks))
    if len(numbers) == 1:
        return f"rank {numbers[0]}"
    parts, i = [], 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{numbers[i]}-{numbers[j]}")
        else:
            parts.extend(str(n) for n in numbers[i:j + 1])
        i = j + 1
    return "ranks " + ", ".join(parts)


def indent(text: str, prefix: str = "    ") -> str:
    return "".join(prefix + line for line in text.splitlines(keepends=True))


def prefix_lines(rank: int, text: str) -> str:
    """Prefix every line of a rank's output with ``[rankN]``."""
    return "".join(f"[rank{rank}] {line}" for line in text.splitlines(keepends=True))
