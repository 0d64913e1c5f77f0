"""What the notebooks show on a CPU is true: the numbers they print, read from the notebooks the site
build executed once (the `built_site` fixture), agree with the lessons and with each other.

On a CPU a notebook never shows the emulator's times as if they were a GPU's: it shows the H100
figures recorded for the lessons (grader/data/h100_bench.json) and says where they come from.
"""
import re

import pytest

from grader import catalogue, measured

pytestmark = pytest.mark.slow
TIMED = ("00", "02", "03", "04", "05", "07", "08", "09")      # the notebooks with a timing section


@pytest.fixture(scope="module")
def site(built_site):
    if built_site is None:
        pytest.skip("Jupyter (nbclient) is not installed here: the notebooks cannot be executed")
    return built_site


def _rows(text, pattern):
    return [tuple(float(x) for x in m) for m in re.findall(pattern, text)]


def test_02_memory_counts_the_same_arrays_on_both_sides(site):
    rows = _rows(site.text("02"), r"N=\s*(\d+)\s+naive\s+([\d.]+) MiB\s+flash\s+([\d.]+) MiB")
    assert [n for n, _, _ in rows] == [256, 512, 1024, 2048, 4096, 8192]
    B, H, d = 2, 16, 128
    for n, naive, flash in rows:
        io = 4 * B * H * n * d * 4
        assert naive == pytest.approx((io + 2 * B * H * n * n * 4) / 2**20, abs=0.06)
        assert flash == pytest.approx((io + B * H * n * 4) / 2**20, abs=0.06)
        assert flash < naive
    ratios = [naive / flash for n, naive, flash in rows if n >= 1024]
    assert ratios == sorted(ratios) and ratios[0] > 4          # the gap grows with N


@pytest.mark.parametrize("ex_id", TIMED)
def test_timings_on_a_cpu_are_the_recorded_gpu_figures(site, ex_id):
    text = site.text(ex_id)
    assert measured.label() in text, f"{ex_id}: no 'measured on an H100 on DATE' line"
    for c in measured.cases(ex_id):
        ms = c["results"]["yours"]["median_ms"]
        assert f"{ms:9.3f} ms" in text, f"{ex_id}: the recorded time of {c['case']} ({ms:.3f} ms) is not shown"
    # Nothing timed on the emulator is reported as a rate or a speed-up.
    assert not re.search(r"\b0\.0\d TFLOP/s", text), f"{ex_id} prints an emulator time as TFLOP/s"
    assert "on cpu" not in text.lower()


def test_03_speed_up_is_the_recorded_one(site):
    text = site.text("03")
    ups = dict(re.findall(r"(\S+): speed-up of causal over no mask ([\d.]+)x", text))
    big = measured.case("03", "causal_B2_H16_N4096_d128")["results"]
    assert float(ups["causal_B2_H16_N4096_d128"]) == pytest.approx(
        big["02 solution (no mask)"]["median_ms"] / big["yours"]["median_ms"], abs=0.01)
    assert float(ups["causal_B2_H16_N4096_d128"]) > 1.5       # skipping half the tiles pays at N = 4096


def test_roofline_notebook_shows_every_module_at_its_recorded_share(site):
    text = site.text("roofline")
    shown = {k: float(v) for k, v in re.findall(r"^(\d\d)\s+([\d.]+)% of roofline", text, re.M)}
    elsewhere = measured.measured().get("devices", {})      # measured on another GPU: its own peaks
    assert set(shown) == {ex.id[:2] for ex in catalogue.EXERCISES
                          if ex.id not in measured.MULTI_GPU and ex.id not in elsewhere}
    for k, pct in shown.items():
        best = max(c["results"]["yours"]["roofline_pct"] for c in measured.cases(k))
        assert pct == pytest.approx(best, abs=0.05), k
    assert len(site.images("roofline")) == 2


@pytest.mark.parametrize("ex_id", [ex.id for ex in catalogue.EXERCISES])
def test_every_notebook_draws_figures(site, ex_id):
    images = site.images(ex_id)
    assert images and all(i["data"][:8] == b"\x89PNG\r\n\x1a\n" or i["mime"] != "image/png" for i in images)
