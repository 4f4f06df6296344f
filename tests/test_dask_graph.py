"""The dask graphs dmlq builds, as a user reads them (``x.dask``'s layer names, the dashboard,
``visualize()``) and as the scheduler runs them: every layer dmlq makes is named after the
public function, the names are deterministic (in another process too) and differ whenever
an argument does, no task is added beyond what the chunks need, element-wise chains still
fuse, and building a graph computes nothing. Values: tests/test_dask.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import dmlq  # noqa: E402

f32, u8, i8 = np.float32, np.uint8, np.int8
_rng = np.random.default_rng(12)
X = da.from_array(_rng.standard_normal((6, 8)).astype(f32), chunks=(3, 4))          # 4 chunks
Q = da.from_array(_rng.integers(0, 256, (6, 8), dtype=u8), chunks=(3, 4))
B = da.from_array(_rng.integers(0, 256, (8, 5), dtype=u8), chunks=(4, 5))           # K split in 2
X_ROWS = X.rechunk((3, 8)).persist(scheduler="sync")                                 # rows whole in a chunk
Q_ROWS = Q.rechunk((3, 8)).persist(scheduler="sync")                                 # K whole
IMG = da.from_array(_rng.integers(0, 256, (1, 2, 8, 8), dtype=u8), chunks=(1, 1, 4, 4))
IMG1 = da.from_array(_rng.integers(0, 256, (1, 2, 8), dtype=u8), chunks=(1, 1, 4))
_INPUTS = {n for v in (X, X_ROWS, Q, Q_ROWS, B, IMG, IMG1) for n in v.dask.layers}

# (public function, call); calls that differ in one argument only, so that no two may share a name
CALLS = {
    "quantize": ("quantize_linear", lambda: dmlq.quantize_linear(X, f32(0.1), u8(3))),
    "quantize-python-scale": ("quantize_linear", lambda: dmlq.quantize_linear(X, 0.1, u8(3))),
    "quantize-python-scale-2": ("quantize_linear", lambda: dmlq.quantize_linear(X, 0.2, u8(3))),
    "quantize-int8": ("quantize_linear", lambda: dmlq.quantize_linear(X, 0.1, None, dtype=i8)),
    "quantize-uint8": ("quantize_linear", lambda: dmlq.quantize_linear(X, 0.1, None, dtype=u8)),
    "quantize-float8": ("quantize_linear", lambda: dmlq.quantize_linear(X, 0.1, None, dtype="float8_e4m3fn")),
    "quantize-float8-unsaturated": ("quantize_linear", lambda: dmlq.quantize_linear(
        X, 0.1, None, dtype="float8_e4m3fn", saturate=False)),
    "quantize-columns": ("quantize_linear", lambda: dmlq.quantize_linear(X, np.full(8, 0.1, f32), u8(3))),
    "quantize-columns-2": ("quantize_linear", lambda: dmlq.quantize_linear(X, np.full(8, 0.2, f32), u8(3))),
    "quantize-axis-1": ("quantize_linear", lambda: dmlq.quantize_linear(X, np.full(8, 0.1, f32), u8(3), axis=1)),
    "quantize-axis-0": ("quantize_linear", lambda: dmlq.quantize_linear(X, np.full(6, 0.1, f32), u8(3), axis=0)),
    "quantize-blocks-4": ("quantize_linear", lambda: dmlq.quantize_linear(X, np.full((6, 2), 0.1, f32), None,
                                                                          block_size=4, dtype=i8)),
    "quantize-blocks-3": ("quantize_linear", lambda: dmlq.quantize_linear(X, np.full((6, 3), 0.1, f32), None,
                                                                          block_size=3, dtype=i8)),
    "dequantize": ("dequantize_linear", lambda: dmlq.dequantize_linear(Q, f32(0.1), u8(3))),
    "dequantize-zero-point": ("dequantize_linear", lambda: dmlq.dequantize_linear(Q, f32(0.1), u8(4))),
    "dequantize-float16": ("dequantize_linear", lambda: dmlq.dequantize_linear(Q, f32(0.1), u8(3),
                                                                               dtype=np.float16)),
    "add": ("quantized_add", lambda: dmlq.quantized_add(Q, 0.1, 3, Q, 0.2, 3, 0.3, u8(3))),
    "add-out-scale": ("quantized_add", lambda: dmlq.quantized_add(Q, 0.1, 3, Q, 0.2, 3, 0.4, u8(3))),
    "matmul": ("quantized_matmul", lambda: dmlq.quantized_matmul(Q, 0.1, 3, B, 0.2, None, 0.3, u8(3))),
    "matmul-b-scale": ("quantized_matmul", lambda: dmlq.quantized_matmul(Q, 0.1, 3, B, 0.25, None, 0.3, u8(3))),
    "matmul-columns": ("quantized_matmul", lambda: dmlq.quantized_matmul(Q, 0.1, 3, B, np.full(5, 0.2, f32), None,
                                                                         0.3, u8(3))),
    "matmul-columns-2": ("quantized_matmul", lambda: dmlq.quantized_matmul(Q, 0.1, 3, B, np.full(5, 0.3, f32),
                                                                           None, 0.3, u8(3))),
    "matmul-k-whole": ("quantized_matmul", lambda: dmlq.quantized_matmul(Q_ROWS, 0.1, 3, B, 0.2, None, 0.3,
                                                                         u8(3))),
    "matmul_integer": ("matmul_integer", lambda: dmlq.matmul_integer(Q, B, u8(3), None)),
    "matmul_integer-zero-point": ("matmul_integer", lambda: dmlq.matmul_integer(Q, B, u8(4), None)),
    "to_float": ("matmul_integer_to_float", lambda: dmlq.matmul_integer_to_float(Q, f32(0.1), u8(3), B, f32(0.2),
                                                                                 None)),
    "to_float-bias": ("matmul_integer_to_float", lambda: dmlq.matmul_integer_to_float(
        Q, f32(0.1), u8(3), B, f32(0.2), None, np.zeros(5, f32))),
    "to_float-bias-2": ("matmul_integer_to_float", lambda: dmlq.matmul_integer_to_float(
        Q, f32(0.1), u8(3), B, f32(0.2), None, np.ones(5, f32))),
    "to_float-blocks": ("matmul_integer_to_float", lambda: dmlq.matmul_integer_to_float(
        Q, f32(0.1), u8(3), B, np.full((2, 5), 0.2, f32), None, block_size=4)),
    "to_float-float16": ("matmul_integer_to_float", lambda: dmlq.matmul_integer_to_float(
        Q, f32(0.1), u8(3), B, f32(0.2), None, dtype=np.float16)),
    "pool": ("quantized_avg_pool", lambda: dmlq.quantized_avg_pool(IMG, 0.1, 3, 0.1, 3, (3, 3))),
    "pool-window": ("quantized_avg_pool", lambda: dmlq.quantized_avg_pool(IMG, 0.1, 3, 0.1, 3, (2, 3))),
    "pool-out-scale": ("quantized_avg_pool", lambda: dmlq.quantized_avg_pool(IMG, 0.1, 3, 0.2, 3, (3, 3))),
    "pool-include-padding": ("quantized_avg_pool", lambda: dmlq.quantized_avg_pool(
        IMG, 0.1, 3, 0.1, 3, (3, 3), start_padding=1, include_padding=True)),
    "pool-padding": ("quantized_avg_pool", lambda: dmlq.quantized_avg_pool(IMG, 0.1, 3, 0.1, 3, (3, 3),
                                                                            start_padding=1)),
    "pool-1d": ("quantized_avg_pool", lambda: dmlq.quantized_avg_pool(IMG1, 0.1, 3, 0.1, 3, 3)),
    "pool-1d-window": ("quantized_avg_pool", lambda: dmlq.quantized_avg_pool(IMG1, 0.1, 3, 0.1, 3, 2)),
    "dynamic": ("dynamic_quantize_linear", lambda: dmlq.dynamic_quantize_linear(X)),
    "dynamic-int8": ("dynamic_quantize_linear", lambda: dmlq.dynamic_quantize_linear(X, dtype=i8)),
    "dynamic-rows": ("dynamic_quantize_linear", lambda: dmlq.dynamic_quantize_linear(X, per_row=True)),
    "dynamic-rows-int8": ("dynamic_quantize_linear", lambda: dmlq.dynamic_quantize_linear(X, per_row=True,
                                                                                          dtype=i8)),
    "dynamic-rows-whole": ("dynamic_quantize_linear", lambda: dmlq.dynamic_quantize_linear(X_ROWS, per_row=True)),
}
# dask's own operations on the operands (cutting, views), named by dask after what they do
_DASK_OPS = ("array-", "rechunk-", "overlap-", "getitem-", "broadcast_to-")


def _results(key):
    r = CALLS[key][1]()
    return r if isinstance(r, tuple) else (r,)


def _names(keys):
    return {k: [r.name for r in _results(k)] for k in keys}


@pytest.mark.parametrize("key", sorted(CALLS))
def test_every_layer_is_named_after_the_public_function(key):
    """Layers were named "apply-<token>" or after private helpers (partial_sums, _wrap_int32,
    _chunk_range, to_float_task)."""
    fname = CALLS[key][0]
    results = _results(key)
    if fname == "dynamic_quantize_linear":  # y is quantize_linear's layer; the parameters are its own
        assert results[0].name.startswith("quantize_linear-")
        assert results[1].name.startswith(fname + "-scale-") and results[2].name.startswith(fname + "-zero-point-")
    else:
        assert results[0].name.startswith(fname + "-"), results[0].name
    for r in results:  # (and the meta: a NumPy array of the result's dtype and rank)
        assert type(r._meta) is np.ndarray and (r._meta.dtype, r._meta.ndim) == (r.dtype, r.ndim)
        for layer in r.dask.layers:
            if layer in _INPUTS or layer.startswith(_DASK_OPS):
                continue
            assert layer.startswith((fname + "-", "quantize_linear-")), (key, layer)


def test_names_are_deterministic_and_differ_with_every_argument():
    """The same call twice gives the same names; calls differing in one argument (a Python or
    NumPy scale's value, dtype=, saturate=, block_size=, axis=, per_row=, a window) never
    share one; no argument (no task object of dmlq's) is tokenized by id or at random."""
    with dask.config.set({"tokenize.ensure-deterministic": True}):
        first, again = _names(CALLS), _names(CALLS)
    assert first == again
    owners = {}
    for key, names in first.items():
        for n in names:
            owners.setdefault(n, []).append(key)
    assert {n: ks for n, ks in owners.items() if len(ks) > 1} == {}


def test_names_are_the_same_in_another_process():
    """tokenize of dmlq's task objects (pooling's, a packed b's), of qtype names and of the
    public functions: by value, not by id or hash order."""
    keys = ["quantize-blocks-4", "quantize-float8", "matmul-columns", "to_float-bias", "pool-padding", "pool-1d",
            "dynamic-rows-whole"]
    code = ("import json, sys; sys.path.insert(0, 'tests'); import test_dask_graph as t; "
            f"print(json.dumps(t._names({keys!r})))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONHASHSEED="123", PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == _names(keys)


def _tasks(*results):
    """The tasks the scheduler runs for ``results`` (after dask's optimization: fused layers are
    one task; data and aliases are not tasks)."""
    from dask._task_spec import Alias, DataNode

    seen = []

    def scheduler(dsk, keys, **kwargs):
        graph = dict(dsk.__dask_graph__() if hasattr(dsk, "__dask_graph__") else dsk)
        seen.extend(k for k, v in graph.items() if not isinstance(v, (DataNode, Alias))
                    and not str(k).startswith("finalize-"))
        return dask.get(dsk, keys, **kwargs)

    dask.compute(*results, scheduler=scheduler)
    return seen


@pytest.mark.parametrize("key, tasks", [
    ("quantize-columns", 4), ("quantize-axis-1", 4), ("quantize-blocks-4", 4), ("dequantize", 4), ("add", 4),
    ("matmul", 2), ("matmul-columns", 2), ("matmul_integer", 2), ("to_float", 2), ("to_float-bias", 2),
    ("to_float-blocks", 2),
    ("matmul-k-whole", 2 + 1),        # (b's two K chunks merged to a's one)
    ("dynamic", 4 + 3 + 4),           # ranges, parameters + scale + zero point, quantize
    ("dynamic-rows", 4 + 2 * 3 + 4),  # ranges, (parameters + scale + zero point) a row of chunks, quantize
    ("dynamic-rows-whole", 2 * 3 + 2)])  # rows whole in a chunk: parameters from the chunk itself
def test_no_task_beyond_what_the_chunks_need(key, tasks):
    """A task per output chunk (per-tensor, per-axis, blocked NumPy parameters are cut when the
    graph is built: a one-chunk array rechunked added a task per chunk; the K-split matmuls
    sum and requantize (wrap, scale) in one task; a bias is not broadcast in the graph first),
    and dynamic_quantize_linear's parameters in three tasks, not a rechunk and a getitem,
    reshape and astype each."""
    assert len(_tasks(*_results(key))) == tasks


def test_quantize_then_dequantize_fuses_to_a_task_per_chunk():
    y = dmlq.dequantize_linear(dmlq.quantize_linear(X, np.full(8, 0.1, f32), u8(3)), 0.1, u8(3))
    assert len(_tasks(y)) == 4


def test_building_a_graph_computes_nothing():
    calls = []
    with dask.config.set(scheduler=lambda dsk, keys, **kw: calls.append(keys) or dask.get(dsk, keys, **kw)):
        for key in CALLS:
            _results(key)
    assert calls == []


def test_unknown_chunk_sizes_of_a_1d_pooling_x_are_named_in_its_own_shape():
    x = IMG1[IMG1.sum(axis=(1, 2)) >= 0]  # (nan, 2, 8)
    with pytest.raises(ValueError, match=r"quantized_avg_pool: x has unknown chunk sizes \(shape \(nan, 2, 8\)\); "
                                         r"call x\.compute_chunk_sizes\(\) first"):
        dmlq.quantized_avg_pool(x, 0.1, 3, 0.1, 3, 3)
