"""The limits one submission's check runs under in `grader grade` and both autograders, so that no
submission can take the grading machine down: memory, CPU time, processes, output. Every number is
here, and only here.

A check runs as `python -m grader.limits ARGS -- python -m grader check ...` (`Limits.wrap`): this
module sets the `resource` limits in that child and then execs the check, whose worker (the process
that imports the submission) and every compiler it starts inherit them. Nothing runs in the grading
process between fork and exec (no preexec_fn, which is unsafe beside the grading threads).

- Memory, per process: RLIMIT_AS (the whole address space) on the CPU backend, where a check's
  processes stay under 0.7 GB of it (the workers of 02, 06, 09, 10 and 11 at 0.43 to 0.62 GB, each
  compiler under 0.2 GB). On a GPU, CUDA reserves address space far beyond what it uses: a GPU check's worker
  maps about 14 GB, of which about 0.4 GB is data (measured on an H200), and under RLIMIT_AS at
  4 GiB CuPy does not start ("cudaErrorMemoryAllocation"). There the limit is RLIMIT_DATA, which
  counts the private writable memory a process maps (heap, anonymous mmap, NumPy's arrays: a 12 GB
  np.empty is refused) but not those reservations, nor shared mappings. The default allows about
  six times what a check needs. Past it, an allocation fails: "MemoryError" in the submission's own
  code, which the check reports and `hit_in` names.
- CPU time, per process: RLIMIT_CPU at the submission's whole time limit (the check counts each case
  in CPU time already; this stops a process that escaped the check, or many threads spinning). The
  process gets SIGXCPU, then SIGKILL 5 s later.
- Output: RLIMIT_FSIZE caps every file a process writes, its printed output included (the check's
  worker prints into a log file); past it a write fails ("File too large"). What the check prints to
  the grading process is read up to the same size, and the check is stopped past it.
- Processes: the grading process (grade.py's Runner) counts the processes below each check, and
  those left in their process groups, every WATCH_INTERVAL seconds, and stops the check when there
  are more than PROCESSES; when a check ends, whatever it left running is killed. RLIMIT_NPROC
  bounds them in the kernel too, but it counts every process and thread of the user, and root
  ignores it (a Gradescope container runs as root): it is set, for users other than root, at the
  user's count when the check starts plus a margin, as a backstop to the watch. A process that
  leaves both its parent and its process group (a double fork and setsid) escapes the count: these
  limits stop mistakes, they are not a sandbox against a student set on cheating.
- Core files: RLIMIT_CORE 0 (a crash leaves nothing on disk).

Each limit can be lowered (or raised) for a run by an environment variable, GRADER_LIMIT_MEMORY
("4G", "512M" or bytes), GRADER_LIMIT_PROCESSES and GRADER_LIMIT_OUTPUT ("64M"): the tests set them
low to see each limit hit quickly.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass

MEMORY_BYTES = 4 * 2**30        # per process: RLIMIT_AS (CPU backend) or RLIMIT_DATA (GPU backend)
PROCESSES = 64                  # processes below one check at a time (a check needs about ten)
OUTPUT_BYTES = 64 * 2**20       # per file written, and what the grading process reads from a check
CPU_GRACE = 5                   # seconds between SIGXCPU and SIGKILL
NPROC_MARGIN = 512              # RLIMIT_NPROC (not root): the user's threads at the start plus this
WATCH_INTERVAL = 0.25           # seconds between two counts of a check's processes

ENV = {"memory": "GRADER_LIMIT_MEMORY", "processes": "GRADER_LIMIT_PROCESSES",
       "output": "GRADER_LIMIT_OUTPUT"}


def parse_size(text: str) -> int:
    """'4G', '512M', '64k' or a number of bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)[iI]?[bB]?\s*", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (give bytes, or a number with K, M or G)")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


def _from_env(name: str, default: int, size: bool) -> int:
    text = os.environ.get(ENV[name])
    if not text:
        return default
    try:
        value = parse_size(text) if size else int(text)
    except ValueError as e:
        from .errors import GraderError
        raise GraderError(f"${ENV[name]}: {e}.") from None
    if value <= 0:
        from .errors import GraderError
        raise GraderError(f"${ENV[name]} must be positive (got {text!r}).")
    return value


