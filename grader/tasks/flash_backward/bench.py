"""Benchmark for 09_flash_backward."""
BENCH = []
