"""Skip tests marked `ptoas`, `bisheng` or `npu` when the tool or device is missing; keep
ptofa's cache (kernels, tuned configs, builds) in a temporary folder for the session."""

from __future__ import annotations

from functools import lru_cache

import pytest


@pytest.fixture(autouse=True, scope="session")
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """`PTOFA_CACHE_DIR` of the session (inherited by subprocesses): tests never touch the user's cache."""
    import os

    from ptofa.launch.kernel_cache import CACHE_ENV

    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("ptofa-cache"))
    yield
    if saved is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = saved


@lru_cache(maxsize=None)
def missing_requirement(marker: str) -> str:
    """Why a test with `marker` cannot run here ("" when it can)."""
    from ptofa.launch import toolchain

    if marker == "ptoas":
        return toolchain.find_ptoas()[1]
    if marker == "bisheng":
        reasons = [toolchain.find_ptoas()[1], toolchain.find_bisheng()[1], toolchain.find_pto_lib_path()[1]]
        return "; ".join(reason for reason in reasons if reason)
    if marker == "npu":
        from ptofa.launch.npu import npu_available

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
