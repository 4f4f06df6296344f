// Kernels that prove the host harness can fail a test: each one breaks a rule
// (a race, a divergent barrier, an overrun, a too-weak cp.async wait, a write
// through a const pointer) or probes one emulated PTX instruction against the
// PTX ISA's fragment tables, checked in tests/test_host_harness.py.
#include "common.cuh"

// Thread t writes s[t] and, without a barrier, reads s[n - 1 - t].
__global__ void race(int* out, int with_barrier) {
  DMLQ_SHARED(4, int, s, [64]);
  const int t = threadIdx.x;
  s[t] = t;
  if (with_barrier) __syncthreads();
  out[t] = s[blockDim.x - 1 - t];
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void exit_before_barrier(int* out) {
  if (threadIdx.x == 3) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void write_at(int* out, int i) { if (threadIdx.x == 0) out[i] = 7; }

__global__ void read_at(const int* in, int* out, int i) { if (threadIdx.x == 0) out[0] = in[i]; }

__global__ void write_const(const int* in) {
  if (threadIdx.x == 0) const_cast<int*>(in)[0] = 1;
}

__global__ void trap_kernel() { __trap(); }

__global__ void shuffle_xor(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x) * 10, 5);
}

// Two cp.async groups of one 16-byte chunk each; waits with N, then reads both.
template <int N>
__global__ void cp_async_wait_probe(const uint4* src, uint4* out) {
  DMLQ_SHARED(16, uint4, s, [2]);
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(s));
  DMLQ_PTX_MEM("cp.async.cg.shared.global [%0], [%1], 16, %2;", (),
               (DMLQ_IN("r", base), DMLQ_IN("l", __cvta_generic_to_global(src)), DMLQ_IN("r", 16u)));
  DMLQ_PTX_MEM("cp.async.commit_group;", (), ());
  DMLQ_PTX_MEM("cp.async.cg.shared.global [%0], [%1], 16, %2;", (),
               (DMLQ_IN("r", base + 16u), DMLQ_IN("l", __cvta_generic_to_global(src + 1)), DMLQ_IN("r", 8u)));
  DMLQ_PTX_MEM("cp.async.commit_group;", (), ());
  DMLQ_PTX_MEM("cp.async.wait_group %0;", (), (DMLQ_IN("n", N)));
  out[0] = s[0];
  out[1] = s[1];
}

// Four 8x8 b16 matrices (row-major, 16 bytes a row) staged in shared memory;
// every lane stores the 4 registers ldmatrix gives it.
template <bool TRANS>
__global__ void ldmatrix_probe(const uint4* m, unsigned* out) {
  DMLQ_SHARED(16, uint4, s, [32]);
  const int lane = threadIdx.x;
  s[lane] = m[lane];
  __syncwarp();
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&s[lane]));
  unsigned r0, r1, r2, r3;
  if (TRANS)
    DMLQ_PTX_MEM("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];",
                 (DMLQ_OUT("r", r0), DMLQ_OUT("r", r1), DMLQ_OUT("r", r2), DMLQ_OUT("r", r3)),
                 (DMLQ_IN("r", addr)));
  else
    DMLQ_PTX_MEM("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];",
                 (DMLQ_OUT("r", r0), DMLQ_OUT("r", r1), DMLQ_OUT("r", r2), DMLQ_OUT("r", r3)),
                 (DMLQ_IN("r", addr)));
  out[4 * lane] = r0;
  out[4 * lane + 1] = r1;
  out[4 * lane + 2] = r2;
  out[4 * lane + 3] = r3;
}

// ldmatrix.x4 with lane l supplying the address of shared row row_of_lane[l] (16 bytes a row):
// the runner counts each phase's bank conflicts (HostDevice.ldmatrix).
__global__ void ldmatrix_rows(const int* row_of_lane, unsigned* out) {
  DMLQ_SHARED(128, uint4, s, [256]);
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) s[i] = make_uint4(i, i, i, i);
  __syncwarp();
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&s[row_of_lane[lane]]));
  unsigned r0, r1, r2, r3;
  DMLQ_PTX_MEM("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];",
               (DMLQ_OUT("r", r0), DMLQ_OUT("r", r1), DMLQ_OUT("r", r2), DMLQ_OUT("r", r3)),
               (DMLQ_IN("r", addr)));
  out[lane] = r0 ^ r1 ^ r2 ^ r3;
}

// Each lane passes the raw fragment registers it is given and stores d.
__global__ void mma_probe_s8u8(const unsigned* a, const unsigned* b, const int* c, int* d) {
  const int lane = threadIdx.x;
  int acc[4] = {c[4 * lane], c[4 * lane + 1], c[4 * lane + 2], c[4 * lane + 3]};
  const unsigned a0 = a[4 * lane], a1 = a[4 * lane + 1], a2 = a[4 * lane + 2], a3 = a[4 * lane + 3];
  const unsigned b0 = b[2 * lane], b1 = b[2 * lane + 1];
  DMLQ_PTX("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
           "{%8, %9}, {%0, %1, %2, %3};",
           (DMLQ_INOUT("r", acc[0]), DMLQ_INOUT("r", acc[1]), DMLQ_INOUT("r", acc[2]),
            DMLQ_INOUT("r", acc[3])),
           (DMLQ_IN("r", a0), DMLQ_IN("r", a1), DMLQ_IN("r", a2), DMLQ_IN("r", a3),
            DMLQ_IN("r", b0), DMLQ_IN("r", b1)));
  for (int i = 0; i < 4; ++i) d[4 * lane + i] = acc[i];
}

