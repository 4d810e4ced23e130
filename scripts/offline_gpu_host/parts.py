"""Split a staged pack (``pack.sh``) into parts of at most ``--budget-mib`` MiB each.

Every file under STAGE keeps its relative path inside some ``OUT/part<N>/``; ``server/`` goes
whole into ``part1`` (``setup.sh`` installs the server from one part); a file larger than the
budget is cut into ``<path>.chunk-<i>-of-<n>`` pieces (i = 01..n) that ``setup.sh`` joins once
all have arrived. The rest is placed largest first into the first part with room. The budget
defaults to 59 MiB: one transfer to the GPU host carries at most 64 MiB, the ~3 MB checkout
included.

Usage: ``python scripts/offline_gpu_host/parts.py STAGE OUT [--budget-mib 60]``; prints each
part's size in MiB.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

MIB = 2**20
BUDGET_MIB = 59
FIRST = "server"  # the folder that must go whole into part1


@dataclass
class Piece:
    """``size`` bytes of ``source`` from ``offset``, to be written as ``name`` (relative)."""

    source: Path
    name: str
    offset: int
    size: int


@dataclass
class Part:
    pieces: list[Piece] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.pieces)


def pieces(stage: Path, budget: int) -> list[Piece]:
    """Every file under ``stage``, files over ``budget`` bytes cut into equal chunks."""
    out = []
    for path in sorted(p for p in stage.rglob("*") if p.is_file()):
        name, size = path.relative_to(stage).as_posix(), path.stat().st_size
        if size <= budget:
            out.append(Piece(path, name, 0, size))
            continue
        count = math.ceil(size / budget)
        step = math.ceil(size / count)
        for i in range(count):
            length = min(step, size - i * step)
            out.append(Piece(path, f"{name}.chunk-{i + 1:02d}-of-{count:02d}", i * step, length))
    return out


def plan(stage: Path, budget: int) -> list[Part]:
    """Parts: ``FIRST/`` in part1, then first fit, largest piece first.

    Raises:
        ValueError: ``FIRST/`` alone is over the budget.
    """
    all_pieces = pieces(stage, budget)
    first = [p for p in all_pieces if p.name.startswith(f"{FIRST}/")]
    if any(p.name != p.source.relative_to(stage).as_posix() for p in first) or (
        sum(p.size for p in first) > budget
    ):
        raise ValueError(f"{FIRST}/ is over the {budget / MIB:.0f} MiB budget of part1")
    parts = [Part(first)]
    rest = sorted((p for p in all_pieces if p not in first), key=lambda p: -p.size)
    for piece in rest:
        part = next((q for q in parts if q.size + piece.size <= budget), None)
        if part is None:
            part = Part()
            parts.append(part)
        part.pieces.append(piece)
    return parts


def write(parts: list[Part], out: Path) -> None:
    """Write ``out/part<N>/<piece name>`` for each part (N from 1)."""
    for number, part in enumerate(parts, 1):
        for piece in part.pieces:
            target = out / f"part{number}" / piece.name
            target.parent.mkdir(parents=True, exist_ok=True)
            with piece.source.open("rb") as src, target.open("wb") as dst:
                src.seek(piece.offset)
                remaining = piece.size
                while remaining:
                    block = src.read(min(remaining, 8 * MIB))
                    dst.write(block)
                    remaining -= len(block)
            if piece.offset == 0 and piece.size == piece.source.stat().st_size:
                shutil.copystat(piece.source, target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--budget-mib", type=float, default=BUDGET_MIB)
    args = parser.parse_args(argv)
    parts = plan(args.stage, int(args.budget_mib * MIB))
    write(parts, args.out)
    for number, part in enumerate(parts, 1):
        print(f"part{number}\t{part.size / MIB:.1f} MiB\t{len(part.pieces)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
