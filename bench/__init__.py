"""dmlq's benchmark suite (a checkout only: not installed with dmlq).

    timing.py     CUDA-event timing, random inputs, result records (extra_info)
    limits.py     same-run limits: peak formulas, device facts, copy bandwidth
    workloads.py  every group op/dtype/shape, the quick ones marked
    peers.py      dmlq's implementations and the peers (CuPy, torch), prepared to time
    quick.py      ``python -m dmlq bench``: the quick table
    report.py     a committed pytest-benchmark JSON -> the README's table, plots, targets
    test_*.py     the pytest-benchmark tests (``python -m pytest bench``)
"""
