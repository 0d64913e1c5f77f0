"""The roofline `grader bench` reports: peaks computed from a device's attributes, and the bound."""
from types import SimpleNamespace

import pytest

from grader.roofline import H100_SXM, Bound, device_peaks, uses_tensor_cores


def fake_rt(cc, attrs):
    runtime = SimpleNamespace(deviceGetAttribute=lambda attr, dev: attrs[attr])
    cuda = SimpleNamespace(runtime=runtime, Device=lambda: SimpleNamespace(id=0))
    return SimpleNamespace(compute_capability=cc, device_name="a GPU", xp=SimpleNamespace(cuda=cuda))


# An H100 SXM5 as CUDA reports it: 1980 MHz, 132 SMs, HBM3 at 2619 MHz on a 5120-bit bus.
H100_ATTRS = {13: 1_980_000, 16: 132, 36: 2_619_000, 37: 5120}


def test_h100_peaks_from_its_attributes_match_the_datasheet():
    p = device_peaks(fake_rt("90", H100_ATTRS))
    assert p.fp32_flops == pytest.approx(H100_SXM.fp32_flops, rel=0.01)          # 66.9 against 67
    assert p.dram_bytes_per_s == pytest.approx(H100_SXM.dram_bytes_per_s, rel=0.01)
    assert "132 SMs" in p.source and "1.98 GHz" in p.source


def test_unknown_architecture_or_missing_attribute_gives_no_peaks():
    assert device_peaks(fake_rt("75", H100_ATTRS)) is None
    assert device_peaks(fake_rt("90", {**H100_ATTRS, 36: 0})) is None


def test_the_bound_is_the_slower_of_compute_and_memory():
    flops, moved = 1e11, 1e9            # 1.5 ms on FP32, 0.1 ms on tensor cores, 0.3 ms of DRAM traffic
    b = Bound(H100_SXM, flops, moved, tensor_cores=False)
    assert b.limit == "FP32" and b.seconds == pytest.approx(flops / 67e12)
    assert b.share(b.seconds * 1e3 * 2) == pytest.approx(0.5)
    assert Bound(H100_SXM, flops, moved, tensor_cores=True).limit == "memory"
    assert Bound(H100_SXM, 1e13, moved, tensor_cores=True).limit == "tensor"
    assert Bound(H100_SXM, 0.0, moved, tensor_cores=False).limit == "memory"
    assert uses_tensor_cores({"dtype": "bfloat16"}) and not uses_tensor_cores({"d": 64})
