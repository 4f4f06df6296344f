"""The public calls ``python -m dmlq check`` runs on a GPU (dmlq.check.gpu_cases: the
contract's edge cases and every operator and dtype combination on random data), as
gpu tests: on a GPU (tools/gpu_session.sh's gpu_tests step) and in CI on the cupy
stand-in, so host and GPU are held to one list. Each case runs into a fresh result
and into a poisoned ``out``, compared byte for byte (dtype and shape included) with
the expected value worked out by hand, or with the NumPy reference where it has
none. tests/test_gpu_session.py fails if this list and the session's drift apart."""
from __future__ import annotations

import numpy as np
import pytest

from dmlq import check

pytestmark = pytest.mark.gpu

CASES = check.gpu_cases()


def case_id(case) -> str:
    return f"{case[0]}: {case[1]}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_public_call(case):
    import cupy

    results = check.run_case(case, cupy)
    assert [what for what, _, _ in results] == ["fresh", "out="][:len(results)]
    for what, got, want in results:
        assert type(got) is np.ndarray, what
        assert (got.dtype, got.shape) == (want.dtype, want.shape), what
        assert got.tobytes() == want.tobytes(), (what, got.tolist(), want.tolist())


def test_dmlq_check_runs_the_same_cases(capsys):
    """``python -m dmlq check`` (tools/gpu_session.sh's first step) runs every case
    above on the GPU: its table counts them per operator, none failed."""
    import cupy  # noqa: F401 - the stand-in in its twin

    assert check.run() == 0
    table = {}
    for line in capsys.readouterr().out.splitlines():
        cells = line.split()
        if len(cells) == 4 and cells[1] == "cuda":
            table[cells[0]] = (int(cells[2]), int(cells[3]))
    want = {}
    for case in CASES:
        want[case[0]] = want.get(case[0], 0) + 1
    assert table == {op: (n, 0) for op, n in want.items()}
