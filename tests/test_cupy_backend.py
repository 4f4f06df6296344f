"""dmlq's CupyBackend and launchers on the cupy stand-in: what only the real
CuPy path showed (issue 24, defects 3 and 4)."""
from __future__ import annotations

import numpy as np
import pytest

from dmlq import reference as R
from dmlq.gpu import elementwise as ew
from dmlq.gpu import plan as plan_module

f32, u8, i8 = np.float32, np.uint8, np.int8


def test_add_table_occupancy_is_asked_after_its_opt_in(cupy_stand_in, rng):
    """Defect 3: the 64 KiB add-table kernel's occupancy was asked before its opt-in
    to more than 48 KiB of dynamic shared memory, so CUDA answered 0 and the grid
    got 1 block per SM instead of 3 (228 KiB per SM / (64 + 1) KiB per block)."""
    cp = cupy_stand_in
    n = 1 << 16  # work for more than 3 blocks per SM
    a, b = rng.integers(0, 256, n, dtype=u8), rng.integers(0, 256, n, dtype=u8)
    params = (f32(0.02), u8(128), f32(0.03), u8(120), f32(0.05), u8(128))
    out = cp.empty(n, u8)
    with plan_module.recording() as plans:
        ew.quantized_add(cp.asarray(a), *params[:2], cp.asarray(b), *params[2:], out, variant="table")
    (main,) = [launch for launch in plans[-1].launches if launch.role == "main"]
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    assert main.shared_mem == ew.TABLE_BYTES and main.grid == (3 * sms,)
    np.testing.assert_array_equal(out.get(), R.quantized_add(a, *params[:2], b, *params[2:], np.empty(n, u8)))


def test_host_device_occupancy_follows_shared_memory(host_device):
    """Defect 3: HostDevice.resident_blocks answered 2 whatever the block; now
    CUDA's count for the block (capped at 2 to keep host grids small)."""
    k = "quantize_contig<float, int8>"
    assert host_device.resident_blocks("elementwise.cu", k, 256, 0) == 2
    assert host_device.resident_blocks("elementwise.cu", k, 256, 120 * 1024) == 1
    from cuda_host.harness import KernelFault

    with pytest.raises(KernelFault, match="fits on no SM"):
        host_device.resident_blocks("elementwise.cu", k, 256, 228 * 1024)


