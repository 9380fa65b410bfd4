"""Split-KV: the split forward kernel plus the reduce kernel against the unsplit kernel and the reference,
on the simulator with guarded tensors (GM bounds are checked by the simulator on every access)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from click.testing import CliRunner
from test_variants import Guarded, config, parsed

import ptofa
from ptofa.kernels import argspec
from ptofa.launch.base import TORCH_DTYPES
from ptofa.cli.main import main
from ptofa.kernels.fa_reduce import emit_reduce
from ptofa.attention.kvcache import KVCache, decode_shape, decode_units, reference_kvcache
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, partial_elems, workspace_bytes
from ptofa.reference import Reference, check_accuracy, check_lse
from ptofa.sim import simulate
from ptofa.launch import sim
from ptofa.launch.plan import plan_split
from ptofa.launch.sim import sim_kernel_args
from ptofa.launch.splitkv import Plan, plan_splits
from ptofa.ir.textio import check_text, print_pto
from ptofa.launch.varlen import make_varlen_inputs, reference_varlen, split_tiles, unit_table, varlen_shape
from ptofa.kernels.builtin_mods.window import window_mods


def _unsplit(cfg: FAConfig, shape: ProblemShape, q, k, v, table, scale, block_table=None):
    o = torch.full(q.shape, math.nan, dtype=TORCH_DTYPES[cfg.out_dtype])
    lse = torch.full((shape.heads, shape.s0), math.nan)
    simulate(parsed(cfg), sim_kernel_args(cfg, shape, q, k, v, o, 3, scale, lse=lse, units=table,
                                          block_table=block_table), 3)
    return o, lse


def _split(cfg: FAConfig, shape: ProblemShape, q, k, v, table, scale, num_splits, block_dim, block_table=None):
    """Split launch with every GM tensor (workspace included, sized exactly) inside guard regions."""
    o = Guarded.like(torch.full(q.shape, math.nan, dtype=TORCH_DTYPES[cfg.out_dtype]))
    lse = Guarded.like(torch.full((shape.heads, shape.s0), math.nan))
    ws = Guarded.like(torch.full((workspace_bytes(cfg, shape, block_dim, num_splits) // 4,), math.nan))
    ins = [Guarded.like(t) for t in (q, k, v)]
    launch_split_sim(cfg, shape, *[g.pointer() for g in ins], o.pointer(),
                     block_dim, scale, num_splits, units=table, workspace=ws.pointer(), lse=lse.pointer(),
                     block_table=block_table)
    for g in (*ins, o, lse, ws):
        assert g.guards_intact(), "a guard region around a GM tensor was written"
    return o.inner, lse.inner


def launch_split_sim(cfg: FAConfig, shape: ProblemShape, q, k, v, o, block_dim: int, scale: float, num_splits: int, *,
                     units, workspace=None, lse=None, block_table=None):
    """The split launch of `units` (forward, then reduce) through the one simulator launch."""
    plan = plan_split(Plan(num_splits, cfg, units, block_dim), shape, "910B2", scale=scale,
                      max_pages=0 if block_table is None else int(block_table.shape[-1]))
    return sim.launch(plan, {"q": q, "k": k, "v": v, "o": o, "lse": lse, "block_table": block_table},
                      workspace=workspace)


def _check(out, lse, ref: Reference, ref_out, ref_lse) -> None:
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()
    assert check_lse(lse, ref).passed
    assert check_accuracy(out.float(), ref.out32, ref_out.float()).passed  # within the rule of the unsplit output
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))  # the same empty rows (+inf) as unsplit
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse[finite], ref_lse[finite], atol=2e-3, rtol=1e-4)


VARLEN_CASES = [((-1, -1), s) for s in (2, 5)] + [((-1, 0), s) for s in range(1, 9)] + [((40, 8), s) for s in (3, 8)]


@pytest.mark.parametrize("window, num_splits", VARLEN_CASES)
def test_varlen_split_equals_unsplit(window, num_splits) -> None:
    lens = [0, 1, 127, 129, 1000]
    base = config(head=64, varlen=True, lse=True, mods=window_mods(window != (-1, -1)), tile_s1=128, qk_preload=2)
    cfg = dataclasses.replace(base, split_kv=True)
    shape = varlen_shape(lens, lens, 2, 1, window)
    q, k, v = make_varlen_inputs(shape, base, seed=3)
    scale = 1 / 8
    ref = reference_varlen(q, k, v, lens, lens, scale, window, torch.float16)
    ref_out, ref_lse = _unsplit(base, shape, q, k, v, unit_table(base, lens, lens, 2, window), scale)
    out, lse = _split(cfg, shape, q, k, v, unit_table(cfg, lens, lens, 2, window, num_splits), scale, num_splits, 5)
    _check(out, lse, ref, ref_out, ref_lse)


def _paged_cache(batch: int, capacity: int, page_size: int, kv_heads: int, head: int) -> KVCache:
    g = torch.Generator().manual_seed(11)
    per_seq = capacity // page_size
    pages = batch * per_seq + 3
    table = torch.randperm(pages, generator=g)[: batch * per_seq].to(torch.int32).reshape(batch, per_seq)
    k, v = (torch.randn(pages, page_size, kv_heads, head, generator=g).half() for _ in range(2))
    return KVCache(k, v, table.contiguous())


@pytest.mark.parametrize("s0, window, num_splits", [(1, (-1, -1), s) for s in range(1, 9)] + [(2, (-1, 0), 3), (2, (-1, 0), 8)])
def test_paged_decode_split_equals_unsplit(s0, window, num_splits) -> None:
    cache = _paged_cache(2, 1024, 256, 2, 128)
    lens, heads = [900, 131], 8  # both end mid-page; 131 keys: 2 tiles, so most splits are empty
    base = config(varlen=True, lse=True, page_size=256, mods=window_mods(window != (-1, -1)))
    cfg = dataclasses.replace(base, split_kv=True)
    shape = decode_shape(cache, 2, s0, lens, heads, window)
    q = torch.randn(2, s0, heads, 128, generator=torch.Generator().manual_seed(5)).half()
    scale = 1 / math.sqrt(128)
    ref = reference_kvcache(q, cache, lens, scale, window, torch.float16)
    qf = q.reshape(2 * s0, heads, 128)
    ref_out, ref_lse = _unsplit(base, shape, qf, cache.k, cache.v, decode_units(base, cache, 2, s0, lens, heads, window),
                                scale, cache.block_table)
    table = decode_units(cfg, cache, 2, s0, lens, heads, window, num_splits)
    out, lse = _split(cfg, shape, qf, cache.k, cache.v, table, scale, num_splits, 7, cache.block_table)
    as_bhs = (lambda x: x.reshape(heads, 2, s0).permute(1, 0, 2))
    _check(out.reshape(q.shape), as_bhs(lse), ref, ref_out.reshape(q.shape), as_bhs(ref_lse))


def test_split_ranges_cover_the_visible_tiles_once() -> None:
    for n in range(0, 12):
        for splits in range(1, 9):
            sizes = [split_tiles(n, i, splits) for i in range(splits)]
            assert sum(sizes) == n and max(sizes) - min(sizes) <= 1


def test_serving_calls_split_and_choose() -> None:
    cache = _paged_cache(1, 4096, 256, 1, 64)
    q = torch.randn(1, 1, 4, 64, generator=torch.Generator().manual_seed(2)).half()
    lens = torch.tensor([4000], dtype=torch.int32)
    ref = reference_kvcache(q, cache, [4000], 1 / 8, (-1, -1), torch.float16)
    for num_splits in (0, 1, 4):
        out, lse = ptofa.flash_attn_with_kvcache(q, cache.k, cache.v, cache_seqlens=lens, block_table=cache.block_table,
                                                 return_lse=True,
                                                 num_splits=num_splits, backend="sim")
        assert check_accuracy(out.float(), ref.out32, ref.out_low).passed and check_lse(lse, ref).passed
    base = config(head=64, varlen=True, page_size=256)
    table = decode_units(base, cache, 1, 1, [4000], 4, (-1, -1))
    chosen = plan_splits(base, table, 24)
    assert min(chosen) >= 2 and max(chosen) <= 16  # 4 units of 16 tiles on 24 cores: the model predicts splitting pays
    def wide(batch: int) -> torch.Tensor:
        paged = KVCache(cache.k, cache.v, cache.block_table.repeat(batch, 1))
        return decode_units(base, paged, batch, 1, [4000] * batch, 4, (-1, -1))

    assert plan_splits(base, wide(6), 24) == [1] * 24  # 24 units fill the 24 cores in one wave
    assert plan_splits(base, wide(8), 24) == [1] * 24 + [3] * 8  # 32 units: the 8 of the last wave fill it


def test_workspace_and_split_rules() -> None:
    cfg = config(head=64, varlen=True, split_kv=True)
    shape = varlen_shape([5], [300], 2, 2)
    o_elems, lse_elems = partial_elems(cfg, shape, 3)
    assert (o_elems, lse_elems) == (3 * 5 * 2 * 64, 3 * 2 * 5)
    assert workspace_bytes(cfg, shape, 4, 3) == 4 * cfg.gm_slot_bytes_per_block + 4 * (o_elems + lse_elems)
    q, k, v = make_varlen_inputs(shape, cfg, 0)
    o = torch.empty(5, 2, 64, dtype=torch.float16)
    small = torch.zeros(workspace_bytes(cfg, shape, 4, 3) - 4, dtype=torch.uint8)
    with pytest.raises(ConfigError, match=r"workspace: \d+ bytes, but split-KV with num_splits=3 on 4 blocks needs \d+"):
        launch_split_sim(cfg, shape, q, k, v, o, 4, 0.1, 3,
                         units=unit_table(cfg, [5], [300], 2, num_splits=3), workspace=small)
    with pytest.raises(ConfigError, match="split_kv=True needs varlen=True"):
        FAConfig(split_kv=True)
    with pytest.raises(ConfigError, match="num_splits=3 needs num_splits >= 1, and > 1 needs a split_kv kernel"):
        unit_table(config(varlen=True), [5], [5], 1, num_splits=3)
    qq = torch.zeros(5, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    for bad in (-1, 17, 2.0, True):
        with pytest.raises(ValueError, match=r"num_splits: .* must be an int in 0\.\.16"):
            ptofa.flash_attn_varlen_func(qq, qq, qq, cu, cu, 5, 5, num_splits=bad, backend="sim")


@pytest.mark.parametrize("knobs", [dict(head=128), dict(head=64, lse=True, in_dtype="bf16", out_dtype="f32"),
                                   dict(head=256, lse=True)])
def test_reduce_kernel_round_trips_and_verifies(knobs, tmp_path) -> None:
    cfg = config(varlen=True, split_kv=True, **knobs)
    text = emit_reduce(cfg)
    assert print_pto(check_text(text).module) == text
    signature = [(a.name, a.ir_type) for a in argspec.reduce_entry_args(cfg)]
    assert f"func.func @{argspec.REDUCE_ENTRY_NAME}(" in text
    for name, ir_type in signature:
        assert f"%{name}: {ir_type}" in text
    path = tmp_path / "fa_reduce.pto"
    path.write_text(text)
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 0, result.output


def test_reduce_kernel_gets_its_own_launcher(tmp_path) -> None:
    from ptofa.launch.toolchain import caller_for

    cfg = config(varlen=True, split_kv=True, lse=True)
    path = tmp_path / "fa_reduce.pto"
    path.write_text(emit_reduce(cfg))
    _, text = caller_for(path)
    assert 'extern "C" int32_t call_fa_reduce(' in text
    assert "fa_reduce<<<block_dim, nullptr, stream>>>(" in text
    assert "uint8_t* units,\n        int64_t heads,\n        int64_t s0,\n        int64_t num_units)" in text


@pytest.mark.ptoas
@pytest.mark.parametrize("knobs", [dict(), dict(lse=True, head=64), dict(head=256, in_dtype="bf16", out_dtype="f32")])
def test_real_ptoas_compiles_the_split_kernels(knobs, tmp_path) -> None:
    """The split forward kernel and the reduce kernel compile unedited, each with its extern "C" entry."""
    import subprocess

    from ptofa.fa_builder import emit_fa
    from ptofa.launch.toolchain import compile_commands

    cfg = config(varlen=True, split_kv=True, **knobs)
    for entry, text in ((argspec.ENTRY_NAME, emit_fa(cfg)), (argspec.REDUCE_ENTRY_NAME, emit_reduce(cfg))):
        pto_path = tmp_path / f"{entry}.pto"
        pto_path.write_text(text)
        build = tmp_path / entry
        build.mkdir()
        done = subprocess.run(compile_commands(pto_path, build)[0], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{entry} {cfg.summary()}\n{done.stderr}"
        assert f'extern "C" __global__ AICORE void {entry}(' in (build / f"{entry}.cpp").read_text()


@pytest.mark.parametrize("heads, kv_heads, num_splits", [(8, 2, 1), (8, 2, 4), (16, 2, 1), (16, 2, 3), (8, 1, 2)])
def test_gqa_packed_decode_matches_reference(heads, kv_heads, num_splits) -> None:
    """Groups of 4 and 8 q heads per KV head in one unit (S0 = 1, causal: every key visible), split or not."""
    cache = _paged_cache(2, 1024, 256, kv_heads, 128)
    lens = torch.tensor([900, 131], dtype=torch.int32)
    q = torch.randn(2, 1, heads, 128, generator=torch.Generator().manual_seed(9)).half()
    ref = reference_kvcache(q, cache, lens.tolist(), 1 / math.sqrt(128), (-1, -1), torch.float16)
    k0 = cache.k.clone()
    out, lse = ptofa.flash_attn_with_kvcache(q, cache.k, cache.v, cache_seqlens=lens, block_table=cache.block_table, causal=True,
                                             return_lse=True, num_splits=num_splits, pack_gqa=True, backend="sim")
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()
    assert check_lse(lse, ref).passed and torch.equal(cache.k, k0)


def test_gqa_packed_kernel_on_guarded_tensors() -> None:
    """The packed kernel's Q/O/LSE views stay inside their tensors (guards), against the unpacked kernel."""
    cache = _paged_cache(3, 512, 256, 2, 64)
    lens, heads = [400, 0, 77], 8
    shape = decode_shape(cache, 3, 1, lens, heads, (-1, -1))
    q = torch.randn(3, heads, 64, generator=torch.Generator().manual_seed(4)).half()
    ref = reference_kvcache(q.unsqueeze(1), cache, lens, 1 / 8, (-1, -1), torch.float16)
    packed = config(head=64, varlen=True, lse=True, page_size=256, gqa_pack=True)
    table = decode_units(packed, cache, 3, 1, lens, heads, (-1, -1))
    assert table.shape[0] == 3 * 2 and set(table[:, 4].tolist()) == {0, 4}  # one unit per (sequence, KV head)
    o = Guarded.like(torch.full((3, heads, 64), math.nan, dtype=torch.float16))
    lse = Guarded.like(torch.full((3, heads), math.nan))
    ins = [Guarded.like(t) for t in (q, cache.k, cache.v)]
    simulate(parsed(packed), sim_kernel_args(packed, shape, *[g.pointer() for g in ins], o.pointer(), 2, 1 / 8,
                                             lse=lse.pointer(), units=table, block_table=cache.block_table), 2)
    assert all(g.guards_intact() for g in (*ins, o, lse))
    assert check_accuracy(o.inner.unsqueeze(1).float(), ref.out32, ref.out_low).passed
    assert check_lse(lse.inner.reshape(3, 1, heads).permute(0, 2, 1), ref).passed


