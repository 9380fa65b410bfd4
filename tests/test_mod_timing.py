"""Speed of the modifications by the timing model (predicted, 910B2): a call without mods keeps the
plain kernel's predicted time, and a document mask's predicted time follows the KV tiles it visits,
not the dense count (block sparsity). The cost of each built-in modification is the table of
benchmarks/flex_predict.py in docs/writing-a-mod.md."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from ptofa.attention.inputs import fixed_config
from ptofa.launch.calls import blocks_for
from ptofa.launch.tune import TuneShape, busiest_block_us, launch_us
from ptofa.pipeline import FAConfig, ProblemShape

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _bench():
    spec = importlib.util.spec_from_file_location("flex_predict", ROOT / "benchmarks" / "flex_predict.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _readme_rows(s: int) -> list[tuple[str, int, int, float]]:
    """(softmax, tile_s1, qk_preload, predicted us) of the README speed table's rows at S0 = S1 = s."""
    rows = re.findall(rf"^\| {s} \| (f32|f16) \| (\d+)/(\d+) \| ([\d.]+) \|", (ROOT / "README.md").read_text(), re.M)
    return [(sd, int(t), int(p), float(us)) for sd, t, p, us in rows]


@pytest.mark.parametrize("softmax", ["f32", "f16"])
def test_a_call_without_mods_keeps_the_readme_predicted_time(softmax):
    """The README's speed table (benchmarks/speed_table.py) predicts the plain kernel at S = 1024; the mods'
    hooks emit nothing without mods, so the prediction of today's kernel stays within 2 % of it."""
    ((_, tile_s1, preload, readme_us),) = [r for r in _readme_rows(1024) if r[0] == softmax]
    shape = TuneShape(1, 1, 1, 1024, 1024, 128)
    spec, problem = shape.spec(), shape.problem()
    config = FAConfig(head=128, tile_s1=tile_s1, qk_preload=preload, softmax_dtype=softmax)
    assert not config.mods and not config.block_ranges
    block_dim = blocks_for(problem.work_units(config), spec)
    us, _ = launch_us(config, problem, spec, block_dim, busiest_block_us(config, shape, spec, block_dim))
    assert abs(us / readme_us - 1) <= 0.02, (us, readme_us)


def test_document_mask_time_follows_the_visited_tiles():
    """S = 1024 split in 1, 2 or 4 tile-aligned documents (B = 1, N = 2, D = 64): each unit visits the KV
    tiles of its document only. Four documents cost what the dense batch of the same tiles costs (B = 4,
    S / 4, its mask showing everything), and the time grows by the same amount per visited tile from 4 to
    2 documents as from 2 to 1: it is affine in the visited tiles, not in the dense count."""
    bench = _bench()
    s, heads, d = 1024, 2, 64
    base = fixed_config(d, "f16", s1=s)

    def us(batch, length, docs):
        """(predicted us, KV tiles a unit visits)"""
        shape = ProblemShape(batch, heads, length, length)
        config, tensors = bench.with_callables(base, bench.inputs(batch, heads, length, d), shape,
                                               mask_mod=bench.document_mask(length, docs))
        ranges = tensors["tile_ranges"]
        assert (ranges[:, 2:] == ranges[:, :2]).all()  # every visited tile is full: no mask IR runs
        return bench.predicted(config, shape, tensors)[0], float((ranges[:, 1] - ranges[:, 0]).float().mean())

    (four, t4), (two, t2), (one, t1) = us(1, s, 4), us(1, s, 2), us(1, s, 1)
    assert t1 == 2 * t2 == 4 * t4
    batched, tb = us(4, s // 4, 1)
    assert tb == t4 and abs(four / batched - 1) <= 0.02, (four, batched)
    per_tile_near, per_tile_far = (two - four) / (t2 - t4), (one - two) / (t1 - t2)
    assert per_tile_near > 0 and abs(per_tile_far / per_tile_near - 1) <= 0.15, (four, two, one)
