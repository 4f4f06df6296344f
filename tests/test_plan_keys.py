"""One canonical key per call signature (dmlq.keys): a cached call and a fresh call
give the same result or the same exception (issue 24, defect 8).

Each argument is drawn from values that compare equal, or nearly, but differ in
type (``2``, ``2.0``, ``True``, ``np.int64(2)``, ``[2, 2]``, ``(2.0, 2.0)``...),
so a key that forgot a type would hand a second call the first one's plan: the
call is made once on a cold plan cache and once right after another call of the
same operator has filled it, and the two outcomes must be identical.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dmlq
from dmlq import calls, keys

f32, f16, u8, i8 = np.float32, np.float16, np.uint8, np.int8
RNG = np.random.default_rng(24)
X = RNG.standard_normal((2, 3, 4, 4)).astype(f32) * 4
Q = RNG.integers(0, 256, (2, 3, 4, 4), dtype=u8)
A = RNG.integers(0, 256, (3, 5), dtype=u8)
B = RNG.integers(-128, 128, (5, 4), dtype=i8)

# Per argument: (values a valid call takes, values that compare equal or nearly to
# them but differ in type or shape, mostly refused). A first call draws from the
# first; the second redraws one argument from both.
SCALES = ((0.5, f32(0.5), 1, np.array(0.5, f32), -0.0, 0.0),
          (np.float64(0.5), f16(0.5), True, np.int64(1), "0.5", np.array([0.5, 0.5], f32), np.float64(-0.0)))
ZERO_POINTS = ((None, 0, 3, u8(3), np.array(3, u8)),
               (i8(3), np.int64(3), True, False, 3.0, np.bool_(True), -1, 300, np.array([3], u8), u8(0)))
DTYPES = ((None, np.uint8, "uint8"), (np.dtype(u8), np.int8, "int8", bool, np.float32, 1, u8(0)))
INTS = ((2, 1), (2.0, True, np.int64(2), np.int32(2), np.uint8(2), np.float64(2.0), np.bool_(True), 1.0, 0, -1))
FLAGS = ((False, True), (0, 1, 1.0, np.bool_(True), np.bool_(False), None, "yes"))
NONE = ((None,), ())


def _sizes(values):
    """An int, or a tuple or list of ints (pooling's 2-D parameters)."""
    one = st.sampled_from(values)
    return st.one_of(one, st.tuples(one, one), st.lists(one, min_size=1, max_size=3))


# operator -> ([(name, (valid, alternates))...] of positional arguments, the same of keywords)
SPECS = {
    "quantize": ([("x", ((X, X[0, 0], [1.0, 2.0]), (X.astype(f16), 2.0, X.astype(np.float64)))),
                  ("scale", SCALES), ("zero_point", ZERO_POINTS)], [("dtype", DTYPES)]),
    "dequantize": ([("q", ((Q,), (Q.view(i8), Q.astype(np.int32), Q.astype(np.int64)))), ("scale", SCALES),
                    ("zero_point", ZERO_POINTS)], []),
    "add": ([("a", ((Q,), (Q.view(i8),))), ("a_scale", SCALES), ("a_zero_point", ZERO_POINTS),
             ("b", ((Q, Q[:, :1]), (Q.view(i8),))), ("b_scale", SCALES), ("b_zero_point", ZERO_POINTS),
             ("out_scale", SCALES), ("out_zero_point", ZERO_POINTS)], [("dtype", DTYPES)]),
    "matmul": ([("a", ((A,), (A.view(i8), A.T))), ("a_scale", SCALES), ("a_zero_point", ZERO_POINTS),
                ("b", ((B,), (B.view(u8), B.T))), ("b_scale", SCALES), ("b_zero_point", ZERO_POINTS),
                ("out_scale", SCALES), ("out_zero_point", ZERO_POINTS)], [("dtype", DTYPES)]),
    "avg_pool": ([("x", ((Q,), (Q.view(i8), Q[0]))), ("x_scale", SCALES), ("x_zero_point", ZERO_POINTS),
                  ("out_scale", SCALES), ("out_zero_point", ZERO_POINTS), ("window_size", INTS)],
                 [("strides", INTS), ("start_padding", ((0, 1), INTS[1])), ("end_padding", ((0, 1), INTS[1])),
                  ("dilations", INTS), ("include_padding", FLAGS), ("ceil_mode", FLAGS), ("dtype", DTYPES)]),
}
SIZED = {"window_size", "strides", "start_padding", "end_padding", "dilations"}


def _value(name, pool):
    return _sizes(pool) if name in SIZED else st.sampled_from(pool)


def _call(op, valid_only):
    """A call of op: every argument valid, or (valid_only False) anything."""
    positional, keywords = SPECS[op]
    pick = (lambda v: v[0]) if valid_only else (lambda v: v[0] + v[1])  # noqa: E731
    args = st.tuples(*(_value(n, pick(v)) for n, v in positional))
    kwargs = st.fixed_dictionaries({}, optional={n: _value(n, pick(v)) for n, v in keywords})
    return st.fixed_dictionaries({"args": args, "kwargs": kwargs})


FUNCTIONS = {"quantize": dmlq.quantize_linear, "dequantize": dmlq.dequantize_linear, "add": dmlq.quantized_add,
             "matmul": dmlq.quantized_matmul, "avg_pool": dmlq.quantized_avg_pool}


def _outcome(fn, call):
    """The result's dtype, shape and bytes, or the exception's type and message."""
    try:
        with np.errstate(all="ignore"):
            r = fn(*call["args"], **call["kwargs"])
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return (type(e), str(e))
    return ("result", r.dtype, r.shape, r.tobytes())


def _cached_equals_fresh(op, first, second):
    fn = FUNCTIONS[op]
    calls.clear_plan_cache()
    fresh = _outcome(fn, second)
    calls.clear_plan_cache()
    _outcome(fn, first)  # fills the cache with first's signature (when it plans at all)
    assert _outcome(fn, second) == fresh, (first, second)


@pytest.mark.parametrize("op", sorted(SPECS))
def test_cached_call_equals_fresh_call(op):
    @settings(max_examples=100, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        first = data.draw(_call(op, True), label="first")
        # the second call: the first with one argument or keyword redrawn from every
        # value, so the two signatures often differ in one type only
        positional, keywords = SPECS[op]
        names = [n for n, _ in positional] + [n for n, _ in keywords]
        i = data.draw(st.integers(0, len(names) - 1), label="position")
        args, kwargs = list(first["args"]), dict(first["kwargs"])
        if i < len(positional):
            args[i] = data.draw(_value(names[i], sum(positional[i][1], ())), label=names[i])
        else:
            kwargs[names[i]] = data.draw(_value(names[i], sum(keywords[i - len(positional)][1], ())),
                                         label=names[i])
        _cached_equals_fresh(op, first, {"args": tuple(args), "kwargs": kwargs})

    check()
    calls.clear_plan_cache()


@pytest.mark.parametrize("first, second", [
    ({"window_size": (2, 2)}, {"window_size": (2.0, 2.0)}),
    ({"window_size": 2, "include_padding": True}, {"window_size": 2, "include_padding": 1}),
    ({"window_size": 2, "strides": 1}, {"window_size": 2, "strides": True}),
])
def test_pooling_parameters_are_refused_on_a_cached_call_as_on_a_fresh_one(first, second):
    x = np.zeros((1, 2, 4, 4), u8)
    call = lambda kw: {"args": (x, 1.0, None, 1.0, None), "kwargs": kw}  # noqa: E731
    _cached_equals_fresh("avg_pool", call(first), call(second))
    calls.clear_plan_cache()
    with pytest.raises((TypeError, ValueError)):
        dmlq.quantized_avg_pool(x, 1.0, None, 1.0, None, **second)


def test_keys_tell_equal_values_of_other_types_apart():
    values = [2, 2.0, True, np.int64(2), np.float32(2), np.bool_(True), 1, 1.0, -0.0, 0.0, "2", None]
    assert len({keys.key(v) for v in values}) == len(values)
    params = [(2, 2), (2.0, 2.0), [2, 2], (True, True), (np.int64(2), 2), np.uint8, "uint8", np.dtype(u8)]
    assert len({keys.param_key(p) for p in params}) == len(params)
    assert keys.key(float("nan")) == keys.key(float("nan"))  # one key for every NaN (a NaN equals nothing)
    assert keys.key(np.zeros((2, 3), u8)) == keys.key(np.ones((2, 3), u8))  # operands: never values
    assert keys.key(np.zeros((2, 3), u8)) != keys.key(np.zeros((3, 2), u8).T)  # ... but strides
    with pytest.raises(TypeError):  # a parameter's array has no key: the call is not cached
        keys.param_key((np.array([2, 2]),))


def test_normalize_leaves_keys_to_dmlq_keys():
    """calls.normalize makes no key: the rules live once, in dmlq.keys."""
    import inspect

    src = inspect.getsource(calls.normalize)
    for rule in ("copysign", "tobytes", "_NAN", "strides)"):
        assert rule not in src, rule
