"""`run_fa run --backward --seqlens ...`: the varlen forward, then the varlen backward (one launch of each
kernel over the batch's unit tables, `attention.backward.run_varlen_backward`), dq, dk, dv checked
per sequence with the accuracy rule, and the backward's time predicted from the unit tables."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from ptofa.attention import backward
from ptofa.cli.main import main
from ptofa.kernels.bwd_pipeline import default_config
from ptofa.launch.varlen import backward_tables
from ptofa.kernels.builtin_mods.window import window_mods

NUMBER = r"([0-9.]+(?:e[+-]?[0-9]+)?)"


def _run(*args: str):
    return CliRunner().invoke(main, ["run", "--backend", "sim", "--backward", "--head", "64", *args])


@pytest.mark.parametrize("q_lens, k_lens, heads, kv_heads, mask, atomic", [
    ("0,1,127,129", "5,130,127,0", 4, 2, ["--causal"], False),  # GQA, causal per sequence, 0-length ones
    ("0,1,127,129", "5,130,127,0", 4, 2, ["--window", "40,3"], True),  # a sliding window, atomic dQ
    ("70,0,33", "90,4,33", 2, 1, [], False),  # MQA without a mask
])
def test_cli_varlen_backward_passes_and_predicts_from_the_tables(q_lens, k_lens, heads, kv_heads, mask, atomic):
    result = _run("--seqlens", q_lens, "--kv-seqlens", k_lens, "--heads", str(heads), "--kv-heads", str(kv_heads),
                  *mask, *(["--atomic"] if atomic else []))
    out = result.output
    assert result.exit_code == 0, out
    for name in ("dq", "dk", "dv"):
        found = re.search(rf"^{name}: pass err {NUMBER} <= tol {NUMBER}", out, re.M)
        assert found, (name, out)
        err, tol = float(found[1]), float(found[2])
        assert 0 < err <= tol < 0.05
    assert "varlen" in out and ("atomic" in out) == atomic
    # the line may wrap at the console's 120 columns: it ends where the next report line starts
    total = re.search(rf"^backward predicted {NUMBER} us = (.*?)\n(?:backward/forward|\[)", out, re.M | re.S)
    kernels = dict((k, float(us)) for k, us in re.findall(rf"(\w+) {NUMBER} us\s+\(", total[2]))
    assert list(kernels) == (["prep", "dkdv", "post"] if atomic else ["dq", "dkdv"])
    assert float(total[1]) == pytest.approx(sum(kernels.values()), abs=0.02) and float(total[1]) > 0
    window = {"--causal": (-1, 0), "--window": (40, 3)}.get(mask[0] if mask else None, (-1, -1))
    config = default_config(64, mods=window_mods(window != (-1, -1)), atomic_dq=atomic, varlen=True)
    lens = [int(x) for x in q_lens.split(",")], [int(x) for x in k_lens.split(",")]
    tables = backward_tables(config, *lens, heads, kv_heads, window)
    for kernel in ("dq", "dkdv"):
        if kernel in config.kernels:
            line = re.search(rf"^\[{kernel}\] unit table: (\d+) units, (\d+) steps on (\d+) blocks; predicted busiest "
                             rf"block {NUMBER} us", out, re.M)
            assert int(line[1]) == len(tables[kernel]) and int(line[3]) == min(len(tables[kernel]), 24)
            assert 0 < float(line[4]) < kernels[kernel]


def test_cli_varlen_backward_fails_when_a_unit_is_missing(monkeypatch):
    """The check can fail: without the longest dkdv unit, dk and dv fail the rule and run exits 1."""
    real = backward.backward_tables
    monkeypatch.setattr(backward, "backward_tables",
                        lambda *a, **kw: {k: t[1:] if k == "dkdv" else t for k, t in real(*a, **kw).items()})
    result = _run("--seqlens", "70,129", "--kv-seqlens", "90,129", "--heads", "2", "--kv-heads", "1", "--causal")
    assert result.exit_code == 1, result.output
    assert re.search(r"^dq: pass", result.output, re.M)
    for name in ("dk", "dv"):
        assert re.search(rf"^{name}: FAIL err {NUMBER} > tol {NUMBER}", result.output, re.M), result.output


@pytest.mark.parametrize("args, message", [
    (["--seqlens", "3,4", "--kv-seqlens", "5"], "2 query sequences but 1 key sequences"),
    (["--seqlens", "3,4", "--out-dtype", "fp32"], "--out-dtype not supported by the backward kernels"),
    (["--seqlens", "3,4", "--key-padding-mask"], "--key-padding-mask: not with --seqlens"),
    (["--seqlens", "3,4", "--num-splits", "2"], "--backward: not with --decode / --num-splits"),
    (["--seqlens", "3,4", "--head-dim-v", "40"], "--head-dim 64 --head-dim-v 40"),
])
def test_cli_varlen_backward_bad_input_exits_2(args, message):
    result = _run(*args)
    assert result.exit_code == 2 and message in result.output, result.output
