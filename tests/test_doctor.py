"""`grader doctor` names a CuPy that does not fit the driver, and the command that fixes it."""
import sys
import types

import pytest

from grader import doctor as D
from grader.cli import main

INSUFFICIENT = ("CUDARuntimeError: cudaErrorInsufficientDriver: CUDA driver version is insufficient for "
                "CUDA runtime version")


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


def test_cupy_for_a_newer_cuda_than_the_driver():
    f = only(D.diagnose_cuda({"cupy-cuda13x": "14.0.0"}, (12, 4), 13, INSUFFICIENT))
    assert f.fatal
    assert ("driver supports CUDA 12.4 but CuPy is built for CUDA 13: "
            "pip uninstall -y cupy-cuda13x && pip install -e '.[cuda12]'") in f.text
    assert "upgrade the NVIDIA driver" in f.text


def test_cupy_cuda_read_from_the_distribution_when_cupy_cannot_say():
    f = only(D.diagnose_cuda({"cupy-cuda13x": "14.0.0"}, (12, 2), None, INSUFFICIENT))
    assert f.fatal and "built for CUDA 13" in f.text and "'.[cuda12]'" in f.text


def test_insufficient_driver_named_from_the_error_alone():
    f = only(D.diagnose_cuda({"cupy": "13.3.0"}, None, None, INSUFFICIENT))   # a source build, no nvidia-smi
    assert f.fatal and "too old" in f.text and "pip uninstall -y cupy" in f.text


def test_driver_older_than_any_course_cupy():
    f = only(D.diagnose_cuda({"cupy-cuda12x": "13.3.0"}, (11, 8), 12, INSUFFICIENT))
    assert f.fatal and "upgrade the NVIDIA driver" in f.text and ".[nvrtc]" in f.text


def test_several_cupy_distributions():
    dists = {"cupy-cuda12x": "13.3.0", "cupy-cuda13x": "14.0.0"}
    f = only(D.diagnose_cuda(dists, (12, 4), 13, INSUFFICIENT))
    assert f.fatal and "cupy-cuda12x 13.3.0, cupy-cuda13x 14.0.0" in f.text
    assert "pip uninstall -y cupy-cuda12x cupy-cuda13x && pip install -e '.[cuda12]'" in f.text
    f = only(D.diagnose_cuda(dists, (13, 0), 13, None))          # works for now: a warning, not fatal
    assert not f.fatal and "'.[cuda13]'" in f.text


def test_a_gpu_without_cupy():
    f = only(D.diagnose_cuda({}, (12, 4), None, None))
    assert not f.fatal and "pip install -e '.[cuda12]'" in f.text
    assert "'.[cuda13]'" in only(D.diagnose_cuda({}, (13, 1), None, None)).text
    assert "older than" in only(D.diagnose_cuda({}, (11, 4), None, None)).text


@pytest.mark.parametrize("dists, driver, cupy_cuda", [
    ({}, None, None),                                   # a laptop: no GPU, no CuPy
    ({"cupy-cuda12x": "13.3.0"}, (12, 4), 12),           # fits
    ({"cupy-cuda12x": "13.3.0"}, (13, 0), 12),           # an older CUDA than the driver's is fine
])
def test_nothing_to_say(dists, driver, cupy_cuda):
    assert D.diagnose_cuda(dists, driver, cupy_cuda, None) == []


def test_cupy_major_from_the_name():
    assert [D.cupy_major(n) for n in ("cupy-cuda12x", "cupy-cuda13x", "cupy-cuda113", "cupy", "cupy-rocm-5-0")] \
        == [12, 13, 11, None, None]


def fake_cupy(runtime: int, driver: int, error: str | None):
    def count():
        if error:
            raise RuntimeError(error)
        return 1
    rt = types.SimpleNamespace(runtimeGetVersion=lambda: runtime, driverGetVersion=lambda: driver,
                               getDeviceCount=count)
    return types.SimpleNamespace(__version__="14.0.0", cuda=types.SimpleNamespace(runtime=rt))


def test_doctor_exits_2_on_a_cupy_the_driver_cannot_run(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(13000, 12040, "cudaErrorInsufficientDriver: "
                                                       "CUDA driver version is insufficient for CUDA runtime version"))
    monkeypatch.setattr(D, "cupy_distributions", lambda: {"cupy-cuda13x": "14.0.0"})
    monkeypatch.setattr(D, "nvidia_smi_cuda", lambda: (12, 4))
    monkeypatch.delenv("GRADER_BACKEND", raising=False)
    assert main(["doctor"]) == 2
    out = capsys.readouterr().out
    assert "CPU runtime" in out
    assert ("driver supports CUDA 12.4 but CuPy is built for CUDA 13: pip uninstall -y cupy-cuda13x && "
            "pip install -e '.[cuda12]'") in out


def test_doctor_on_a_gpu_without_cupy(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupy", None)                # not installed
    monkeypatch.setattr(D, "cupy_distributions", lambda: {})
    monkeypatch.setattr(D, "nvidia_smi_cuda", lambda: (13, 0))
    monkeypatch.delenv("GRADER_BACKEND", raising=False)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "driver supports CUDA 13.0" in out and "pip install -e '.[cuda13]'" in out
    assert "Have an NVIDIA GPU?" not in out


@pytest.mark.parametrize("env, modules, place", [
    ({"COLAB_RELEASE_TAG": "release-colab_20261101"}, {}, "Google Colab"),
    ({}, {"google.colab": object()}, "Google Colab"),
    ({"BINDER_LAUNCH_HOST": "https://mybinder.org/", "JUPYTERHUB_USER": "x"}, {}, "Binder"),
    ({"JUPYTERHUB_API_URL": "http://hub:8081/hub/api", "JUPYTERHUB_USER": "ada"}, {}, "a JupyterHub (user ada)"),
    ({"GITHUB_ACTIONS": "true"}, {}, "GitHub Actions"),
    ({"HOME": "/home/ada"}, {}, "locally"),
])
def test_where_it_runs(env, modules, place):
    found, about = D.where(env, modules)
    assert found.startswith(place), found
    assert ("emulator" in about) == (place != "locally")


def test_doctor_says_where_it_runs_first(monkeypatch, capsys):
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub:8081/hub/api")
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    for k in ("COLAB_RELEASE_TAG", "COLAB_GPU", "BINDER_LAUNCH_HOST", "BINDER_REQUEST", "BINDER_REPO_URL",
              "BINDER_REF_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(D, "cupy_distributions", lambda: {})
    monkeypatch.setattr(D, "nvidia_smi_cuda", lambda: None)
    main(["doctor"])
    assert capsys.readouterr().out.splitlines()[0].startswith("Where       a JupyterHub (user ada)")