def test_host_scale_arrays_reach_the_kernels_as_device_arrays(cupy_stand_in, rng):
    """Defect 4: a NumPy scale or zero point given to the backend went to the
    kernel where it takes a pointer: the harness took the host address as a
    device pointer, CuPy 14 packs a 1-element NumPy array by value (4 bytes
    for an 8-byte pointer) and refuses a larger one. Now copied to the device."""
    from dmlq.gpu import avgpool, qmm

    cp = cupy_stand_in
    a = rng.integers(0, 256, (5, 40), dtype=u8)
    b = rng.integers(-128, 128, (40, 9), dtype=i8)
    params = (np.float32([0.02]), np.uint8([3]), rng.uniform(0.01, 0.1, 9).astype(f32), None, np.float32([0.5]),
              np.int8([1]))
    want = R.quantized_matmul(a, *params[:2], b, *params[2:], np.empty((5, 9), i8))
    out = cp.empty((5, 9), i8)
    qmm.quantized_matmul(cp.asarray(a), *params[:2], cp.asarray(b), *params[2:], out)
    np.testing.assert_array_equal(out.get(), want)
    img = rng.integers(0, 256, (1, 3, 6, 6), dtype=u8)
    pool = ((2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False)
    scales = (rng.uniform(0.1, 1, 3).astype(f32), np.uint8([4]), np.float32([0.3]), np.uint8([9]))
    want = np.empty((1, 3, 3, 3), u8)
    R.quantized_avg_pool(img, *scales, want, *pool)
    out = cp.empty((1, 3, 3, 3), u8)
    avgpool.quantized_avg_pool(cp.asarray(img), *scales, out, *pool)
    np.testing.assert_array_equal(out.get(), want)


# The backend's and the loader's caches (opt-ins, occupancy answers, modules,
# functions) are keyed by dmlq.keys' rule: a cached answer equals a fresh one.
_SOURCE = "elementwise.cu"
_THREADS = (128, 256, 1024, np.int32(256), 2048)
_SMEM = (0, 40 * 1024, 50 * 1024, 64 * 1024, 100 * 1024, np.int64(100 * 1024), 200 * 1024, 228 * 1024)


def _ask(cp, ordinal, name, threads, smem):
    """What the backend answers for one block: blocks per SM and whether the
    kernel it hands out may take ``smem`` bytes (the driver's launch check), or
    the exception."""
    from dmlq.gpu import device

    with cp.cuda.Device(ordinal):
        try:
            blocks = device.default.resident_blocks(_SOURCE, name, threads, smem)
            fn = device.default.kernel(_SOURCE, name, smem)
            return blocks, fn.max_dynamic_shared_size_bytes >= smem
        except Exception as e:  # noqa: BLE001 - the exception is the answer compared
            return type(e), str(e)


def test_cached_opt_ins_and_occupancy_equal_fresh_ones(cupy_stand_in):
    """A sequence of blocks asked of the CuPy backend (device, kernel, threads,
    dynamic shared memory; equal values of other types among them): each answer,
    made with whatever the earlier ones left in the caches, equals the answer of
    a process that asks only that block. (Before: the opt-in was remembered per
    kernel, not per size, so a kernel opted in to 50 KiB kept that limit when a
    later block needed 100 KiB: occupancy 1 instead of 2 and a launch the driver
    refuses.)"""
    import cupy_stand_in as S
    from dmlq.gpu import loader

    cp = cupy_stand_in
    names = loader.registry()[_SOURCE][:2]
    rng = np.random.default_rng(24)  # seeded sequences (Hypothesis walks sys.modules, which the stand-in holds)
    sequences = [[(0, names[0], 256, 50 * 1024), (0, names[0], 256, 100 * 1024)]]
    for _ in range(40):
        sequences.append([(int(rng.integers(2)), names[rng.integers(2)], _THREADS[rng.integers(len(_THREADS))],
                           _SMEM[rng.integers(len(_SMEM))]) for _ in range(rng.integers(1, 6))])
    for blocks in sequences:
        S.forget_dmlq_state()
        cached = [_ask(cp, *b) for b in blocks]
        for b, answer in zip(blocks, cached):
            S.forget_dmlq_state()
            assert _ask(cp, *b) == answer, (blocks, b)


def test_which_allocators_are_stream_ordered():
    """CuPy's stream-ordered allocators (cudaMallocAsync: an allocation in a capture is the graph's
    own memory node) are left as they are; any other is held. Read from the installed CuPy (no
    device needed); a MemoryAsyncPool itself needs a device, so its bound malloc is checked on a
    GPU only."""
    cupy = pytest.importorskip("cupy")
    if getattr(cupy, "__stand_in__", False):
        pytest.skip("the installed CuPy's allocators")
    from dmlq.gpu import capture

    assert capture._stream_ordered(cupy, cupy.cuda.malloc_async)
    assert not capture._stream_ordered(cupy, cupy.get_default_memory_pool().malloc)
    assert not capture._stream_ordered(cupy, None)
    try:
        pool = cupy.cuda.MemoryAsyncPool()
    except Exception:  # (no device)
        return
    assert capture._stream_ordered(cupy, pool.malloc)


def test_which_arguments_make_a_call_ask_about_a_capture():
    """dmlq.gpu.capture asks whether a stream captures only for calls with a CUDA array: CuPy's,
    a Packed of one, any object with the CUDA array interface or a CUDA DLPack device (as the
    backend's own test, dmlq.gpu.interop). Not for NumPy, lists, Packed NumPy bytes, and not for
    torch tensors (dmlq.torch runs their calls in its own scope): torch's interface raised for a
    CUDA tensor that requires grad, which failed every call on an nn.Parameter."""
    from dmlq.gpu import capture, interop

    class Interface:
        __cuda_array_interface__ = {"shape": (1,), "typestr": "|u1", "data": (0, False), "version": 3}

    class DLPackOnly:
        def __dlpack_device__(self):
            return (2, 0)

    class Refusing:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")

    assert capture._device_array([np.zeros(3), None, 1.5, [1, 2]]) is False
    assert capture._device_array([dmlq_pack_of(np.zeros(4, np.uint8))]) is False
    assert capture._device_array([Interface()]) and capture._device_array([DLPackOnly()])
    assert capture._device_array([dmlq_pack_of(Interface())])
    assert not interop.cuda_array(Refusing()) and not capture._device_array([Refusing()])
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        w = torch.empty(4, 8, device="cuda", requires_grad=True)  # (a CUDA nn.Parameter's stand-in)
    assert capture._device_array([w]) is False


def dmlq_pack_of(data):
    import dmlq

    return dmlq.Packed(data, (8,), "int4")


def test_operands_not_aligned_to_their_itemsize_are_refused_by_name(cupy_stand_in):
    """A view of bytes at an odd offset: the matmul epilogue stored whole int32s to it (a fault,
    which ends a process's CUDA context); the element-wise kernels said only "array data is not
    aligned". Every path refuses such an operand or out by name before any launch."""
    import dmlq
    from dmlq import MatrixMultiplyIntegerDesc, TensorDesc, compile_operator

    cp = cupy_stand_in
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (40, 64)).astype(u8), rng.integers(-128, 128, (64, 24)).astype(i8)
    raw = cp.zeros(40 * 24 * 4 + 16, u8)
    out = raw[3:3 + 40 * 24 * 4].view(np.int32).reshape(40, 24)
    with pytest.raises(ValueError, match=r"^matmul_integer: out's data is not aligned to its itemsize \(4 bytes; "
                                         r"its address is 3 past"):
        dmlq.matmul_integer(cp.asarray(a), cp.asarray(b), out=out)
    x = cp.zeros(4 * 100 + 16, u8)[1:401].view(f32)
    with pytest.raises(ValueError, match=r"^quantize_linear: x's data is not aligned .* pass x\.copy\(\)"):
        dmlq.quantize_linear(x, 0.5)
    with pytest.raises(ValueError, match=r"^quantize_linear: x's data is not aligned"):
        dmlq.quantize_linear(x, 0.5, dtype="int4")
    op = compile_operator(MatrixMultiplyIntegerDesc(a_tensor=TensorDesc("UINT8", (1, 1, 40, 64)),
                                                    b_tensor=TensorDesc("INT8", (1, 1, 64, 24)),
                                                    output_tensor=TensorDesc("INT32", (1, 1, 40, 24))))
    with pytest.raises(ValueError, match=r"OutputTensor's data is not aligned"):
        op(cp.asarray(a).reshape(1, 1, 40, 64), cp.asarray(b).reshape(1, 1, 64, 24), out=out.reshape(1, 1, 40, 24))
    np.testing.assert_array_equal(dmlq.matmul_integer(cp.asarray(a), cp.asarray(b)).get(), dmlq.matmul_integer(a, b))
