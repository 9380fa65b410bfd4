"""benchmarks/validate_model.py holds the timing model against published measurements: it must
express the published kernels in their own forms and compare each figure as its source timed it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ptofa.sim.socspec import get_soc

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "validate_model.py"


@pytest.fixture(scope="module")
def vm():
    spec = importlib.util.spec_from_file_location("validate_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def test_published_kernels_keep_their_own_forms(vm) -> None:
    # A new automatic FAConfig field must not change the validated forms behind the table's back.
    for m in vm.measurements():
        c = m.config
        assert (c.qk_dtype, c.out_dtype, c.prescale_q, c.cube_rowsum, c.exp_f16, c.softmax_dtype) == \
            ("f32", "f32", False, False, False, "f32"), m
        assert m.timing in vm.TIMINGS, m


def test_a_host_synchronised_figure_includes_the_hosts_enqueue(vm) -> None:
    warm, bound = vm.predict_us(vm.MANUAL, 128, 1024, "waves", "warm")
    synced, synced_bound = vm.predict_us(vm.MANUAL, 128, 1024, "waves", "host-sync")
    spec = get_soc(vm.SOC)
    assert synced == pytest.approx(warm + spec.host_launch_us) and synced_bound == bound
    assert warm > spec.first_wave_start_us  # a launch never beats its dispatch


def test_tally_counts_rows_within_the_band(vm) -> None:
    m = vm.measurements()[0]
    rows = [vm.Row(m, m.s1, p, "x", 10.0) for p in (10.0, 12.4, 8.1, 13.0)]
    assert vm.tally(rows).startswith("3 of 4 within ±25%")
