import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("GRADER_ROOT", str(ROOT))


def gpu_available() -> bool:
    try:
        from grader.runtimes.gpu import gpu_available as f
        return f()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy; none is visible here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def rt():
    """The CPU emulator's runtime, one per test module (a module may define its own rt instead)."""
    from grader.runtimes.cpu import CpuRuntime
    return CpuRuntime()