// IEEE float ops through common.cuh, with and without .ftz spelled in PTX.
__global__ void float_ops(const float* x, float* out) {
  const int i = threadIdx.x;
  out[4 * i] = dmlq::ieee_div(x[2 * i], x[2 * i + 1]);
  out[4 * i + 1] = dmlq::ieee_mul(x[2 * i], x[2 * i + 1]);
  float r;
  DMLQ_PTX("mul.rn.ftz.f32 %0, %1, %2;", (DMLQ_OUT("f", r)), (DMLQ_IN("f", x[2 * i]), DMLQ_IN("f", x[2 * i + 1])));
  out[4 * i + 2] = r;
  out[4 * i + 3] = dmlq::to_f32(dmlq::from_f32<float16>(x[2 * i]));
}

// The address of p modulo 256, as the kernel sees it.
__global__ void address_mod(const unsigned char* p, unsigned* out) {
  out[0] = static_cast<unsigned>(reinterpret_cast<unsigned long long>(p) % 256u);
}

// Two warps exchange values through shared memory, then reuse it. Without the
// barrier before the reuse a warp that runs ahead overwrites what the other
// has not read yet.
__global__ void warp_race(int* out, int with_barrier) {
  DMLQ_SHARED(4, int, s, [64]);
  const int t = threadIdx.x;
  s[t] = t;
  __syncthreads();
  const int r = s[(t + 32) % 64];
  __syncwarp();
  if (with_barrier) __syncthreads();
  s[t] = -1;
  __syncthreads();
  out[t] = r;
}

// Out-of-bounds probes (tests/test_host_harness.py): thread 0 of block 0 reads
// or writes at a byte offset from the buffer's start, 16 bytes at once where
// a kernel loads a uint4, or through cp.async.
__global__ void read16_at(const unsigned char* in, uint4* out, long long off) {
  if (threadIdx.x == 0) out[0] = __ldg(reinterpret_cast<const uint4*>(in + off));
}

__global__ void cp_async_at(const unsigned char* in, uint4* out, long long off, unsigned src_size) {
  DMLQ_SHARED(16, uint4, s, [1]);
  if (threadIdx.x == 0) {
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(s));
    DMLQ_PTX_MEM("cp.async.cg.shared.global [%0], [%1], 16, %2;", (),
                 (DMLQ_IN("r", base), DMLQ_IN("l", __cvta_generic_to_global(in + off)), DMLQ_IN("r", src_size)));
    DMLQ_PTX_MEM("cp.async.commit_group;", (), ());
    DMLQ_PTX_MEM("cp.async.wait_group 0;", (), ());
    out[0] = s[0];
  }
}

// A static shared array of its own (one per K), registered when first reached.
template <int N, int K>
__device__ uint4* shared_slot() {
  DMLQ_SHARED(16, uint4, s, [N]);
  return s;
}

// g++ lays these statics out in the reverse of the order their functions are instantiated, so
// this function (never launched) places slot 0 right below slot 1 and slot 2 elsewhere.
template <int N>
__device__ void shared_slot_order() {
  shared_slot<N, 1>();
  shared_slot<N, 0>();
  shared_slot<N, 2>();
}
template __device__ void shared_slot_order<256>();

// Slots 0 and 1 back to back in host memory (adj[0]: 1 when slot 1 follows slot 0, 2 when it
// precedes it, 0 otherwise), registered in the order 0, 2, 1: slot 1's first element is also
// one past slot 0's end, and a cp.async to it must land in slot 1 (the harness once took it for
// slot 0's end, whose window address is slot 2's).
template <int N>
__global__ void shared_back_to_back(const uint4* src, uint4* out, int* adj) {
  uint4* const a = shared_slot<N, 0>();
  uint4* const z = shared_slot<N, 2>();
  uint4* const b = shared_slot<N, 1>();
  if (threadIdx.x == 0) {
    adj[0] = a + N == b ? 1 : b + N == a ? 2 : 0;
    z[0] = make_uint4(0, 0, 0, 0);
    const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(a));
    const unsigned sb = static_cast<unsigned>(__cvta_generic_to_shared(b));
    DMLQ_PTX_MEM("cp.async.cg.shared.global [%0], [%1], 16;", (),
                 (DMLQ_IN("r", sa), DMLQ_IN("l", __cvta_generic_to_global(src))));
    DMLQ_PTX_MEM("cp.async.cg.shared.global [%0], [%1], 16;", (),
                 (DMLQ_IN("r", sb), DMLQ_IN("l", __cvta_generic_to_global(src + 1))));
    DMLQ_PTX_MEM("cp.async.commit_group;", (), ());
    DMLQ_PTX_MEM("cp.async.wait_group 0;", (), ());
    out[0] = a[0];
    out[1] = b[0];
  }
}
