"""Every kernel variant on one small case (tests/gpu_variants.py): on the GPU first in the
session (tools/gpu_session.sh's quick and correct stages, and the sanitizers' case list), and in
CI on the host harness, where one test runs every case, checks each ran the variants it claims,
and that together they launch every kernel of the kernel tables (a kernel added to a table
without a case here fails it)."""
from __future__ import annotations

import pytest

import gpu_variants as V
from dmlq.gpu import plan

IDS = [c.name for c in V.CASES]


def _run(case, xp):
    with plan.recording() as plans:
        results = case.fn(xp)
    assert results, case.name
    V.check(results)
    ran = {p.variant for p in plans}
    assert set(case.claims) <= ran, (case.name, sorted(ran))
    return plans


@pytest.mark.gpu
@pytest.mark.parametrize("case", V.CASES, ids=IDS)
def test_variant(case):
    import cupy

    _run(case, cupy)


def test_every_kernel_of_the_tables_has_a_case(cupy_stand_in):
    """All cases on the host harness (through the cupy stand-in): each bit for bit and
    running its claimed variants; together they launch every (folded) kernel of
    dmlq.gpu.loader.registry() but those only a tensor past 2**31 elements reaches."""
    launched = set()
    for case in V.CASES:
        launched |= V.launched_keys(_run(case, cupy_stand_in))
    want = V.variant_keys()
    assert set(V.LARGE_ONLY) <= want, sorted(set(V.LARGE_ONLY) - want)
    missing = want - launched - set(V.LARGE_ONLY)
    assert not missing, f"{len(missing)} kernel variants without a case in tests/gpu_variants.py: {sorted(missing)}"
