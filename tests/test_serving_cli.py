"""`run_fa run --decode`, `--num-splits`, `--seqlens-file`: runs, printed figures and bad input."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from ptofa.cli.main import main


def _run(*args: str):
    return CliRunner().invoke(main, ["run", *args])


def test_decode_run_prints_split_against_unsplit() -> None:
    result = _run("--decode", "--cache-len", "700", "--page-size", "128", "--batch", "1", "--heads", "8",
                  "--kv-heads", "2", "--num-splits", "3", "--lse", "--causal", "--s0", "2")
    assert result.exit_code == 0, result.output
    assert "decode B=1 N=8 KVN=2 S0=2 cache_len=700 page_size=128" in result.output
    assert re.search(r"num_splits=3 +passed +predicted +[\d.]+ us \(main [\d.]+ \+ reduce [\d.]+ us\)", result.output)
    assert re.search(r"num_splits=1 +passed", result.output)
    assert re.search(r"split-KV num_splits=3: [\d.]+ us vs num_splits=1: [\d.]+ us -> [\d.]+x predicted speedup",
                     result.output)


def test_varlen_run_from_a_seqlens_file(tmp_path) -> None:
    path = tmp_path / "lens.txt"
    path.write_text("100, 300\n0 5\n")
    result = _run("--seqlens-file", str(path), "--heads", "2", "--head", "64", "--num-splits", "2")
    assert result.exit_code == 0, result.output
    assert "varlen seqlens=[100, 300, 0, 5]" in result.output and re.search(r"num_splits=2 +passed", result.output)


@pytest.mark.parametrize("args, message", [
    (["--decode", "--cache-len", "500", "--page-size", "100"], "--page-size: 100 must be a positive multiple of 128"),
    (["--decode"], "--decode: needs --cache-len >= 1"),
    (["--num-splits", "2"], "--num-splits: applies to --decode and varlen (--seqlens) runs"),
    (["--num-splits", "17", "--seqlens", "5"], "17 is not in the range 0<=x<=16"),
    (["--decode", "--cache-len", "500", "--seqlens", "5"], "--decode: the cache length is --cache-len, not --seqlens"),
    (["--decode", "--cache-len", "500", "--heads", "6", "--kv-heads", "4"], "heads=6 must be a multiple of kv_heads=4"),
])
def test_serving_run_bad_input(args, message) -> None:
    result = _run(*args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_seqlens_file_bad_input(tmp_path) -> None:
    path = tmp_path / "lens.txt"
    path.write_text("100, x7")
    result = _run("--seqlens-file", str(path))
    assert result.exit_code == 2 and "'x7' is not an integer" in result.output
    result = _run("--seqlens-file", str(path), "--seqlens", "4")
    assert result.exit_code == 2 and "give the lengths one way" in result.output


def test_sweep_num_splits_over_decode_shapes(tmp_path) -> None:
    import json

    result = CliRunner().invoke(main, ["sweep", "--decode", "--cache-len", "600", "--heads", "8", "--kv-heads", "2",
                                       "--num-splits", "1,3", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "serving.json").read_text())
    assert [row["num_splits"] for row in rows] == [1, 3] and all(row["status"] == "pass" for row in rows)
    assert rows[0]["gqa_pack"] is True and rows[1]["reduce_us"] > 0 and rows[0]["reduce_us"] == 0
    assert [row["split"] for row in rows] == ["unsplit", "2x3"]  # 1 sequence x 2 KV heads, packed
    assert (tmp_path / "serving.csv").read_text().startswith("shape,gqa_pack,num_splits_asked,num_splits,split,status")


def test_sweep_num_splits_needs_a_serving_shape(tmp_path) -> None:
    result = CliRunner().invoke(main, ["sweep", "--num-splits", "2", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "needs --decode (with --cache-len) or --seqlens" in result.output