def test_gqa_packing_rules() -> None:
    cache = _paged_cache(1, 512, 256, 2, 64)
    q2 = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"pack_gqa: needs one query row \(S0=2\)"):
        ptofa.flash_attn_with_kvcache(q2, cache.k, cache.v, cache_seqlens=torch.tensor([10], dtype=torch.int32),
                                      block_table=cache.block_table,
                                      pack_gqa=True, backend="sim")
    with pytest.raises(ConfigError, match="gqa_pack=True needs varlen=True .* and no window in mods"):
        FAConfig(varlen=True, mods=window_mods(), gqa_pack=True)
    with pytest.raises(ConfigError, match="GQA packing: needs one query row per sequence"):
        decode_units(config(varlen=True, page_size=256, gqa_pack=True), cache, 1, 2, [10], 8, (-1, -1))


def test_gqa_packing_off_for_causal_s0_2_is_still_right() -> None:
    """S0 = 2 causal: the two rows see different keys, so the call does not pack (auto) and stays right."""
    cache = _paged_cache(2, 1024, 256, 2, 128)
    lens = torch.tensor([700, 300], dtype=torch.int32)
    q = torch.randn(2, 2, 8, 128, generator=torch.Generator().manual_seed(6)).half()
    ref = reference_kvcache(q, cache, lens.tolist(), 1 / math.sqrt(128), (-1, 0), torch.float16)
    out, lse = ptofa.flash_attn_with_kvcache(q, cache.k, cache.v, cache_seqlens=lens, block_table=cache.block_table, causal=True,
                                             return_lse=True, num_splits=2, backend="sim")
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed and check_lse(lse, ref).passed


