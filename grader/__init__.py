"""FlashAttention from scratch: the course's grader, references and runtimes."""

__version__ = "0.1.0"
