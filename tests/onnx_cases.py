"""The ONNX backend node test cases shipped in the onnx wheel, read at test time (never copied)."""
from __future__ import annotations

import importlib

import numpy as np

_CASES: dict = {}


def node_cases(ops: tuple, modules: tuple, at_least: int) -> dict:
    """{name: case} of the wheel's node cases whose node is one of ``ops``. The wheel makes a
    case when the module defining it is imported (collect_testcases imports all ~190 of them:
    ~5 s); ``modules`` (onnx.backend.test.case.node.<module>) alone are imported, with
    collect_testcases as the fallback when fewer than ``at_least`` cases come of them."""
    key = (ops, modules)
    if key not in _CASES:
        from onnx.backend.test.case import node

        with np.errstate(all="ignore"):
            try:
                for mod in modules:
                    importlib.import_module(f"onnx.backend.test.case.node.{mod}")
                cases = list(node._NodeTestCases)
            except (ImportError, AttributeError):
                cases = []
            if sum(c.model.graph.node[0].op_type in ops for c in cases if c.model.graph.node) < at_least:
                cases = node.collect_testcases(None)
        _CASES[key] = {c.name: c for c in cases if c.model.graph.node and c.model.graph.node[0].op_type in ops}
    return _CASES[key]


def run_onnx(op, inputs, out_dtype, domain="", opset=13, **attrs):
    """One node on onnxruntime's CPU provider, graph optimizations off, one thread. ``inputs``:
    arrays (None: an omitted optional input); ``out_dtype``: the output's dtype, or a tuple of
    the outputs' dtypes (then every output comes back, as a list); ``opset``: the ai.onnx opset
    (13, which every onnxruntime >= 1.10 takes, at IR version 8; 21 for QLinearMatMul's float16
    scales, at IR version 10); ``domain``: com.microsoft for its contrib ops (opset 1);
    ``attrs``: the node's."""
    import onnxruntime as ort
    from onnx import helper

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    feeds = {n: v for n, v in zip(names, inputs) if n}
    many = isinstance(out_dtype, tuple)
    outs = [f"out{i}" for i in range(len(out_dtype))] if many else ["out"]
    node = helper.make_node(op, names, outs, domain=domain or None, **attrs)
    tp = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, tp(v.dtype), v.shape)
                                           for n, v in feeds.items()],
                              [helper.make_tensor_value_info(o, tp(np.dtype(d)), None)
                               for o, d in zip(outs, out_dtype if many else (out_dtype,))])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8 if opset < 21 else 10)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    got = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got if many else got[0]
