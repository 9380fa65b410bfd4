"""Skip tests marked `ptoas`, `bisheng` or `npu` when the tool or device is missing."""

from __future__ import annotations

from functools import lru_cache

import pytest


@lru_cache(maxsize=None)
def missing_requirement(marker: str) -> str:
    """Why a test with `marker` cannot run here ("" when it can)."""
    from ptofa import toolchain

    if marker == "ptoas":
        return toolchain.find_ptoas()[1]
    if marker == "bisheng":
        reasons = [toolchain.find_ptoas()[1], toolchain.find_bisheng()[1], toolchain.find_pto_lib_path()[1]]
        return "; ".join(reason for reason in reasons if reason)
    if marker == "npu":
        from ptofa.npu import npu_available

        available, reason = npu_available()
        return "" if available else reason
    raise ValueError(f"no requirement known for marker {marker!r}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("ptoas", "bisheng", "npu"):
            if item.get_closest_marker(marker) is not None:
                reason = missing_requirement(marker)
                if reason:
                    item.add_marker(pytest.mark.skip(reason=reason))
