"""Scale rows: synthetic fixes of one change each (2 hunks, +16 lines), 1 to 64 of them, spread over
as many files or stacked on one, on targets of two sizes; cold apply and warm re-run on each."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .beds import Bed, compile_targets, synth_cookbook, synth_module, write_site
from .engine import Tools
from .measure import Series, log, must, peak, run
from .shape import Edit, FixShape, Shape

__all__ = ["ScaleRow", "bench_scale", "SCALE_FIXES", "SCALE_SIZES"]

SCALE_FIXES = (1, 4, 16, 64)
SCALE_SIZES = {"1x": 60_000, "4x": 240_000}  # 1x: about the real targets' mean size


@dataclass
class ScaleRow:
    fixes: int
    size: str
    shape: str  # spread: one file per fix; stacked: every fix on one file
    files: int
    cold: Series
    cold_floor: Series
    warm: Series
    warm_floor: Series


def scale_shape(like: Shape, n: int, spread: bool, size: int) -> Shape:
    package = like.pins[0].package
    fixes = tuple(
        FixShape(
            f"scale-{i:03d}", False, (Edit(f"{package}/bench_scale/target_{i if spread else 0:03d}.py", 2, 16, 0),)
        )
        for i in range(n)
    )
    paths = {e.path for f in fixes for e in f.edits}
    return dataclasses.replace(like, fixes=fixes, sizes=dict.fromkeys(sorted(paths), size), sized_from="scale")


def _trees(root: Path, shape: Shape) -> dict[str, Path]:
    trees = {}
    for pin in shape.pins:
        tree = root / pin.dist
        (tree / pin.package).mkdir(parents=True)
        (tree / pin.package / "__init__.py").touch()
        trees[pin.dist] = tree
    for rel, size in shape.sizes.items():
        target = trees[shape.dist_of(rel)] / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(synth_module(rel.rsplit("/", 1)[-1].removesuffix(".py"), size))
    return trees


def bench_scale(like: Shape, work: Path, tools: Tools, builders: ModuleType, repeat: int) -> list[ScaleRow]:
    """Every row on a bed of its own, ``like``'s pins and profile name, removed once measured."""
    rows = []
    for size_name, size in SCALE_SIZES.items():
        for spread in (True, False):
            kind = "spread" if spread else "stacked"
            for n in SCALE_FIXES:
                base = work / f"scale-{size_name}-{kind}-{n}"
                shape = scale_shape(like, n, spread, size)
                trees = _trees(base / "src", shape)
                cookbook = base / "cookbook"
                synth_cookbook(cookbook, trees, shape, builders, tools)
                site = write_site(base, trees, shape.pins, builders)
                compile_targets(site, shape.paths)
                bed = Bed(site, cookbook, trees, [], shape.paths)
                bed.snapshot()
                env = tools.env(cookbook)
                cmd = tools.apply_all(site, [])
                what = f"scale {size_name} {kind} {n}"
                row = ScaleRow(
                    n, size_name, kind, len(shape.sizes), *map(Series, ("cold", "cold_floor", "warm", "warm_floor"))
                )
                bed.reset()
                row.cold.measure(must(peak(cmd, env=env, cwd=base), f"{what}: cold apply"))
                row.warm.measure(must(peak(cmd, env=env, cwd=base), f"{what}: warm re-run"))
                for _ in range(repeat):
                    bed.reset()
                    row.cold_floor.add(must(run(tools.floor(bed.existing()), cwd=base), "floor"))
                    row.cold.add(must(run(cmd, env=env, cwd=base), f"{what}: cold apply"))
                    row.warm_floor.add(must(run(tools.floor(bed.existing()), cwd=base), "floor"))
                    row.warm.add(must(run(cmd, env=env, cwd=base), f"{what}: warm re-run"))
                log(f"{what} fixes: cold {row.cold.median * 1000:.0f} ms, warm {row.warm.median * 1000:.0f} ms")
                rows.append(row)
                shutil.rmtree(base)
    return rows
