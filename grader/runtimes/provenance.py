"""Where a case's answer came from: the submission's kernels, or the array library.

A launcher could return attention computed with `rt.xp` (einsum, exp, sum) and never launch a kernel,
or copy such an array through a kernel that does nothing else; both would pass every comparison. So
while a case runs, the runtime keeps a ledger of its buffers: the inputs the grader made, and every
array the launcher makes through rt (`empty`, `zeros`, `full`: contents the runtime chose; `asarray`:
contents the launcher brings). Around each launch it fingerprints every buffer, so it knows which
changed inside a kernel and which changed outside one. The rules (checked by `verdict`):

- every array a kernel receives lies in an input or in a buffer made through rt, and is not
  floating-point data the launcher made itself (`rt.asarray` of numbers it computed: the answer could
  be in there; integer tables, such as a schedule built on the host, are allowed);
- no buffer changes outside a kernel: between its making and the first launch, between two launches,
  or after the last one;
- every output lies in a buffer made by `rt.empty`, `rt.zeros` or `rt.full` that a kernel received.

The same code serves both runtimes: on the emulator a fingerprint is a hash of the array's bytes; on a
GPU the buffers are copied to the host for it after the device is synchronised (this runs only while
the grader checks, never in a benchmark).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from .base import _address, python_stack, site_in


@dataclass
class _Buffer:
    array: object
    name: str                      # an input's name, or what made it ("rt.empty")
    how: str                       # "input", "made" (empty/zeros/full) or "host" (asarray)
    start: int
    end: int
    digest: bytes = b""
    launched: list = field(default_factory=list)     # the launches that received it
    made_at: tuple = ()            # the Python frames that made it (base.python_stack)


def _span(a) -> tuple[int, int]:
    start = _address(a)
    return start, start + int(a.nbytes)


def _numbers(a) -> bool:
    """Floating-point data (bfloat16 travels as uint16): what an answer smuggled in would be."""
    dt = np.dtype(a.dtype)
    return dt.kind in "fc" or dt.itemsize == 2


def _shape(a) -> str:
    return f"{np.dtype(a.dtype).name} array of shape {list(a.shape)}"


class Ledger:
    """The buffers of one case and what touched them (see the module's docstring)."""

    def __init__(self, rt, inputs: dict):
        self.rt = rt
        self.buffers: list[_Buffer] = []
        self.launches: list[str] = []
        self.problem: str | None = None          # the first rule broken, in words
        self.elsewhere = False                   # the case ran in other processes, which kept their own
        self.changed: _Buffer | None = None      # the buffer it changed outside the kernels, if that
        for name, a in inputs.items():
            if self._is_array(a):
                self._add(a, repr(name), "input")

    def _is_array(self, a) -> bool:
        return isinstance(a, (np.ndarray, getattr(self.rt.xp, "ndarray", np.ndarray)))

    def _digest(self, a) -> bytes:
        host = np.ascontiguousarray(self.rt.to_numpy(a))
        return hashlib.blake2b(host.view(np.uint8).reshape(-1), digest_size=16).digest()

    def _add(self, a, name: str, how: str) -> None:
        start, end = _span(a)
        self.buffers.append(_Buffer(a, name, how, start, end, self._digest(a)))

    def _holder(self, a) -> _Buffer | None:
        start, end = _span(a)
        return next((b for b in reversed(self.buffers) if b.start <= start and end <= b.end
                     and (end > start or b.start == start)), None)

    def made(self, a, how: str, call: str) -> None:
        """An array the launcher made through rt (`call`: "rt.empty" ...), with the frames that made it."""
        if self._is_array(a) and self._holder(a) is None:     # not an input handed back (asarray)
            self._add(a, call, how)
            self.buffers[-1].made_at = python_stack()

    def made_in(self, a, path) -> str:
        """'line N `text`' of the file `path` at which the launcher made array a, or ''."""
        b = self._holder(a) if self._is_array(a) else None
        return site_in(b.made_at, path) if b else ""

    def _where(self) -> str:
        if not self.launches:
            return "before any kernel ran"
        last = self.launches[-1]
        return f"after launch {len(self.launches)} ({last})"

    def _changed_outside(self, until: str) -> None:
        for b in self.buffers:
            now = self._digest(b.array)
            if now != b.digest and self.problem is None:
                self.changed = b
                self.problem = (f"{{what}} was changed outside your kernels: its contents changed {self._where()} "
                                f"and {until}, where only the launcher's Python code runs. Every value of the "
                                "answer must be computed by a kernel compiled from your file; the launcher only "
                                "allocates, launches and returns.")
            b.digest = now

    def before(self, kernel: str, params, args) -> None:
        """A launch is about to run: was anything changed since the last one, and are its arrays ours?"""
        self.rt.synchronize()
        self._changed_outside(f"before launch {len(self.launches) + 1} ({kernel})")
        for i, a in enumerate(args):
            if not self._is_array(a):
                continue
            p = params[i] if params and i < len(params) else None
            arg = f"argument {i + 1}" + (f" ({p.ctype} {p.name})" if p is not None else "")
            b = self._holder(a)
            if self.problem is None and b is None:
                self.problem = (f"{kernel}'s {arg} is a {_shape(a)} that is neither an input nor an array "
                                "made through rt (rt.empty, rt.zeros, rt.full): your launcher made it with the "
                                "array library. Every buffer a kernel reads must be an input, an output, or "
                                "scratch space made through rt and written only by kernels, so that the answer "
                                "comes from your kernels.")
            elif self.problem is None and b.how == "host" and _numbers(a):
                self.problem = (f"{kernel}'s {arg} holds numbers your launcher computed on its own and "
                                f"passed through {b.name} (a {_shape(a)}). Every value a kernel reads must be an "
                                "input or something a kernel wrote; make scratch space with rt.empty or rt.zeros "
                                "and let a kernel fill it.")
            if b is not None:
                b.launched.append(kernel)

    def after(self, kernel: str) -> None:
        """A launch has run: what it changed is the kernels' doing."""
        self.launches.append(kernel)
        self.rt.synchronize()
        for b in self.buffers:
            b.digest = self._digest(b.array)

    def verdict(self, outputs: dict) -> str | None:
        """The first rule the case broke, in words (None: the answer came from the kernels)."""
        if self.elsewhere:
            return None
        self._changed_outside("before your launcher returned")
        if self.problem:
            b = self.changed
            if b is None:
                return self.problem
            named = [k for k, a in outputs.items() if self._is_array(a) and self._holder(a) is b]
            what = (f"the input {b.name}" if b.how == "input" else
                    f"{named[0]} (the {_shape(b.array)} made by {b.name})" if named else
                    f"the {_shape(b.array)} made by {b.name}")
            return self.problem.format(what=what)
        for name, a in outputs.items():
            if not self._is_array(a) or not a.size:
                continue
            b = self._holder(a)
            if b is None:
                return (f"{name} was not computed by your kernels: your launcher returned a {_shape(a)} that "
                        "was not made through rt. Return the arrays your kernels wrote: make each output "
                        "with rt.empty (or rt.zeros) and pass it to the kernel that computes it.")
            if b.how == "input":
                return (f"{name} was not computed by your kernels: your launcher returned the input "
                        f"{b.name} (or a part of it) as {name}. Make the output with rt.empty and let a kernel "
                        "write it.")
            if b.how == "host":
                return (f"{name} was not computed by your kernels: your launcher returned numbers it made "
                        f"itself ({b.name}, a {_shape(b.array)}). Make the output with rt.empty and let a "
                        "kernel write it.")
            if not b.launched:
                launched = ", ".join(dict.fromkeys(self.launches)) or "no kernel"
                return (f"{name} was not computed by your kernels: no launch received the array returned as "
                        f"{name} (the case launched {launched}). Pass it to the kernel that computes it.")
        return None
