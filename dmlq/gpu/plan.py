"""The one kernel-selection interface: what a call launches, as data.

Each operator module of dmlq.gpu (elementwise, matmul, avgpool) has a pure
selection rule (``select_*``: shapes and device facts in, a variant name out)
and ``plan_<operator>(...)``: the backend function's own arguments in (their
shapes, strides, dtypes and addresses are read, never their values), a
:class:`Plan` out, and nothing allocated or launched. The backend function
makes the same plan and runs it through :func:`execute`, so a printed plan is
exactly what runs.

Planning asks the device in use (``dmlq.gpu.device.current()``) for facts only:
compute capability, SM count and occupancy. Under ``device.using(
device.NominalDevice())`` it runs without a GPU or CuPy, on NumPy arrays, for
a nominal H100; ``python -m dmlq check`` prints plans that way when no GPU is
present, and the selection tests use it.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from . import device


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan."""

    source: str        # the .cu file
    kernel: str        # the name expression, e.g. matmul_mma<uint8, int8, int8, 128, 128, 64, 4, 16>
    grid: tuple
    block: tuple
    shared_mem: int = 0  # dynamic shared memory, bytes
    role: str = "main"   # or a helper pass: "row sums", "column sums", "table build", "split-K sum"

    def __post_init__(self):  # CuPy launches take tuples of Python ints, nothing else
        object.__setattr__(self, "grid", tuple(int(v) for v in self.grid))
        object.__setattr__(self, "block", tuple(int(v) for v in self.block))
        object.__setattr__(self, "shared_mem", int(self.shared_mem))

    def __str__(self) -> str:
        text = f"{self.kernel}  grid {_dims(self.grid)}  block {_dims(self.block)}"
        if self.shared_mem:
            text += f"  dynamic smem {self.shared_mem} B"
        return text if self.role == "main" else f"{text}  ({self.role})"


def _dims(t) -> str:
    return "x".join(str(int(v)) for v in t)


@dataclass(frozen=True)
class Plan:
    """What one operator call runs: the variant, its launches in order, and notes
    on data movement around them (copies, temporaries, splits)."""

    op: str
    variant: str
    launches: tuple = ()
    notes: tuple = ()
    # What the operator's launcher needs to build arguments (not printed).
    detail: Any = field(default=None, compare=False, repr=False)

    def lines(self) -> list:
        head = f"{self.op}: {self.variant}"
        if self.notes:
            head += f" ({'; '.join(self.notes)})"
        if not self.launches:
            return [head + ", nothing launched"]
        body: list[str] = []
        last, repeats = None, 0
        for launch in self.launches:  # identical consecutive launches are folded
            text = str(launch)
            if text == last:
                repeats += 1
                continue
            if repeats:
                body[-1] += f"  x{repeats + 1}"
            body.append(text)
            last, repeats = text, 0
        if repeats:
            body[-1] += f"  x{repeats + 1}"
        return [head] + [f"  {b}" for b in body]

    def __str__(self) -> str:
        return "\n".join(self.lines())


class Memo:
    """Plans of repeated calls, keyed by what they depend on (shapes, strides,
    dtypes, address alignment, the device): a repeated call skips selection and
    sizing and only builds its arguments. Bounded; cleared whole when full."""

    _all: list = []

    def __init__(self, size: int = 1024):
        self.size = size
        self._plans: dict = {}
        Memo._all.append(self)

    def get(self, key, make):
        plan = self._plans.get(key)
        if plan is None:
            plan = make()
            if len(self._plans) >= self.size:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def clear(self) -> None:
        self._plans.clear()

    @classmethod
    def clear_all(cls) -> None:
        """Forget every memoized plan (tests that patch selection rules call this)."""
        for memo in cls._all:
            memo.clear()


def device_key() -> tuple:
    """The device part of a memo key: the device module's backend and its facts."""
    dev = device.current()
    return dev, dev.info()


_observers: list = []


@contextlib.contextmanager
def recording():
    """Collects every plan executed inside the block, in order (a list)."""
    plans: list = []
    _observers.append(plans)
    try:
        yield plans
    finally:
        _observers.remove(plans)


def execute(plan: Plan, arglists, kernels) -> None:
    """Launch each of ``plan.launches`` with its argument tuple through its
    launch function in ``kernels`` (from :func:`kernels`)."""
    launches = plan.launches
    if len(arglists) != len(launches):
        raise AssertionError(f"{plan.op}: {len(arglists)} argument lists for {len(launches)} launches")
    for kernel, launch, args in zip(kernels, launches, arglists):
        kernel(launch.grid, launch.block, args, shared_mem=launch.shared_mem)
    for plans in _observers:
        plans.append(plan)


def kernels(plan: Plan) -> tuple:
    """The launch functions of a plan's kernels on the device in use, looked up
    (and compiled) once: ``k(grid, block, args, shared_mem=n)``."""
    return tuple(device.kernel(launch.source, launch.kernel, launch.shared_mem) for launch in plan.launches)


def launcher(plan: Plan):
    """``go(arglists)``: :func:`execute` for ``plan`` with its kernels looked up once."""
    found = kernels(plan)

    def go(arglists):
        execute(plan, arglists, found)
    return go


def elem_strides(x, batch_shape):
    """A matrix operand's batch strides in elements, right-aligned to batch_shape (0 where
    broadcast): the matmul kernels' per-matrix offset tables."""
    nb = x.ndim - 2
    out = [0] * len(batch_shape)
    for i in range(nb):
        j = len(batch_shape) - nb + i
        out[j] = 0 if x.shape[i] == 1 else x.strides[i] // x.itemsize
    return out


class _Tables:
    """The owner of one runner's offset tables on per-thread default streams (a weak key)."""


def staging(copy_a: bool, copy_b: bool, table):
    """``prepare(a, b) -> (a, b, table)`` for a runner's call: ``a`` and ``b`` copied
    to contiguous arrays where its plan says so (``copy_a`` / ``copy_b``), and
    ``table`` (the plan's host array of per-matrix offsets) on the device: uploaded
    on the first call on each stream (the runner's device), on that stream, and kept
    for that stream's next calls. A copy is asynchronous (no synchronize), so a call
    on another stream must not read it before it lands: it gets its own."""
    xp = device.xp()
    uploaded: dict = {}
    owner = _Tables()

    def prepare(a, b):
        if copy_a:
            a = xp.ascontiguousarray(a)
        if copy_b:
            b = xp.ascontiguousarray(b)
        return a, b, device.stream_copy(owner, uploaded, lambda: xp.asarray(table))
    return prepare


class Runner:
    """A plan made runnable for one geometry on one device: ``runner(*args, out)``
    builds the argument lists and launches (``call``, written by the operator's
    module around :func:`launcher`). What a runner may assume -- shapes, strides,
    dtypes, address alignment, the values of host scalars, that out overlaps no
    input -- is what the key it is cached under holds."""

    __slots__ = ("plan", "call")

    def __init__(self, plan: Plan, call):
        self.plan = plan
        self.call = call

    def __call__(self, *args):
        return self.call(*args)
