"""The CPU runtime: runs the course's CUDA kernels on a machine without a GPU (see runtime.py)."""
from .runtime import CpuKernel, CpuModule, CpuRuntime, host_compiler_status, nvrtc_status

__all__ = ["CpuRuntime", "CpuModule", "CpuKernel", "nvrtc_status", "host_compiler_status"]
