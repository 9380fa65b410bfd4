"""The kernel catalog: every kernel ptofa emits parses and verifies, names are unique, and
`run_fa catalog` writes and checks them (a real ptoas compiles each: tests/test_toolchain.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner

from ptofa.kernels import catalog
from ptofa.cli.main import main
from ptofa.pipeline import SUPPORTED_HEAD, FAConfig
from ptofa.ir.textio import PtoCheckError, check_text


def test_every_kernel_parses_and_verifies() -> None:
    failures = {}
    for k in catalog.kernels():
        try:
            check_text(k.emit(), f"{k.name}.pto")
        except PtoCheckError as exc:
            failures[k.name] = str(exc).splitlines()[0]
    assert failures == {}


def test_catalog_covers_every_switch_and_kernel_kind() -> None:
    kernels = catalog.kernels()
    names = [k.name for k in kernels]
    assert len(names) == len(set(names))
    configs = catalog.forward_configs()
    assert any(c.narrowing for c in configs)  # the window
    for flag in ("key_padding", "lse", "varlen", "split_kv", "gqa_pack", "q_pair"):
        assert any(getattr(c, flag) for c in configs), flag
    assert {c.head for c in configs} == set(SUPPORTED_HEAD)  # every kernel width, forward and backward
    assert {b.head for b in catalog.backward_configs()} == set(SUPPORTED_HEAD)
    for head in catalog.WIDTH_HEADS:  # the widths off the tuned grid: plain, masked LSE bf16, varlen
        assert FAConfig(head=head) in configs and FAConfig(head=head, varlen=True, lse=True) in configs
    assert any(c.page_size for c in configs) and any(c.in_dtype == "bf16" for c in configs)
    assert FAConfig() in configs
    assert sum(n.startswith("fa_reduce_") for n in names) == sum(c.split_kv for c in configs)
    assert sum(n.startswith("fa_bwd_") for n in names) == sum(len(catalog.backward_kernels(b))
                                                              for b in catalog.backward_configs())
    assert any(n.startswith("fa_bwd_dkdv") and n.endswith("_atomic_varlen") for n in names)
    assert any(b.atomic_dq for b in catalog.backward_configs()) and any(n.startswith("fa_bwd_post") for n in names)
    for kernel in ("dq", "dkdv"):  # the f32 gradient outputs ring attention's steps use, in both modes
        assert any(n.startswith(f"fa_bwd_{kernel}") and n.endswith("_grads_f32") for n in names)
    assert any(n.endswith("_atomic_grads_f32") for n in names)


def test_run_fa_catalog_writes_the_files(tmp_path, monkeypatch) -> None:
    few = catalog.kernels()[:2] + [k for k in catalog.kernels() if k.name.startswith("fa_bwd_dq")][:1]
    monkeypatch.setattr(catalog, "kernels", lambda: few)
    result = CliRunner().invoke(main, ["catalog", "--out", str(tmp_path), "--check"])
    assert result.exit_code == 0, result.output
    for k in few:
        assert (tmp_path / f"{k.name}.pto").read_text() == k.emit()
    assert len((tmp_path / "index.tsv").read_text().splitlines()) == 3


def test_run_fa_catalog_check_fails_on_a_broken_kernel(monkeypatch) -> None:
    good = catalog.kernels()[0]
    broken = catalog.Kernel("broken", "a kernel with an unknown op",
                            lambda: good.emit().replace("pto.tmatmul ", "pto.tmatmulx ", 1))
    monkeypatch.setattr(catalog, "kernels", lambda: [broken])
    result = CliRunner().invoke(main, ["catalog", "--check"])
    assert result.exit_code == 1
    assert "FAILED" in result.output


_EMIT_FLEX_BACKWARD = """
import hashlib
from ptofa.kernels import catalog
for k in catalog.kernels():
    if k.name.startswith("fa_bwd_dq_") and "_flex_" in k.name:
        print(k.name, hashlib.sha256(k.emit().encode()).hexdigest())
"""


def test_kernel_text_does_not_follow_the_string_hash() -> None:
    """The traced mods' tile allocation once freed tiles in set order, which follows PYTHONHASHSEED:
    the same catalog differed between two runs. Two seeds must give the same text."""
    runs = [subprocess.run([sys.executable, "-c", _EMIT_FLEX_BACKWARD], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert runs[0].count("\n") >= 2, runs[0]
    assert runs[0] == runs[1]
