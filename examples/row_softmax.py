"""A kernel of your own: softmax over the rows of a [rows, 256] fp32 tensor, vector cores only.

The kernel is `ptofa/kernels/lib/softmax.py`, which `docs/writing-a-kernel.md` builds step by
step; this script writes it. Run it:

    python examples/row_softmax.py -o row_softmax.pto        # build and write the .pto
    run_fa check row_softmax.pto
    run_fa run row_softmax.pto --arg x=f32:1000x256 --arg y=f32:1000x256 --arg rows=1000 --block-dim 8
"""

from __future__ import annotations

import sys
from pathlib import Path

from ptofa.kernels.lib.softmax import build_row_softmax, emit_row_softmax

__all__ = ["build_row_softmax", "emit_row_softmax"]

if __name__ == "__main__":
    out = Path(sys.argv[sys.argv.index("-o") + 1]) if "-o" in sys.argv else None
    text = emit_row_softmax()
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