@dataclass(frozen=True)
class Limits:
    memory: int                 # bytes per process
    cpu: int                    # seconds of CPU time per process
    processes: int              # processes below the check at a time
    output: int                 # bytes per file, and read from the check's pipes
    backend: str                # "cpu": the memory limit is RLIMIT_AS; "gpu": RLIMIT_DATA

    @classmethod
    def for_check(cls, backend: str, seconds: float) -> Limits:
        """The limits of one submission's check on `backend` that may take `seconds` in all."""
        return cls(memory=_from_env("memory", MEMORY_BYTES, True), cpu=max(1, int(seconds + 0.999)),
                   processes=_from_env("processes", PROCESSES, False),
                   output=_from_env("output", OUTPUT_BYTES, True), backend=backend)

    @property
    def memory_kind(self) -> str:
        return "address space" if self.backend == "cpu" else "data"

    def describe(self) -> str:
        return (f"{size_text(self.memory)} of memory per process ({self.memory_kind}), {self.cpu} s of CPU "
                f"time per process, {self.processes} processes, {size_text(self.output)} of output")

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd` run under these limits (this module sets them, then execs `cmd`)."""
        return [sys.executable, "-m", "grader.limits", "--memory", str(self.memory), "--cpu", str(self.cpu),
                "--processes", str(self.processes), "--output", str(self.output), "--backend", self.backend,
                "--", *cmd]

    def apply(self) -> None:
        """Set the limits on this process (and so on everything it starts). A limit is only ever
        lowered: a hard limit already below it stays."""
        import resource
        memory = resource.RLIMIT_AS if self.backend == "cpu" else resource.RLIMIT_DATA
        _lower(resource, memory, self.memory, self.memory)
        _lower(resource, resource.RLIMIT_CPU, self.cpu, self.cpu + CPU_GRACE)
        _lower(resource, resource.RLIMIT_FSIZE, self.output, self.output)
        _lower(resource, resource.RLIMIT_CORE, 0, 0)
        if os.geteuid() != 0 and hasattr(resource, "RLIMIT_NPROC"):
            n = user_threads() + max(NPROC_MARGIN, 8 * self.processes)
            _lower(resource, resource.RLIMIT_NPROC, n, n)


def _lower(resource, which: int, soft: int, hard: int) -> None:
    _, old_hard = resource.getrlimit(which)
    if old_hard != resource.RLIM_INFINITY:
        hard = min(hard, old_hard)
    resource.setrlimit(which, (min(soft, hard), hard))


def user_threads() -> int:
    """The threads of this real user now (what RLIMIT_NPROC counts), from /proc; 0 where it is not."""
    uid, n = os.getuid(), 0
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                n += int(fields.get("Threads", "1"))
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return n


# ---- what a limit looks like from outside ---------------------------------------------------------

def hit_in(text: str | None, limits: Limits) -> str | None:
    """The limit that `text` (a submission's error message) shows it ran into, in words; None if none."""
    text = text or ""
    if re.search(r"MemoryError|std::bad_alloc|Cannot allocate memory", text):
        return f"the memory limit is {size_text(limits.memory)} per process"
    if re.search(r"File too large|\[Errno 27\]|SIGXFSZ", text):
        return f"the output limit is {size_text(limits.output)}, for printed output and for any file written"
    if "SIGXCPU" in text:
        return f"the CPU-time limit is {limits.cpu} s per process"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.limits",
                                description="Run a command under the limits of a submission's check.")
    p.add_argument("--memory", type=int, required=True)
    p.add_argument("--cpu", type=int, required=True)
    p.add_argument("--processes", type=int, required=True)
    p.add_argument("--output", type=int, required=True)
    p.add_argument("--backend", choices=("cpu", "gpu"), required=True)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("give the command after --")
    Limits(args.memory, args.cpu, args.processes, args.output, args.backend).apply()
    os.execvp(cmd[0], cmd)
    return 127                  # not reached


if __name__ == "__main__":
    sys.exit(main())
