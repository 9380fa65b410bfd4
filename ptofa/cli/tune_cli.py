"""`run_fa tune`: the timing model's ranking of the legal configs of a shape (`ptofa.launch.tune`)."""

from __future__ import annotations

import sys

import click
from rich import box
from rich.console import Console
from rich.table import Table

from ptofa.cli.switches import DTYPES, InputError
from ptofa.launch.tune import TuneResult, TuneShape, tune
from ptofa.pipeline import ConfigError
from ptofa.sim.socspec import DEFAULT_SOC, get_soc


def print_ranking(result: TuneResult, console: Console) -> None:
    """The ranking as a table, then the chosen config."""
    b = result.shape
    table = Table(title=f"ptofa tune: B={b.batch} N={b.heads}/{b.kv_heads} S0={b.s0} S1={b.s1} D={b.head} "
                        f"{b.in_dtype} window={b.window} ({b.soc})", box=box.SIMPLE_HEAD, padding=(0, 1))
    for col in ("rank", "tile_s1", "qk_preload", "prescale_q", "q_pair", "predicted us", "TFLOP/s", "bound"):
        table.add_column(col, justify="right")
    for i, row in enumerate(result.table, 1):
        knobs = (str(i), str(row.tile_s1), str(row.qk_preload), "on" if row.prescale_q else "off",
                 "on" if row.q_pair else "off")
        if row.predicted_us is None:
            table.add_row(*knobs, "-", "-", row.error or "-")
        else:
            table.add_row(*knobs, f"{row.predicted_us:.2f}", f"{row.tflops:.1f}", row.bound or "-")
    console.print(table)
    console.print(f"note: {result.note}", markup=False)
    console.print(f"chosen: {result.config.summary()}", markup=False)


@click.command("tune")
@click.option("--s0", type=int, required=True, help="Query length S0.")
@click.option("--s1", type=int, required=True, help="Key/value length S1.")
@click.option("--heads", type=int, required=True, help="Query heads N.")
@click.option("--kv-heads", type=int, default=None, help="Key/value heads (divides N) [default: --heads].")
@click.option("--head-dim", type=int, required=True, help="Head dimension D.")
@click.option("--batch", type=int, default=1, show_default=True, help="Batch B.")
@click.option("--causal", is_flag=True, help="Bottom-right causal mask (the masked kernel).")
@click.option("--dtype", type=click.Choice(["fp16", "bf16"]), default="fp16", show_default=True, help="Q/K/V dtype.")
@click.option("--soc", default=DEFAULT_SOC, show_default=True, help="Chip of the timing model (910B1..910B4).")
def tune_cmd(s0: int, s1: int, heads: int, kv_heads: int | None, head_dim: int, batch: int, causal: bool,
             dtype: str, soc: str) -> None:
    """Rank the legal configs of a shape by the timing model's predicted time; print the chosen one."""
    in_dtype = DTYPES[dtype]
    window = (-1, 0) if causal else (-1, -1)
    shape = TuneShape(batch, heads, kv_heads or heads, s0, s1, head_dim, in_dtype, window=window, soc=soc)
    try:
        shape.problem().check(shape.base_config())
        get_soc(soc)
        result = tune(shape)
    except (ConfigError, ValueError, KeyError) as exc:
        raise InputError(f"invalid shape: {exc}") from None
    print_ranking(result, Console() if sys.stdout.isatty() else Console(width=120))


__all__ = ["print_ranking", "tune_cmd"]
