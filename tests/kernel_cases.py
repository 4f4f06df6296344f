"""Problem generators shared by the GPU tests (test_gpu_*.py) and their host-harness
twins (test_select_*.py), so that both run the same cases."""
from __future__ import annotations

import numpy as np

# ------------------------------------------------------------------ average pooling

SPECIAL_SCALES = np.array([0.0, -0.0, 1e-45, 1e-39, 1e-10, 0.0039215686, 0.5, 3.0, 1e10, 3e38, np.inf, -np.inf,
                           np.nan, -0.25], np.float32)


def pool_params(rng, channels, xdt, odt, pc, omit, special):
    """(x_scale, x_zero_point, out_scale, out_zero_point) for a pooling problem.

    pc (four flags, in that order): per channel rather than per tensor. omit (two
    flags): leave out the input's / the output's zero point. special: scales drawn
    from SPECIAL_SCALES instead of uniform in [0.002, 0.2).
    """
    def vec(per_channel, kind):
        n = channels if per_channel else 1
        if kind == "scale":
            return (rng.choice(SPECIAL_SCALES, n) if special else rng.uniform(0.002, 0.2, n)).astype(np.float32)
        info = np.iinfo(kind)
        return rng.integers(info.min, info.max + 1, n).astype(kind)

    xs, os_ = vec(pc[0], "scale"), vec(pc[2], "scale")
    xzp = None if omit[0] else vec(pc[1], xdt)
    ozp = None if omit[1] else vec(pc[3], odt)
    return xs, xzp, os_, ozp


# ------------------------------------------------------------------ matrix multiply

def matmul_worst_cases(K, rng, both_zero_points=False):
    """(args without out, out dtype) whose int32 partial sums are at their limit.

    args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, out_scale, out_zero_point).
    Uniform extremes put |acc| = K * 255 * 255 (wraps past 2**31 for K > 33025);
    out_scale maps it to ~100 so any wrap flips the sign. The "cancelling"
    cases keep sum(a*b) at its limit while the zero points cancel it down to a
    few hundred, and out_scale 4 makes every unit of the exact value count.
    both_zero_points adds, per signedness, a cancelling case with a's and b's
    zero points both set (out_scale 3).
    """
    cases = []
    for ta, tb, av, bv, azp, bzp in [("uint8", "uint8", 255, 255, 0, 0),
                                     ("int8", "int8", -128, -128, 0, 0),
                                     ("uint8", "int8", 0, 127, 255, -128),
                                     ("int8", "uint8", -128, 255, 127, 0)]:
        a = np.full((2, K), av, ta)
        b = np.full((K, 3), bv, tb)
        exact = K * (av - azp) * (bv - bzp)
        cases.append(((a, np.float32([1.0]), np.array([azp], ta), b, np.float32([1.0]),
                       np.array([bzp], tb), np.float32([abs(exact) / 100.0]), np.int8([0])), np.int8))
    for ta, tb, hi in [("uint8", "uint8", 255), ("int8", "int8", -128)]:
        a = np.full((3, K), hi, ta)
        a[:, rng.integers(0, K, 50)] = hi - 1 if hi > 0 else hi + 1
        b = np.full((K, 4), hi, tb)
        for j in range(4):
            b[rng.integers(0, K, 20 + j), j] = rng.integers(0, 100) if hi > 0 else rng.integers(-100, 0)
        cases.append(((a, np.float32([1.0]), None, b, np.float32([1.0]), np.array([hi], tb),
                       np.float32([4.0]), np.uint8([128])), np.uint8))
        cases.append(((a, np.float32([0.5, 1.0, 2.0]), np.full(3, hi, ta), b, np.float32([1.0]),
                       None, np.float32([0.25]), np.int8([-5])), np.int8))
        if both_zero_points:
            za = np.array([hi - 1 if hi > 0 else hi + 1], ta)
            cases.append(((a, np.float32([1.0]), za, b, np.float32([1.0]), np.array([hi], tb),
                           np.float32([3.0]), np.uint8([100])), np.uint8))
    return cases
