"""`run_fa build` / `check` / `run` with the kernel's switches, and their bad values.

Each switch changes the kernel's entry signature (the launcher is rendered from it):
--lse adds an LSE pointer, --key-padding-mask a key-mask pointer and its batch stride,
--causal / --window the two window bounds, --dtype / --out-dtype the element types of
the Q/K/V/O pointers (and of the input-dtype view of the slot workspace); kv_heads is a
runtime argument of every kernel. A bad value is one line naming the rule, exit code 2.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ptofa.cli.main import main
from ptofa.reference import make_key_mask

# The plain kernel's entry arguments (every variant has them, in this order).
BASE = {
    "ffts": "!pto.ptr<i64>", "slots": "!pto.ptr<f32>", "slots_h": "!pto.ptr<f16>",
    "q": "!pto.ptr<f16>", "k": "!pto.ptr<f16>", "v": "!pto.ptr<f16>", "o": "!pto.ptr<f16>",
    "batch": "i64", "heads": "i64", "kv_heads": "i64", "s0": "i64", "s1": "i64", "scale": "f32",
}
LSE = {"lse": "!pto.ptr<f32>"}
KEY_MASK = {"key_mask": "!pto.ptr<i8>", "key_mask_stride": "i64"}
WINDOW = {"win_left": "i64", "win_right": "i64"}


def bf16(*names: str) -> dict[str, str]:
    return {name: "!pto.ptr<bf16>" for name in names}


BUILDS = {
    "plain": ([], {}),
    "lse": (["--lse"], LSE),
    "key_padding": (["--key-padding-mask"], KEY_MASK),
    "causal": (["--causal"], WINDOW),
    "window": (["--window", "8,4"], WINDOW),
    "window_left_only": (["--window", "16,-1"], WINDOW),
    "bf16": (["--dtype", "bf16"], bf16("slots_h", "q", "k", "v", "o")),
    "bf16_f32": (["--dtype", "bf16", "--out-dtype", "fp32"], {**bf16("slots_h", "q", "k", "v"), "o": "!pto.ptr<f32>"}),
    "f16_bf16": (["--out-dtype", "bf16"], bf16("o")),
    "everything": (["--causal", "--key-padding-mask", "--lse", "--dtype", "bf16", "--head", "64", "--tile-s1", "128",
                    "--qk-preload", "2"], {**LSE, **KEY_MASK, **WINDOW, **bf16("slots_h", "q", "k", "v", "o")}),
}


def entry_signature(text: str) -> dict[str, str]:
    """name -> type of the `fa_fwd` entry's arguments, in order."""
    header = re.search(r"func\.func @fa_fwd\((.*?)\)( attributes|\s*\{)", text)
    assert header, "no fa_fwd entry in the .pto"
    return {name: ty.strip() for name, ty in re.findall(r"%(\w+)\s*:\s*([^,]+(?:<[^>]*>)?)", header.group(1))}


@pytest.mark.parametrize("args, extra", BUILDS.values(), ids=BUILDS.keys())
def test_build_writes_a_checked_kernel_with_the_switch_arguments(tmp_path: Path, args: list[str], extra: dict) -> None:
    out = tmp_path / "fa.pto"
    runner = CliRunner()
    built = runner.invoke(main, ["build", *args, "-o", str(out)])
    assert built.exit_code == 0, built.output
    assert f"wrote {out}" in built.output.replace("\n", "")
    checked = runner.invoke(main, ["check", str(out)])
    assert checked.exit_code == 0, checked.output
    assert checked.output.strip().endswith(": ok")
    signature = entry_signature(out.read_text())
    assert signature == {**BASE, **extra}, signature  # the same arguments ...
    assert list(signature)[:7] == ["ffts", "slots", "slots_h", "q", "k", "v", "o"]  # ... pointers first


def test_all_switches_give_the_documented_argument_order(tmp_path: Path) -> None:
    out = tmp_path / "fa.pto"
    assert CliRunner().invoke(main, ["build", "--causal", "--key-padding-mask", "--lse", "-o", str(out)]).exit_code == 0
    assert list(entry_signature(out.read_text())) == [
        "ffts", "slots", "slots_h", "q", "k", "v", "o", "lse", "key_mask",
        "batch", "heads", "kv_heads", "s0", "s1", "scale", "win_left", "win_right", "key_mask_stride",
    ]


def test_build_prints_the_variant(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["build", "--window", "8,4", "--key-padding-mask", "--lse", "--dtype", "bf16",
                                       "--out-dtype", "fp32", "-o", str(tmp_path / "fa.pto")])
    assert result.exit_code == 0, result.output
    assert "in=bf16 out=f32 masked key_padding lse" in " ".join(result.output.split())  # (wrapped at 120 columns)


SMALL = ["run", "--backend", "sim", "--batch", "1", "--heads", "2", "--s0", "70", "--s1", "200", "--tile-s1", "128",
         "--qk-preload", "2"]
