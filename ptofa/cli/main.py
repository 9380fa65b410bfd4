"""`run_fa`: build, check, compile, run, sweep and bench the FlashAttention kernel.

This module is the command group with `build` and `check`; every other command lives in its own
module (`run`: `ptofa.cli.run`, `sweep`: `ptofa.cli.sweep`, ...) and is imported when it is used
(`LAZY_COMMANDS`), so the group sits below the commands.

Exit codes: 0 success; 1 the kernel failed (wrong numbers, deadlock, a `.pto`
that does not verify); 2 bad input or a backend/tool that is not available here.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from ptofa.pipeline import budget
from ptofa.cli.switches import (  # noqa: F401 (DTYPES, window_of, InputError, print_results: re-exported)
    DTYPES,
    InputError,
    config_options,
    console,
    make_config,
    print_results,
    score_mod_options,
    window_of,
    with_score_mods,
)


class LazyGroup(click.Group):
    """A click group that imports a command's module when the command is first looked up, so that
    `run_fa --help` or `run_fa build` loads neither torch's heavier paths nor the simulator, and
    this module sits below the commands it offers (click's documented pattern for lazily loaded
    subcommands). `lazy`: command name -> "module:attribute"."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, attribute = self.lazy[cmd_name].split(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)


# The commands defined in other modules (each imported when used).
LAZY_COMMANDS = {
    "bench": "ptofa.cli.bench:bench_cmd",
    "run": "ptofa.cli.run:run",
    "cache": "ptofa.launch.kernel_cache:cache_cmd",
    "catalog": "ptofa.kernels.catalog:catalog_cmd",
    "compile": "ptofa.launch.toolchain:compile_cmd",
    "sweep": "ptofa.cli.sweep:sweep_cmd",
    "tune": "ptofa.cli.tune_cli:tune_cmd",
}


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ptofa")
def main() -> None:
    """Write, build, check and run a FlashAttention forward kernel for Ascend A2/A3 (PTO IR)."""


@main.command()
@config_options
@score_mod_options
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Where to write the .pto file [default: fa.pto]; with --backward, a folder [default: .].")
@click.option("--backward", is_flag=True, help="Write the backward kernels (fa_bwd_dq.pto, fa_bwd_dkdv.pto) instead.")
@click.option("--atomic", is_flag=True, help="With --backward: the atomic-add dQ mode (fa_bwd_prep, _dkdv, _post).")
def build(head: int, tile_s1: int, qk_preload: int, dtype: str, out_dtype: str | None, causal: bool,
          window: tuple[int, int] | None, key_padding: bool, lse: bool, prescale_q: bool,
          softmax_dtypes: tuple[str, ...], softcap: float, alibi: bool, output: Path | None, backward: bool,
          atomic: bool) -> None:
    """Emit the kernel as PTO IR, and print the config and its memory budget."""
    from ptofa.fa_builder import emit_fa

    config = make_config(head, tile_s1, qk_preload, dtype, out_dtype, causal, window, key_padding, lse, prescale_q,
                         softmax_dtypes)
    config = with_score_mods(config, softcap, alibi)
    if backward:
        from ptofa.cli.bwd_cli import build_backward

        build_backward(config, output or Path("."), lambda line: console.print(line, markup=False), atomic)
        return
    output = output or Path("fa.pto")
    text = emit_fa(config)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(output.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(output)
    console.print(f"config: {config.summary()}")
    console.print(budget(config).table(), markup=False)
    console.print(f"wrote {output} ({len(text.splitlines())} lines)")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--ptoas-only", is_flag=True,
              help="Check what `ptoas --pto-arch=a3` accepts: skip ptofa's own rules (set_ffts before cube-vector pipes, "
                   "no tile arguments on an entry, and the C++-build rules ptoas does not check, such as an acc->vec tmov).")
@click.option("--pto-backend", "pto_backend", type=click.Choice(["emitc", "vpto"]), default=None,
              help="ptoas's back end, as its --pto-backend: emitc (ptoas's default, what `run_fa compile` uses) refuses the "
                   "ops it cannot lower; vpto leaves that rule out. Default: the module's pto.backend attribute, else emitc.")
@click.option("--pto-level", "pto_level", type=click.Choice(["level1", "level2", "level3"]), default="level2",
              show_default=True, help="ptoas's --pto-level: at level3 every allocation carries its 'addr' (no planner), "
                                      "below it none may.")
def check(paths: tuple[Path, ...], ptoas_only: bool, pto_backend: str | None, pto_level: str) -> None:
    """Parse and verify .pto files (a folder: every *.pto under it); report every error with its
    line number, and one summary line when there are several files.

    \b
    Without options: what ptoas compiles for A3 with its default back end, and ptofa builds
    and launches. --ptoas-only: what ptoas compiles (its parser, verifiers and lowering).
    --pto-backend vpto: no EmitC lowering rule, so with --ptoas-only what ptoas's parser and
    verifiers accept. An op that verifies but does not lower says so ("... lowering: ptoas
    parses and verifies it, but its default (EmitC) back end cannot lower it"). A file without a
    function is not a kernel and fails; without --ptoas-only, so does one without an entry function.
    """
    from xdsl.dialects import func

    from ptofa.ir.textio import ENTRY_ATTRS, PtoCheckError, check_text, is_entry, read_pto

    files = [f for p in paths for f in (sorted(p.rglob("*.pto")) if p.is_dir() else [p])]
    if not files:
        click.echo(f"error: no .pto file under {', '.join(map(str, paths))}", err=True)
        sys.exit(2)
    failed = 0
    for pto_file in files:
        try:
            parsed = check_text(read_pto(pto_file), str(pto_file), launch_rules=not ptoas_only, backend=pto_backend,
                                level=pto_level)
            functions = [f for f in parsed.module.walk() if isinstance(f, func.FuncOp)]
            if not functions:  # ptoas compiles an empty module to nothing
                raise PtoCheckError([(1, "not a kernel: no function")], str(pto_file))
            if not ptoas_only and not any(is_entry(f) for f in functions):  # ptofa launches an entry
                raise PtoCheckError([(1, f"not a kernel: no function carries an entry attribute ({', '.join(ENTRY_ATTRS)})")],
                                    str(pto_file))
        except PtoCheckError as exc:
            click.echo(str(exc), err=True)
            failed += 1
            continue
        console.print(f"{pto_file}: ok")
    if len(files) > 1:
        console.print(f"checked {len(files)} files: {len(files) - failed} ok, {failed} failed")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
