"""Checks for 06_flash_tensor_cores: FlashAttention in float16 and bfloat16 on tensor cores.

The cases, the tolerance rule and the diagnoses are the low-precision prefill kit's
(grader/attention/lowp_prefill.py), shared with module 10.
"""
from ...attention.lowp_prefill import *  # noqa: F401,F403
