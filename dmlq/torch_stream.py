"""CuPy work on torch's CUDA stream: the scope dmlq.torch's CUDA calls and ``dmlq.pack`` of a
CUDA tensor run in (CuPy's device and current stream made torch's), and torch's caching
allocator as CuPy's while that stream captures a CUDA graph (dmlq.gpu.capture)."""
import contextlib

import torch

from .gpu import capture


@contextlib.contextmanager
def cuda_scope(cupy, index: int):
    """CuPy's device and current stream made torch's (device ``index``, torch's current stream
    there, as ``cupy.cuda.ExternalStream``), and while that stream captures a graph
    (``torch.cuda.graph``) CuPy's allocations from torch's allocator (:func:`torch_allocator`)."""
    stream = torch.cuda.current_stream(index)
    with contextlib.ExitStack() as scope:
        scope.enter_context(cupy.cuda.Device(index))
        scope.enter_context(cupy.cuda.ExternalStream(stream.cuda_stream, index))
        if capture.capturing(cupy):  # temporaries from the graph's pool (dmlq.gpu.capture)
            scope.enter_context(capture.allocations(cupy, torch_allocator(cupy, torch.device("cuda", index))))
        yield


def torch_allocator(cupy, device):
    """CuPy's allocator (``size -> MemoryPointer``) on torch's caching allocator: a uint8 tensor
    of ``size`` bytes on ``device`` (torch's current stream), held by the memory CuPy gets. In a
    ``torch.cuda.graph`` capture torch serves it from the graph's private pool, kept for the
    graph's life (dmlq.gpu.capture)."""
    def allocate(size):
        t = torch.empty(size, dtype=torch.uint8, device=device)
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(t.data_ptr(), size, t, device.index), 0)
    return allocate
