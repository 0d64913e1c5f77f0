"""The errors the grader reports to a student as they are, without a traceback.

Every layer raises these (runtimes, the check engine, the command line); the command line turns a
GraderError into `grader: message` and exit code 2, and the check engine turns the others into a
failed case.
"""
from __future__ import annotations


class GraderError(Exception):
    """An error the grader reports to the student as it is (no traceback)."""


class RuntimeUnavailable(GraderError):
    """The requested backend cannot run on this machine."""


class CompileError(GraderError):
    """The kernel source did not compile. ``log`` holds the compiler's own message."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message + ("\n" + log if log else ""))
        self.log = log


class LaunchError(GraderError):
    """A launch was refused before it ran (bad grid, block, argument or shared memory)."""


class KernelFault(GraderError):
    """The kernel did something wrong while running (out of bounds, deadlock, race ...)."""


class CaseNotRunnable(GraderError):
    """This machine cannot run a case (it needs more GPUs than it has): the case is reported as not run."""
