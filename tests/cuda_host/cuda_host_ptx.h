// The host side of cuda/ptx.cuh: DMLQ_PTX statements become calls to a small
// interpreter of the PTX text, with the asm operands passed by reference.
//
// Supported (anything else stops the launch with "unsupported PTX"):
//   {add,sub,mul,div}.rn[.ftz].f32, fma.rn[.ftz].f32     IEEE float32; .ftz flushes; a NaN
//                                                        result is the GPU's 0x7FFFFFFF
//   cvt.f32.f16, cvt.rn[.ftz].f16.f32                    binary16 <-> float32
//   dp4a.{s32,u32}.{s32,u32}
//   mov.u32 d, %dynamic_smem_size | %laneid | %warpid
//   cp.async.{ca,cg}.shared[::cta].global [d], [s], size[, src_size]   deferred
//   cp.async.commit_group, cp.async.wait_group N, cp.async.wait_all
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared[::cta].b16  warp collective
//   mma.sync.aligned.m16n8k{16,32}.row.col.s32.{s8,u8}.{s8,u8}.s32  warp collective
//   wgmma.fence.sync.aligned, wgmma.commit_group.sync.aligned,      warpgroup collectives
//   wgmma.wait_group.sync.aligned N                                 (128 threads, 4 warps
//   wgmma.mma_async.sync.aligned.m64nNk32[.satfinite].s32.{s8,u8}.{s8,u8}  from a multiple of 4)
//       {d0, ..., d(N/2-1)}, a-desc, b-desc, scale-d
//     N = 8, 16, 24, 32, 48, 64, ..., 256 (the ISA's .s32 list); both operands in shared
//     memory through 64-bit descriptors, the same in all 128 threads, K-major with no swizzle
//     or the 128-byte swizzle, base offset 0 (anything else faults); scale-d the immediate 0
//     or 1 (in the text or an "n" operand). D is written at issue; the operands' bytes are
//     recorded then and must be unchanged when wgmma.wait_group retires the group, and a
//     thread may not exit with a wgmma in flight (cuda_host_wgmma.h).
//   fence.proxy.async[.shared::cta]                                 no-op (see below)
// Fragment layouts follow the PTX ISA's tables (see the functions below and cuda_host_wgmma.h).
// Not emulated: wgmma with A in registers, other types and swizzles, predicate registers as
// scale-d, and the async proxy: a generic store to an operand without fence.proxy.async
// before the wgmma is not caught, nor a register read between issue and wait_group.
#pragma once

namespace cuda_host {

struct Operand {
  char cons = 0;                  // r h l f d n
  bool out = false;
  void* ptr = nullptr;            // the lvalue (outputs)
  int size = 0;                   // its bytes
  unsigned long long bits = 0;    // input value
};

template <typename T>
Operand make_operand(const char* c, const T* x, bool out, void* p) {
  static_assert(sizeof(T) <= 8, "asm operands are at most 64 bits");
  Operand o;
  o.cons = c[0];
  o.out = out;
  o.ptr = p;
  o.size = sizeof(T);
  if (x) std::memcpy(&o.bits, x, sizeof(T));  // outputs carry no value in
  return o;
}
template <typename T>
Operand in_op(const char* c, const T& x) { return make_operand(c, &x, false, nullptr); }
template <typename T>
Operand out_op(const char* c, T& x) { return make_operand<T>(c, nullptr, true, &x); }
template <typename T>
Operand inout_op(const char* c, T& x) { return make_operand(c, &x, true, &x); }

// One per DMLQ_PTX statement (a function-local static): the parsed template
// and, for plain ALU instructions whose operands are %0, %1, %2[, %3] in
// order, a fast path that skips the general interpreter.
struct PtxSite {
  enum Fast { none, dp4a, add, sub, mul, div };
  const char* tmpl;
  const void* parsed = nullptr;
  Fast fast = none;
  bool sa = false, sb = false, ftz = false;
};

void ptx_init(PtxSite& site, const char* file, int line);
void ptx(const char* tmpl, std::initializer_list<Operand> outs, std::initializer_list<Operand> ins,
         const char* file, int line);
float flush_subnormal(float f);
float gpu_nan(float f);  // a NaN result as the GPU gives it: 0x7FFFFFFF

inline unsigned dp4a_bits(bool sa, bool sb, unsigned a, unsigned b, unsigned c) {
  for (int j = 0; j < 4; ++j) {
    const unsigned x = (a >> (8 * j)) & 255u, y = (b >> (8 * j)) & 255u;
    const int xi = sa ? static_cast<int>(static_cast<signed char>(x)) : static_cast<int>(x);
    const int yi = sb ? static_cast<int>(static_cast<signed char>(y)) : static_cast<int>(y);
    c += static_cast<unsigned>(xi * yi);
  }
  return c;
}

inline void ptx_at(PtxSite& site, std::initializer_list<Operand> outs,
                   std::initializer_list<Operand> ins, const char* file, int line) {
  if (!site.parsed) ptx_init(site, file, line);
  const Operand* i = ins.begin();
  switch (site.fast) {
    case PtxSite::dp4a: {
      const unsigned r = dp4a_bits(site.sa, site.sb, static_cast<unsigned>(i[0].bits),
                                   static_cast<unsigned>(i[1].bits), static_cast<unsigned>(i[2].bits));
      std::memcpy(outs.begin()->ptr, &r, 4);
      return;
    }
    case PtxSite::add:
    case PtxSite::sub:
    case PtxSite::mul:
    case PtxSite::div: {
      float a, b;
      unsigned ua = static_cast<unsigned>(i[0].bits), ub = static_cast<unsigned>(i[1].bits);
      std::memcpy(&a, &ua, 4);
      std::memcpy(&b, &ub, 4);
      if (site.ftz) { a = flush_subnormal(a); b = flush_subnormal(b); }
      volatile float r = site.fast == PtxSite::add ? a + b
                       : site.fast == PtxSite::sub ? a - b
                       : site.fast == PtxSite::mul ? a * b : a / b;
      float v = gpu_nan(site.ftz ? flush_subnormal(r) : r);
      std::memcpy(outs.begin()->ptr, &v, 4);
      return;
    }
    default:
      ptx(site.tmpl, outs, ins, file, line);
  }
}

}  // namespace cuda_host

#define DMLQ_UNPAREN(...) __VA_ARGS__
#define DMLQ_IN(c, x) ::cuda_host::in_op(c, x)
#define DMLQ_OUT(c, x) ::cuda_host::out_op(c, x)
#define DMLQ_INOUT(c, x) ::cuda_host::inout_op(c, x)
#define DMLQ_PTX(tmpl, outs, ins)                                                      \
  do {                                                                                 \
    static ::cuda_host::PtxSite dmlq_ptx_site_{tmpl};                                  \
    ::cuda_host::ptx_at(dmlq_ptx_site_, {DMLQ_UNPAREN outs}, {DMLQ_UNPAREN ins}, __FILE__, \
                        __LINE__);                                                     \
  } while (0)
#define DMLQ_PTX_MEM(tmpl, outs, ins) DMLQ_PTX(tmpl, outs, ins)
