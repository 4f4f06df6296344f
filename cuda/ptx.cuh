// Inline PTX and shared-memory declarations, written so that one source serves the
// GPU and the host harness (tests/cuda_host).
//
// Every asm statement in dmlq is DMLQ_PTX (pure: may be reordered, CSE'd) or
// DMLQ_PTX_MEM (volatile, memory clobber: cp.async, ldmatrix), with operands
// wrapped in DMLQ_IN / DMLQ_OUT / DMLQ_INOUT(constraint, lvalue):
//
//   DMLQ_PTX("div.rn.f32 %0, %1, %2;", (DMLQ_OUT("f", r)), (DMLQ_IN("f", a), DMLQ_IN("f", b)));
//
// On the GPU these expand to ordinary asm statements. The host harness defines
// the same macros first and routes the template string and operands to its PTX
// interpreter, so the host executes the very instruction text the GPU gets
// (a dropped .trans or a changed wait_group count changes the host result too).
#pragma once

#ifndef DMLQ_PTX
#define DMLQ_UNPAREN(...) __VA_ARGS__
#define DMLQ_IN(c, x) c(x)
#define DMLQ_OUT(c, x) "=" c(x)
#define DMLQ_INOUT(c, x) "+" c(x)
#define DMLQ_PTX(tmpl, outs, ins) asm(tmpl : DMLQ_UNPAREN outs : DMLQ_UNPAREN ins)
#define DMLQ_PTX_MEM(tmpl, outs, ins) \
  asm volatile(tmpl : DMLQ_UNPAREN outs : DMLQ_UNPAREN ins : "memory")
#endif

// An int the compiler must take as it is (an empty asm that "changes" it): a value computed
// once that ptxas would otherwise recompute from its inputs inside a loop when registers run
// short (rematerialization). No instruction; the same statement on the host harness.
#ifndef DMLQ_OPAQUE
#define DMLQ_OPAQUE(x) asm volatile("" : "+r"(x))
#endif

// A block-wide shared array, `type name dims` (dims like [8][32]), aligned to
// `align` bytes; the host harness poisons it at the start of every block.
#ifndef DMLQ_SHARED
#define DMLQ_SHARED(align, type, name, dims) __shared__ __align__(align) type name dims
#endif

// The block's dynamic shared memory as `type name[]`, aligned to `align` bytes.
#ifndef DMLQ_DYNAMIC_SHARED
#define DMLQ_DYNAMIC_SHARED(align, type, name) extern __shared__ __align__(align) type name[]
#endif
