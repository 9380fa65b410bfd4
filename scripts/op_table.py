"""Rewrite the `tile.*` op table of docs/writing-a-kernel.md (section 13) from `ptofa.api`.

    python scripts/op_table.py          # rewrite it in place
    python scripts/op_table.py --check  # exit 1 when it is not current (what tests/test_docs.py asserts)
"""

from __future__ import annotations

import sys
from pathlib import Path

from ptofa.optable import op_table_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing-a-kernel.md"
START, END = "<!-- op-table -->\n", "<!-- /op-table -->"


def with_current_table(text: str) -> str:
    """`text` with the part between the op-table markers replaced by the generated table."""
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + START + op_table_markdown() + END + tail


if __name__ == "__main__":
    text = DOC.read_text()
    current = with_current_table(text)
    if "--check" in sys.argv:
        sys.exit(0 if current == text else 1)
    DOC.write_text(current)
