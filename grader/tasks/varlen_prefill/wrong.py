"""Wrong versions of 07_varlen_prefill (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "07_varlen_prefill"
WRONG = []
