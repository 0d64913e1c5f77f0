import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("GRADER_ROOT", str(ROOT))
# The first divergence compiles two traced kernels per unexplained failure: the checks of the whole
# suite would spend most of CI's time there. tests/test_diverge.py turns it back on for its own.
os.environ.setdefault("GRADER_TRACE", "0")
os.environ.setdefault("GRADER_WORK", "0")    # the work check (engine/work.py): its own tests turn it on


def gpu_available() -> bool:
    try:
        from grader.runtimes.gpu import gpu_available as f
        return f()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:                    # one xdist worker builds the site, once, for all its readers
        if "built_site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("site"))
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


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The course site, built once per test session by scripts/build_site.py, which executes every
    notebook exactly once (tests read the outputs from here instead of running the notebooks again).
    Returns a build_site.SiteBuild: `.executed(id)`, `.error(id)`, `.text(id)`, `.images(id)`, `.html`.
    Without Sphinx (and outside CI) only the notebooks are executed and `.html` is None.
    FLASH_COURSE_SITE=DIR reuses a site already built into DIR by `python scripts/build_site.py DIR`."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import build_site
    if os.environ.get("FLASH_COURSE_SITE"):
        return build_site.SiteBuild.load(Path(os.environ["FLASH_COURSE_SITE"]))
    if build_site.missing(build_site.EXEC_PACKAGES):
        return None                       # no Jupyter here: test_notebooks runs them another way
    html = os.environ.get("FLASH_COURSE_SITE_TEST") or not build_site.missing(build_site.HTML_PACKAGES)
    out = tmp_path_factory.mktemp("built_site") / "site"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_site.py"), str(out),
                        *([] if html else ["--no-html"])], capture_output=True, text=True, timeout=3600)
    try:                                  # exit 1: a notebook raised; 2: Sphinx failed: the tests say
        return build_site.SiteBuild.load(out)
    except FileNotFoundError:             # no report: nothing was built
        pytest.fail(f"scripts/build_site.py failed (exit status {p.returncode}):\n"
                    f"{p.stdout[-3000:]}\n{p.stderr[-5000:]}", pytrace=False)