def _decode_figures(cache_len: int) -> dict[str, float]:
    from ptofa.cli.serving_run import decode_case, run_split

    times = {}
    for pack in (True, False):
        case = decode_case(FAConfig(), 1, 32, 8, 1, cache_len, 128, (-1, -1), 0, pack)
        chosen = run_split(case, 0)
        whole = run_split(case, 1)
        assert chosen.passed and whole.passed, (chosen.message, whole.message)
        times[f"pack={pack} chosen"], times[f"pack={pack} one"] = chosen.predicted_us, whole.predicted_us
        times[f"pack={pack} splits"] = chosen.num_splits
    return times


def test_decode_split_and_packing_are_predicted_faster() -> None:
    """B=1, N=32, KVN=8, D=128 decode on 2048 cached keys (the issue's shape at 1/16 of its cache)."""
    t = _decode_figures(2048)
    assert t["pack=True splits"] > 1 and t["pack=True chosen"] < 0.7 * t["pack=True one"], t
    assert t["pack=True chosen"] < 0.5 * t["pack=False chosen"], t


@pytest.mark.slow
def test_issue_decode_figure() -> None:
    """The issue's decode shape: B=1, N=32, KVN=8, S_cache=32768, D=128 (timing model, 910B2):
    packed, split 3: 119.8 us vs 347.9 us unsplit; unpacked, split 3: 468.9 us vs 691.5 us."""
    t = _decode_figures(32768)
    assert t["pack=True chosen"] < 0.5 * t["pack=True one"], t
    assert t["pack=False chosen"] < 0.8 * t["pack=False one"], t
    assert t["pack=True chosen"] < 0.4 * t["pack=False chosen"], t
