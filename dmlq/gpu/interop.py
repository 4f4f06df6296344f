"""Which objects are CUDA arrays: the one test that dmlq.dispatch (a call's backend) and
dmlq.gpu.capture (whether a call's allocations must outlive it) share."""
from __future__ import annotations

import numpy as np

GPU_DLPACK = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged


def cuda_array(obj) -> bool:
    """True for an object that exports CUDA memory: the CUDA array interface (CuPy, Numba ...)
    or a CUDA DLPack device. Never for a NumPy array; False where asking raises."""
    if isinstance(obj, np.ndarray):
        return False
    try:
        if hasattr(obj, "__cuda_array_interface__"):
            return True
        dev = getattr(obj, "__dlpack_device__", None)
        return dev is not None and dev()[0] in GPU_DLPACK
    except Exception:  # (torch's interface raises for a tensor that requires grad)
        return False
