"""Test kernels mark lines with `// @name`; messages must point at them as 'file.py:LINE'."""
from pathlib import Path


def line_of(test_file: str, marker: str) -> int:
    for i, line in enumerate(Path(test_file).read_text().splitlines(), 1):
        if f"// @{marker}" in line:
            return i
    raise AssertionError(marker)


def at(test_file: str, marker: str) -> str:
    return f"{Path(test_file).name}:{line_of(test_file, marker)}"
