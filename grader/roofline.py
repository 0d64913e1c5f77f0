"""The roofline: the fastest a kernel could run on a device, and how close it comes.

A kernel that does F floating-point operations and must move at least M bytes between DRAM and the
chip cannot finish before max(F / peak FLOP/s, M / peak bandwidth). `grader bench` divides that bound
by the measured time: 100 % means the kernel runs at the device's limit. The FLOP peak is the one of
the units the kernel uses: FP32 on the CUDA cores for float32 kernels, dense FP16/BF16 on the tensor
cores for 16-bit ones.

On a GPU the peaks are computed from what the device reports (its SM count, its clocks, its memory
bus) and the per-SM rates of its architecture from NVIDIA's whitepapers. On the CPU, the emulator's
estimates use the H100 SXM5's datasheet figures.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    name: str
    dram_bytes_per_s: float
    fp32_flops: float
    tensor_flops: float           # dense FP16/BF16 on tensor cores; 0 when unknown
    source: str


# NVIDIA H100 Tensor Core GPU datasheet, SXM5: 3.35 TB/s of HBM3, 67 TFLOP/s of FP32 on the CUDA
# cores, 989 TFLOP/s of dense FP16/BF16 on the tensor cores.
H100_SXM = Peaks("NVIDIA H100 SXM5", 3.35e12, 67e12, 989e12, "NVIDIA H100 datasheet, SXM5, dense")

# Per SM and clock, by compute capability: FP32 FMA lanes, dense FP16 tensor-core FMAs (NVIDIA's
# Ampere, Ada and Hopper architecture whitepapers). An FMA is two FLOPs.
_PER_SM_CLOCK = {"80": (64, 1024), "86": (128, 512), "89": (128, 512), "90": (128, 2048)}

# The CUDA device attributes read below (cudaDeviceAttr in the CUDA runtime API).
_ATTR_CLOCK_KHZ, _ATTR_SMS, _ATTR_MEM_CLOCK_KHZ, _ATTR_BUS_BITS = 13, 16, 36, 37


def nbytes(x) -> int:
    """The bytes of every array in x (an array, or a tuple, list or dict of them)."""
    if isinstance(x, dict):
        return sum(nbytes(v) for v in x.values())
    if isinstance(x, (tuple, list)):
        return sum(nbytes(v) for v in x)
    return int(getattr(x, "nbytes", 0))


def minimum_bytes(inputs: dict, outputs, skip=()) -> int:
    """The least any kernel must move: every input read once (but those in `skip`, which only a
    baseline reads) and every output written once."""
    return nbytes({k: v for k, v in inputs.items() if k not in skip}) + nbytes(outputs)


def uses_tensor_cores(params: dict) -> bool:
    """16-bit inputs (module 06) run on the tensor cores; float32 kernels on the CUDA cores."""
    return str(params.get("dtype", "")).endswith("16")


def device_peaks(rt) -> Peaks | None:
    """The peaks of rt's GPU, computed from its attributes; None when its architecture's per-SM rates
    are not in the table above (then `grader bench` shows no percentage rather than a wrong one)."""
    rates = _PER_SM_CLOCK.get(getattr(rt, "compute_capability", ""))
    if rates is None:
        return None
    get = rt.xp.cuda.runtime.deviceGetAttribute
    dev = rt.xp.cuda.Device().id
    clock_hz = get(_ATTR_CLOCK_KHZ, dev) * 1e3
    sms = get(_ATTR_SMS, dev)
    mem_hz = get(_ATTR_MEM_CLOCK_KHZ, dev) * 1e3
    bus_bits = get(_ATTR_BUS_BITS, dev)
    if not (clock_hz and sms and mem_hz and bus_bits):
        return None
    lanes, tensor_fmas = rates
    return Peaks(rt.device_name, 2 * mem_hz * bus_bits / 8, sms * lanes * 2 * clock_hz,
                 sms * tensor_fmas * 2 * clock_hz,
                 f"read from the device: {sms} SMs at {clock_hz / 1e9:.2f} GHz × {lanes} FP32 lanes "
                 f"(× {tensor_fmas} dense FP16 tensor FMAs), HBM {bus_bits} bits at 2 × {mem_hz / 1e9:.2f} GHz; "
                 f"per-SM rates of compute capability {rt.compute_capability[0]}.{rt.compute_capability[1]} "
                 "from NVIDIA's architecture whitepaper")


@dataclass
class Bound:
    """The roofline of one piece of work on one device."""
    peaks: Peaks
    flops: float
    bytes: float
    tensor_cores: bool

    @property
    def compute_s(self) -> float:
        peak = self.peaks.tensor_flops if self.tensor_cores else self.peaks.fp32_flops
        return self.flops / peak if peak else 0.0

    @property
    def memory_s(self) -> float:
        return self.bytes / self.peaks.dram_bytes_per_s

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def limit(self) -> str:
        """What bounds the work: "memory", "FP32" or "tensor"."""
        if self.memory_s >= self.compute_s:
            return "memory"
        return "tensor" if self.tensor_cores else "FP32"

    def share(self, ms: float) -> float:
        """The measured time against the bound: 1.0 is the device's limit."""
        return self.seconds / (ms * 1e-3)