RUNS = {
    "causal": ["--causal"],
    "window": ["--window", "8,4"],
    "kv_heads": ["--kv-heads", "1"],
    "lse": ["--lse"],
    "bf16_f32": ["--dtype", "bf16", "--out-dtype", "fp32"],
    "causal_gqa_lse": ["--causal", "--heads", "4", "--kv-heads", "2", "--lse"],
}


@pytest.mark.parametrize("args", RUNS.values(), ids=RUNS.keys())
def test_run_on_the_simulator_passes(args: list[str]) -> None:
    result = CliRunner().invoke(main, [*SMALL, *args])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.lstrip().startswith("sim "))
    assert " pass " in row and "70x200" in row


def test_run_with_key_padding_prints_the_valid_lengths() -> None:
    result = CliRunner().invoke(main, [*SMALL, "--batch", "3", "--key-padding-mask", "--lse", "--seed", "4"])
    assert result.exit_code == 0, result.output
    _, lengths = make_key_mask(3, 200, 4)
    assert f"key-padding mask: valid keys per batch {lengths} of 200" in result.output.splitlines()
    assert re.search(r"key-padding mask: valid keys per batch \[\d+, \d+, \d+\] of 200", result.output)
    assert " pass " in result.output


# (arguments, the one line) for `run`; the window, causal and head cases also for `build`.
BAD = {
    "kv_heads_not_dividing": (["--heads", "3", "--kv-heads", "2"],
                              "Error: invalid shape: grouped heads: heads=3 must be a multiple of kv_heads=2"),
    "kv_heads_zero": (["--kv-heads", "0"], "Error: invalid shape: problem shape: kv_heads=0 must be >= 1"),
    "window_below_minus_one": (["--window", "-2,0"],
                               "Error: window: --window -2,0: LEFT and RIGHT must each be >= -1 (-1 = unbounded)"),
    "window_right_below_minus_one": (["--window", "5,-3"],
                                     "Error: window: --window 5,-3: LEFT and RIGHT must each be >= -1 (-1 = unbounded)"),
    "window_not_integers": (["--window", "abc"],
                            "Error: window: --window 'abc' must be LEFT,RIGHT (two integers, -1 = unbounded)"),
    "window_three_values": (["--window", "1,2,3"],
                            "Error: window: --window '1,2,3' must be LEFT,RIGHT (two integers, -1 = unbounded)"),
    "causal_and_window": (["--causal", "--window", "3,4"],
                          "Error: window: --causal is --window -1,0, which contradicts --window 3,4"),
    "head_512": (["--head", "512"], "Error: invalid config: head dim: head_dim=512 must be an int in 1..256"),
    "head_v_0": (["--head-dim-v", "0"], "Error: invalid config: head dim: head_dim_v=0 must be an int in 1..256"),
}
BUILD_TOO = {"window_below_minus_one", "window_right_below_minus_one", "window_not_integers", "window_three_values",
             "causal_and_window", "head_72", "head_512"}
# build emits a kernel, whose head dim must be a kernel width (run pads any other up to one)
BUILD_LINES = {name: (["--head", str(d)], f"Error: invalid config: head dim: head={d} is not a kernel width: a multiple of 16 up to 128 (one D chunk) or of 32 up to 256 (two D chunks of whole cube fractals), (16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256); other head dims run on kernel_head(D) with zero-padded columns")
               for name, d in (("head_72", 72), ("head_512", 512))}


@pytest.mark.parametrize("args, line", BAD.values(), ids=BAD.keys())
def test_run_bad_value_is_one_line_and_exit_2(tmp_path: Path, args: list[str], line: str) -> None:
    result = CliRunner().invoke(main, [*SMALL, *args, "--keep", str(tmp_path / "keep")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [line]
    assert not (tmp_path / "keep").exists()


@pytest.mark.parametrize("name", sorted(BUILD_TOO))
def test_build_bad_value_is_one_line_and_exit_2(tmp_path: Path, name: str) -> None:
    args, line = BUILD_LINES.get(name) or BAD[name]
    out = tmp_path / "fa.pto"
    result = CliRunner().invoke(main, ["build", *args, "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [line]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["build", "run"])
@pytest.mark.parametrize("option, value, choices", [
    ("--dtype", "fp32", "'fp16', 'bf16'"),
    ("--dtype", "int8", "'fp16', 'bf16'"),
    ("--out-dtype", "int8", "'fp16', 'bf16', 'fp32'"),
])
def test_bad_dtype_is_clicks_choice_error(tmp_path: Path, command: str, option: str, value: str, choices: str) -> None:
    result = CliRunner().invoke(main, [command, option, value] + (["-o", str(tmp_path / "fa.pto")] if command == "build" else []))
    assert result.exit_code == 2
    assert f"Error: Invalid value for '{option}': '{value}' is not one of {choices}." in result.output
    assert list(tmp_path.iterdir()) == []
