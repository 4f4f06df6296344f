// The host harness runtime: fibers, the block scheduler, shared memory, warp
// collectives, the PTX interpreter and the runner's request loop. Linked with
// one generated translation unit per kernel source (see harness.py), which
// provides cuda_host_kernels[].
#include "cuda_host.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdarg>
#include <deque>
#include <unordered_map>

#include "cuda_host_kernel_table.h"


// ------------------------------------------------------------------ context switch (x86-64 SysV)
// cuda_host_switch(&save, to): pushes the callee-saved registers, stores rsp in
// *save, loads `to` and pops the other context's registers.
extern "C" void cuda_host_switch(void** save, void* to);
#if defined(__x86_64__)
asm(R"(
.text
.globl cuda_host_switch
.type cuda_host_switch,@function
cuda_host_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cuda_host_switch, .-cuda_host_switch
.section .note.GNU-stack,"",@progbits
.text
)");
#else
#error "the host harness's fiber switch is written for x86-64"
#endif

namespace cuda_host {

namespace {
Machine g_machine;
#ifdef CUDA_HOST_ASAN
const void* g_main_bottom = nullptr;
size_t g_main_size = 0;
#endif
constexpr size_t kStackSize = 256 * 1024;
}  // namespace

Machine& machine() { return g_machine; }

// The current thread is done (finished or faulted): back to the scheduler for good.
[[noreturn]] static void leave_fiber() {
  Machine& m = machine();
  Thread& t = self();
  t.state = State::done;
#ifdef CUDA_HOST_ASAN
  __sanitizer_start_switch_fiber(nullptr, g_main_bottom, g_main_size);
#endif
  cuda_host_switch(&t.sp, m.sched_sp);
  std::abort();  // a finished fiber is never resumed
}

void fault(const char* fmt, ...) {
  Machine& m = machine();
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (!m.failed) {
    m.failed = true;
    char where[160] = "";
    if (m.current >= 0) {
      const dim3 t = m.threads[m.current].idx;
      std::snprintf(where, sizeof where, " [block (%u,%u,%u) thread (%u,%u,%u)]", m.block_idx.x,
                    m.block_idx.y, m.block_idx.z, t.x, t.y, t.z);
    }
    m.error = std::string(buf) + where;
  }
  if (m.current >= 0) leave_fiber();
  std::fprintf(stderr, "cuda_host: %s\n", m.error.c_str());
  std::abort();
}

// ------------------------------------------------------------------ fibers and the scheduler

static void wgmma_thread_exit();
static void wgmma_block_start(unsigned nthreads);

static void fiber_entry() {
  Machine& m = machine();
#ifdef CUDA_HOST_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_main_bottom, &g_main_size);
#endif
  m.body(m.body_arg);
  wgmma_thread_exit();  // a thread may not end with wgmma groups in flight
  leave_fiber();
}

static void* fresh_stack(Thread& t) {
  if (!t.stack) {
    t.stack = static_cast<char*>(std::aligned_alloc(64, kStackSize));
    t.stack_size = kStackSize;
  }
#ifdef CUDA_HOST_ASAN
  __asan_unpoison_memory_region(t.stack, t.stack_size);  // frames of an abandoned run
#endif
  uintptr_t top = (reinterpret_cast<uintptr_t>(t.stack) + t.stack_size) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                                        // fake return address of fiber_entry
  *--sp = reinterpret_cast<void*>(&fiber_entry);          // popped by `ret`
  for (int i = 0; i < 6; ++i) *--sp = nullptr;            // rbp rbx r12-r15
  return sp;
}

static void resume(Thread& t) {
  Machine& m = machine();
#ifdef CUDA_HOST_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, t.stack, t.stack_size);
#endif
  cuda_host_switch(&m.sched_sp, t.sp);
#ifdef CUDA_HOST_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void yield(State s, const char* file, int line) {
  Machine& m = machine();
  Thread& t = self();
  t.state = s;
  t.site_file = file;
  t.site_line = line;
#ifdef CUDA_HOST_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, g_main_bottom, g_main_size);
#endif
  cuda_host_switch(&t.sp, m.sched_sp);
#ifdef CUDA_HOST_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

static void land_all_pending_discard(Thread& t);
static int collective_group(const Thread& t);

static bool run_block() {
  Machine& m = machine();
  const unsigned n = m.nthreads;
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = m.threads[i];
    t.sp = fresh_stack(t);
    t.state = State::run;
    t.call = nullptr;
    t.site_file = nullptr;
    t.site_line = 0;
    t.idx = dim3(i % m.block.x, (i / m.block.x) % m.block.y, i / (m.block.x * m.block.y));
    land_all_pending_discard(t);
  }
  wgmma_block_start(n);
  const bool reverse = m.order & 1, warp_major = m.order & 2;
  const unsigned nwarps = (n + 31) / 32;
  for (;;) {
    if (!warp_major) {
      // Thread-major: every thread to its next stop, in turn (warps in lock step).
      for (unsigned k = 0; k < n; ++k) {
        const unsigned i = reverse ? n - 1 - k : k;
        Thread& t = m.threads[i];
        if (t.state != State::run) continue;
        m.current = static_cast<int>(i);
        resume(t);
        m.current = -1;
        if (m.failed) return false;
      }
    } else {
      // Warp-major: one warp runs through its warp collectives to a block
      // barrier or its end before the next warp starts, so a warp that
      // reuses shared memory without a barrier overtakes the others.
      for (unsigned kw = 0; kw < nwarps; ++kw) {
        const unsigned w = reverse ? nwarps - 1 - kw : kw;
        const unsigned lo = 32 * w, hi = std::min(n, lo + 32);
        for (bool moved = true; moved;) {
          moved = false;
          for (unsigned i = lo; i < hi; ++i) {
            Thread& t = m.threads[i];
            if (t.state != State::run) continue;
            m.current = static_cast<int>(i);
            resume(t);
            m.current = -1;
            moved = true;
            if (m.failed) return false;
          }
        }
      }
    }
    unsigned done = 0, at_bar = 0, running = 0;
    for (unsigned i = 0; i < n; ++i) {
      done += m.threads[i].state == State::done;
      at_bar += m.threads[i].state == State::barrier;
      running += m.threads[i].state == State::run;
    }
    if (done == n) return true;
    if (running) continue;
    if (at_bar && at_bar + done == n) {
      const Thread* first = nullptr;
      for (unsigned i = 0; i < n; ++i) {
        const Thread& t = m.threads[i];
        if (t.state != State::barrier) continue;
        if (!first) first = &t;
        if (t.site_line != first->site_line || std::strcmp(t.site_file, first->site_file) != 0)
          fault("divergent __syncthreads(): threads wait at %s:%d and at %s:%d", first->site_file,
                first->site_line, t.site_file, t.site_line);
      }
      if (done)
        fault("__syncthreads() at %s:%d is reached by %u threads while %u have exited "
              "(the block would hang or misbehave on a GPU)",
              first->site_file, first->site_line, at_bar, done);
      for (unsigned i = 0; i < n; ++i) m.threads[i].state = State::run;
      continue;
    }
    // Nothing can move: describe the first stuck warp or barrier.
    for (unsigned i = 0; i < n; ++i) {
      const Thread& t = m.threads[i];
      if (t.state == State::warp && collective_group(t) > 32)
        fault("warpgroup collective (wgmma) at %s:%d (thread %u) waits for threads %u..%u of its "
              "warpgroup, some of which exited, sit at another instruction or are not in the block "
              "(all 128 threads of 4 consecutive warps, the first a multiple of 4, must execute it)",
              t.site_file, t.site_line, i, i & ~127u, (i & ~127u) + 127u);
      if (t.state == State::warp)
        fault("warp collective at %s:%d (thread %u) waits for lanes that exited or sit at "
              "another instruction",
              t.site_file, t.site_line, i);
      if (t.state == State::barrier)
        fault("__syncthreads() at %s:%d (thread %u) waits while other threads wait in warp "
              "collectives",
              t.site_file, t.site_line, i);
    }
    fault("scheduler stalled");
  }
}

// ------------------------------------------------------------------ shared memory

namespace {
struct StaticShared {
  unsigned char* p;
  size_t bytes;
  unsigned base;  // its window address
  long serial;    // block it was last poisoned for
};
std::vector<StaticShared> g_static;
}  // namespace

void shared_array(void* p, size_t bytes) {
  Machine& m = machine();
  for (StaticShared& s : g_static)
    if (s.p == p) {
      if (s.serial != m.block_serial) {
        std::memset(s.p, m.poison, s.bytes);
        s.serial = m.block_serial;
      }
      return;
    }
  // Window slots keep the array's alignment up to 1024 bytes (wgmma's 128-byte swizzle reads
  // address bits 4-9); the first starts kStaticSkew above kStaticBase, so that the low 18 bits of
  // a static address (all a wgmma matrix descriptor carries) differ from a dynamic one's.
  unsigned base = kStaticBase + kStaticSkew;
  if (!g_static.empty()) {
    const StaticShared& l = g_static.back();
    base = l.base + static_cast<unsigned>(l.bytes);
  }
  const uintptr_t host = reinterpret_cast<uintptr_t>(p);
  const unsigned align = std::max(128u, std::min(1024u, static_cast<unsigned>(host & (~host + 1))));
  base = (base + align - 1) & ~(align - 1);
  std::memset(p, m.poison, bytes);
  g_static.push_back({static_cast<unsigned char*>(p), bytes, base, m.block_serial});
}

// The array holding p, else the one p is just past the end of: static arrays can lie back to back
// in host memory, and the first element of one is then also one past the end of another (taking
// the first match sent a cp.async into the wrong kernel's array once kernels had run in some orders).
unsigned to_shared(const void* p) {
  Machine& m = machine();
  const unsigned char* c = static_cast<const unsigned char*>(p);
  for (const bool end : {false, true}) {  // inside an array first, then one past its end
    auto at = [&](const unsigned char* a, size_t bytes) {
      return c >= a && (static_cast<size_t>(c - a) < bytes || (end && static_cast<size_t>(c - a) == bytes));
    };
    if (m.dyn && at(m.dyn, m.dynamic_smem)) return kDynBase + static_cast<unsigned>(c - m.dyn);
    for (const StaticShared& s : g_static)
      if (at(s.p, s.bytes)) return s.base + static_cast<unsigned>(c - s.p);
  }
  fault("__cvta_generic_to_shared of %p, which is not shared memory", p);
}

unsigned char* from_shared(unsigned addr, unsigned bytes, const char* what) {
  Machine& m = machine();
  if (addr >= kStaticBase) {
    for (const StaticShared& s : g_static)
      if (addr >= s.base && static_cast<size_t>(addr - s.base) + bytes <= s.bytes)
        return s.p + (addr - s.base);
  } else if (static_cast<size_t>(addr - kDynBase) + bytes <= m.dynamic_smem) {
    return m.dyn + (addr - kDynBase);
  }
  fault("%s: shared address 0x%x (+%u bytes) is outside the block's shared memory "
        "(%u dynamic bytes)", what, addr, bytes, m.dynamic_smem);
}

static void poison_shared() {
  Machine& m = machine();
  ++m.block_serial;  // static arrays re-poison when the block reaches them
  if (m.dyn) std::memset(m.dyn, m.poison, m.dynamic_smem);
}

// ------------------------------------------------------------------ warp collectives

struct ParsedPtx;

struct OpList {
  Operand* v;  // the statement's operands (wgmma's accumulators can be 128 of them)
  int n = 0;
  Operand& at(int i) {
    if (i < 0 || i >= n) fault("PTX operand %%%d of %d", i, n);
    return v[i];
  }
  size_t size() const { return static_cast<size_t>(n); }
  Operand& operator[](int i) { return v[i]; }
};


struct LaneCall {
  const void* key;  // identifies the instruction (template pointer, or a shuffle kind)
  int group = 32;   // threads that rendezvous: a warp, or a warpgroup (128) for wgmma
  const ParsedPtx* ptx = nullptr;
  OpList* ops = nullptr;
  // shuffles and votes
  unsigned long long value = 0;
  int kind = 0, arg = 0, width = 32;
  unsigned long long result = 0;
};

using WarpExec = void (*)(LaneCall** lanes, int count);

static int collective_group(const Thread& t) { return t.call ? t.call->group : 32; }

// Rendezvous of the current thread's warp (or warpgroup: c.group = 128) at one
// instruction. The lane that completes the group runs `exec` over every lane's call.
static void collective(LaneCall& c, unsigned mask, WarpExec exec, const char* file, int line) {
  Machine& m = machine();
  const int cur = m.current;
  const int w0 = cur & ~(c.group - 1);
  const int w1 = std::min<int>(w0 + c.group, static_cast<int>(m.nthreads));
  const unsigned lanes_mask = (w1 - w0 >= 32) ? 0xffffffffu : ((1u << (w1 - w0)) - 1u);
  if ((mask & lanes_mask) != lanes_mask)
    fault("%s:%d: warp collective with mask 0x%08x; the host harness supports full-warp masks only",
          file, line, mask);
  Thread& me = self();
  me.call = &c;
  bool all = true;
  for (int l = w0; l < w1; ++l)
    if (l != cur && m.threads[l].state != State::warp) all = false;
  if (!all) {
    yield(State::warp, file, line);
    return;  // the completing lane has written this lane's results
  }
  LaneCall* calls[128];
  for (int l = w0; l < w1; ++l) {
    LaneCall* lc = m.threads[l].call;
    if (lc->key != c.key)
      fault("%s:%d: threads %d and %d of a %s execute different collectives (divergence)", file,
            line, cur, l, c.group == 32 ? "warp" : "warpgroup");
    calls[l - w0] = lc;
  }
  exec(calls, w1 - w0);
  for (int l = w0; l < w1; ++l) {
    m.threads[l].call = nullptr;
    if (l != cur) m.threads[l].state = State::run;
  }
}

void syncthreads(const char* file, int line) { yield(State::barrier, file, line); }

static void exec_nothing(LaneCall**, int) {}

void syncwarp(unsigned mask, const char* file, int line) {
  static const char key = 0;
  LaneCall c;
  c.key = &key;
  collective(c, mask, exec_nothing, file, line);
}

static void exec_shfl(LaneCall** lanes, int count) {
  for (int l = 0; l < count; ++l) {
    LaneCall& c = *lanes[l];
    const int w = c.width;
    const int base = l & ~(w - 1);
    int src = l;
    switch (c.kind) {
      case 0: src = base + (c.arg & (w - 1)); break;             // __shfl_sync
      case 1: src = l ^ c.arg; if (src >= base + w) src = l; break;  // xor
      case 2: src = l + c.arg; if (src >= base + w) src = l; break;  // down
      case 3: src = l - c.arg; if (src < base) src = l; break;       // up
    }
    if (src >= count) src = l;
    c.result = lanes[src]->value;
  }
}

unsigned long long shfl(unsigned mask, unsigned long long v, int kind, int arg, int width,
                        const char* file, int line) {
  static const char keys[4] = {};
  if (width <= 0 || width > 32 || (width & (width - 1)))
    fault("%s:%d: shuffle width %d is not a power of two <= 32", file, line, width);
  LaneCall c;
  c.key = &keys[kind];
  c.value = v;
  c.kind = kind;
  c.arg = arg;
  c.width = width;
  collective(c, mask, exec_shfl, file, line);
  return c.result;
}

static void exec_vote(LaneCall** lanes, int count) {
  unsigned ballot = 0;
  for (int l = 0; l < count; ++l) ballot |= (lanes[l]->value ? 1u : 0u) << l;
  const unsigned full = count == 32 ? 0xffffffffu : ((1u << count) - 1u);
  for (int l = 0; l < count; ++l) {
    LaneCall& c = *lanes[l];
    c.result = c.kind == 0 ? ballot : c.kind == 1 ? (ballot != 0) : (ballot == full);
  }
}

unsigned vote(unsigned mask, int pred, int kind, const char* file, int line) {
  static const char keys[3] = {};
  LaneCall c;
  c.key = &keys[kind];
  c.value = pred != 0;
  c.kind = kind;
  collective(c, mask, exec_vote, file, line);
  return static_cast<unsigned>(c.result);
}

void trap(const char* file, int line) { fault("__trap() at %s:%d", file, line); }

// ------------------------------------------------------------------ the PTX interpreter

struct PtxAtom {
  enum Kind { reg, special, imm, mem } kind = reg;
  int index = -1;          // operand number for reg / mem
  std::string name;        // special register
  long long value = 0;     // immediate, or memory offset
};

enum class Op { arith, cvt, dp4a, mov, cp_async, ldmatrix, mma, wgmma, fence, other };

struct ParsedPtx {
  Op op = Op::other;
  std::string text;
  std::vector<std::string> mods;          // mnemonic split at '.'
  std::vector<std::vector<PtxAtom>> args;  // each argument: one atom or a {vector}
  bool has(const char* m) const {
    for (const auto& s : mods)
      if (s == m) return true;
    return false;
  }
};

static std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\n"), b = s.find_last_not_of(" \t\n;");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

static PtxAtom parse_atom(const std::string& raw, const char* tmpl) {
  const std::string s = trim(raw);
  PtxAtom a;
  if (s.empty()) fault("PTX '%s': empty operand", tmpl);
  if (s[0] == '[') {
    const size_t close = s.find(']');
    std::string inner = trim(s.substr(1, close - 1));
    a.kind = PtxAtom::mem;
    size_t plus = inner.find('+');
    if (plus != std::string::npos) {
      a.value = std::stoll(trim(inner.substr(plus + 1)), nullptr, 0);
      inner = trim(inner.substr(0, plus));
    }
    if (inner.size() < 2 || inner[0] != '%') fault("PTX '%s': address '%s' is not an operand", tmpl, s.c_str());
    a.index = std::stoi(inner.substr(1));
    return a;
  }
  if (s[0] == '%') {
    if (s.size() > 2 && s[1] == '%') {
      a.kind = PtxAtom::special;
      a.name = s.substr(2);
    } else {
      a.kind = PtxAtom::reg;
      a.index = std::stoi(s.substr(1));
    }
    return a;
  }
  a.kind = PtxAtom::imm;
  a.value = std::stoll(s, nullptr, 0);
  return a;
}

static const ParsedPtx& parse(const char* tmpl) {
  static std::unordered_map<const char*, ParsedPtx> cache;
  auto it = cache.find(tmpl);
  if (it != cache.end()) return it->second;
  ParsedPtx p;
  p.text = tmpl;
  std::string s = trim(tmpl);
  const size_t sp = s.find_first_of(" \t");
  const std::string mnem = sp == std::string::npos ? s : s.substr(0, sp);
  const std::string rest = sp == std::string::npos ? std::string() : s.substr(sp + 1);
  size_t start = 0;
  for (size_t i = 0; i <= mnem.size(); ++i)
    if (i == mnem.size() || mnem[i] == '.') {
      p.mods.push_back(mnem.substr(start, i - start));
      start = i + 1;
    }
  // Arguments: split at top-level commas; {a, b} groups become one argument.
  int depth = 0;
  std::string cur;
  std::vector<std::string> parts;
  for (char ch : rest) {
    if (ch == '{' || ch == '[') ++depth;
    if (ch == '}' || ch == ']') --depth;
    if (ch == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!trim(cur).empty()) parts.push_back(cur);
  for (const std::string& part : parts) {
    const std::string t = trim(part);
    std::vector<PtxAtom> arg;
    if (!t.empty() && t[0] == '{') {
      const std::string inner = t.substr(1, t.find('}') - 1);
      size_t b = 0;
      for (size_t i = 0; i <= inner.size(); ++i)
        if (i == inner.size() || inner[i] == ',') {
          arg.push_back(parse_atom(inner.substr(b, i - b), tmpl));
          b = i + 1;
        }
    } else {
      arg.push_back(parse_atom(t, tmpl));
    }
    p.args.push_back(arg);
  }
  const std::string& m0 = p.mods.at(0);
  if (m0 == "add" || m0 == "sub" || m0 == "mul" || m0 == "div" || m0 == "fma") p.op = Op::arith;
  else if (m0 == "cvt") p.op = Op::cvt;
  else if (m0 == "dp4a") p.op = Op::dp4a;
  else if (m0 == "mov") p.op = Op::mov;
  else if (m0 == "cp" && p.mods.size() > 2 && p.mods[1] == "async") p.op = Op::cp_async;
  else if (m0 == "ldmatrix") p.op = Op::ldmatrix;
  else if (m0 == "mma") p.op = Op::mma;
  else if (m0 == "wgmma") p.op = Op::wgmma;
  else if (m0 == "fence") p.op = Op::fence;
  return cache.emplace(tmpl, std::move(p)).first->second;
}

// A direct-mapped front for parse(): the template pointer identifies the call site.
static const ParsedPtx& lookup(const char* tmpl) {
  static const char* keys[256];
  static const ParsedPtx* vals[256];
  const size_t h = (reinterpret_cast<uintptr_t>(tmpl) >> 3) & 255u;
  if (keys[h] != tmpl) {
    vals[h] = &parse(tmpl);
    keys[h] = tmpl;
  }
  return *vals[h];
}

namespace {

struct Ctx {
  const ParsedPtx& p;
  OpList& ops;
  const char* file;
  int line;

  const Operand& op(const PtxAtom& a) const {
    if (a.index < 0 || a.index >= static_cast<int>(ops.size()))
      fault("%s:%d: PTX '%s' names operand %%%d of %zu", file, line, p.text.c_str(), a.index,
            ops.size());
    return ops[a.index];
  }
  unsigned long long in(size_t arg, size_t k = 0) const {
    const PtxAtom& a = p.args.at(arg).at(k);
    if (a.kind == PtxAtom::imm) return static_cast<unsigned long long>(a.value);
    if (a.kind == PtxAtom::special) return special(a.name);
    return op(a).bits;
  }
  unsigned long long special(const std::string& name) const {
    Machine& m = machine();
    if (name == "dynamic_smem_size") return m.dynamic_smem;
    if (name == "laneid") return static_cast<unsigned>(m.current) & 31u;
    if (name == "warpid") return static_cast<unsigned>(m.current) >> 5;
    fault("%s:%d: special register %%%s is not emulated", file, line, name.c_str());
  }
  void out(size_t arg, unsigned long long bits, size_t k = 0) const {
    const PtxAtom& a = p.args.at(arg).at(k);
    if (a.kind != PtxAtom::reg) fault("%s:%d: PTX '%s': destination is not a register", file, line, p.text.c_str());
    const Operand& o = op(a);
    if (!o.out) fault("%s:%d: PTX '%s' writes %%%d, an input operand", file, line, p.text.c_str(), a.index);
    std::memcpy(o.ptr, &bits, o.size);
  }
  float fin(size_t arg) const {
    const unsigned u = static_cast<unsigned>(in(arg));
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  void fout(size_t arg, float f) const {
    unsigned u;
    std::memcpy(&u, &f, 4);
    out(arg, u);
  }
  [[noreturn]] void unsupported() const {
    fault("%s:%d: unsupported PTX '%s' (the host harness emulates only the instructions "
          "listed in cuda_host_ptx.h)", file, line, p.text.c_str());
  }
};

float flush(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }

float half_to_float(unsigned short h) {
  const unsigned sign = (h >> 15) & 1u, exp = (h >> 10) & 31u, man = h & 1023u;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 1024u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

unsigned short float_to_half(float f) {  // round to nearest even
  unsigned u;
  std::memcpy(&u, &f, 4);
  const unsigned short sign = static_cast<unsigned short>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {           // subnormal half (or zero): multiples of 2^-24
    const float q = std::nearbyint(std::ldexp(a, 24));  // exact scaling, RNE
    return sign | static_cast<unsigned short>(q);
  }
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const float q = std::nearbyint(std::ldexp(a, 11 - e));  // 11 significant bits, RNE
  unsigned mant = static_cast<unsigned>(q);
  int exp = e - 1 + 15;
  if (mant == 2048u) {
    mant = 1024u;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00u;
  return sign | static_cast<unsigned short>((exp << 10) | (mant & 1023u));
}

// ---- cp.async: per-thread queues; copies land at wait_group

struct AsyncCopy {
  unsigned char* dst;
  unsigned char data[16];
  unsigned size;
};
struct AsyncQueues {
  std::vector<AsyncCopy> open;                 // issued, not yet committed
  std::deque<std::vector<AsyncCopy>> groups;   // committed, oldest first
};

AsyncQueues& queues(Thread& t) {
  if (!t.async) t.async = new AsyncQueues;
  return *static_cast<AsyncQueues*>(t.async);
}

void land(std::vector<AsyncCopy>& g) {
  for (const AsyncCopy& c : g) std::memcpy(c.dst, c.data, c.size);
  g.clear();
}

// The 16-byte host chunks of shared memory that an unretired wgmma.mma_async reads (counts;
// cuda_host_wgmma.h adds an operand's chunks at issue and drops them when wait_group retires
// it): a cp.async into one of them races with the tensor cores on a GPU, whenever it lands.
std::unordered_map<std::uintptr_t, int> g_wgmma_reading;

const char* wgmma_reader(const unsigned char* p, unsigned size) {
  if (g_wgmma_reading.empty()) return nullptr;
  const std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + size - 1;
  for (std::uintptr_t k = lo & ~std::uintptr_t{15}; k <= hi; k += 16)
    if (g_wgmma_reading.count(k)) return "a wgmma.mma_async not yet retired by wgmma.wait_group";
  return nullptr;
}

void cp_async(const Ctx& c) {
  const ParsedPtx& p = c.p;
  const bool cg = p.has("cg");
  if (!(cg || p.has("ca")) || !p.has("shared") || !p.has("global")) c.unsupported();
  const unsigned dst = static_cast<unsigned>(c.op(p.args.at(0).at(0)).bits + p.args[0][0].value);
  const unsigned long long src = c.op(p.args.at(1).at(0)).bits + p.args[1][0].value;
  const unsigned size = static_cast<unsigned>(c.in(2));
  const unsigned src_size = p.args.size() > 3 ? static_cast<unsigned>(c.in(3)) : size;
  if (cg ? size != 16 : (size != 4 && size != 8 && size != 16))
    fault("%s:%d: cp.async.%s with cp-size %u", c.file, c.line, cg ? "cg" : "ca", size);
  if (src_size > size)
    fault("%s:%d: cp.async src-size %u exceeds cp-size %u", c.file, c.line, src_size, size);
  if (dst % size) fault("%s:%d: cp.async shared destination 0x%x not aligned to %u", c.file, c.line, dst, size);
  if (src % size)
    fault("%s:%d: cp.async global source 0x%llx not aligned to %u (misaligned address on a GPU)",
          c.file, c.line, src, size);
  AsyncCopy copy;
  copy.dst = from_shared(dst, size, "cp.async");
  copy.size = size;
  if (const char* who = wgmma_reader(copy.dst, size))
    fault("%s:%d: cp.async into shared 0x%x, which %s reads (the copy may land while the tensor "
          "cores read it)", c.file, c.line, dst, who);
  std::memset(copy.data, 0, sizeof copy.data);
  if (src_size) std::memcpy(copy.data, reinterpret_cast<const void*>(src), src_size);
  queues(self()).open.push_back(copy);
}

void cp_async_commit() {
  AsyncQueues& q = queues(self());
  q.groups.push_back(std::move(q.open));
  q.open.clear();
}

void cp_async_wait(unsigned long long n) {
  AsyncQueues& q = queues(self());
  while (q.groups.size() > n) {
    land(q.groups.front());
    q.groups.pop_front();
  }
}

// ---- ldmatrix (warp collective)

void exec_ldmatrix(LaneCall** lanes, int count) {
  if (count != 32) fault("ldmatrix needs a full warp (%d lanes)", count);
  const ParsedPtx& p = *lanes[0]->ptx;
  const int num = p.has("x4") ? 4 : p.has("x2") ? 2 : p.has("x1") ? 1 : 0;
  const bool trans = p.has("trans");
  unsigned char* rows[4][8];
  for (int i = 0; i < num; ++i) {
    unsigned addrs[8];
    for (int r = 0; r < 8; ++r) {
      const Operand& a = (*lanes[8 * i + r]->ops)[p.args.at(1).at(0).index];
      const unsigned addr = static_cast<unsigned>(a.bits + p.args[1][0].value);
      if (addr % 16) fault("ldmatrix: row address 0x%x of lane %d is not 16-byte aligned", addr, 8 * i + r);
      rows[i][r] = from_shared(addr, 16, "ldmatrix");
      addrs[r] = addr;
    }
    // One phase: its 8 rows' distinct 16-byte addresses by bank quad (bits 4-6 of the
    // address); a quad holding d of them costs d wavefronts, so d - 1 extra at the worst.
    unsigned per_quad[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int r = 0; r < 8; ++r) {
      bool seen = false;
      for (int q = 0; q < r; ++q) seen = seen || addrs[q] == addrs[r];
      if (!seen) ++per_quad[(addrs[r] >> 4) & 7];
    }
    unsigned worst = 1;
    for (unsigned d : per_quad) worst = d > worst ? d : worst;
    machine().ldsm_phases += 1;
    machine().ldsm_extra += worst - 1;
  }
  for (int l = 0; l < 32; ++l) {
    OpList& ops = *lanes[l]->ops;
    for (int i = 0; i < num; ++i) {
      unsigned v;
      if (!trans) {  // row l/4, b16 columns 2(l%4), 2(l%4)+1
        std::memcpy(&v, rows[i][l / 4] + 4 * (l % 4), 4);
      } else {       // column l/4 of rows 2(l%4), 2(l%4)+1
        unsigned short lo, hi;
        std::memcpy(&lo, rows[i][2 * (l % 4)] + 2 * (l / 4), 2);
        std::memcpy(&hi, rows[i][2 * (l % 4) + 1] + 2 * (l / 4), 2);
        v = lo | (static_cast<unsigned>(hi) << 16);
      }
      const PtxAtom& d = p.args.at(0).at(i);
      Operand& o = ops.at(d.index);
      std::memcpy(o.ptr, &v, 4);
    }
  }
}

// ---- mma.sync m16n8k16 / m16n8k32, integer (warp collective)

int elem8(unsigned reg, int j, bool is_signed) {
  const unsigned b = (reg >> (8 * j)) & 255u;
  return is_signed ? static_cast<int>(static_cast<signed char>(b)) : static_cast<int>(b);
}

void exec_mma(LaneCall** lanes, int count) {
  if (count != 32) fault("mma.sync needs a full warp (%d lanes)", count);
  const ParsedPtx& p = *lanes[0]->ptx;
  // mods: mma sync aligned m16n8kK row col s32 atype btype s32
  const int K = p.has("m16n8k32") ? 32 : 16;
  const std::string& at = p.mods.at(p.mods.size() - 3);
  const std::string& bt = p.mods.at(p.mods.size() - 2);
  const bool sa = at == "s8", sb = bt == "s8";
  long long A[16][32] = {}, B[32][8] = {}, C[16][8] = {};
  auto val = [&](int lane, size_t arg, int k) {
    const PtxAtom& a = p.args.at(arg).at(k);
    return static_cast<unsigned>((*lanes[lane]->ops).at(a.index).bits);
  };
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    // A: reg i holds row g (+8 for odd i) at k = 4t + (16 if i >= 2), 4 bytes low to high.
    const int nreg_a = K / 8;  // 2 for k16, 4 for k32
    for (int i = 0; i < nreg_a; ++i) {
      const unsigned r = val(l, 1, i);
      const int row = g + 8 * (i & 1), k0 = 4 * t + 16 * (i >> 1);
      for (int j = 0; j < 4; ++j) A[row][k0 + j] = elem8(r, j, sa);
    }
    // B: reg i holds column g at k = 4t + 16 i.
    for (int i = 0; i < K / 16; ++i) {
      const unsigned r = val(l, 2, i);
      for (int j = 0; j < 4; ++j) B[4 * t + 16 * i + j][g] = elem8(r, j, sb);
    }
    // C: c0, c1 at row g, columns 2t, 2t+1; c2, c3 at row g + 8.
    for (int i = 0; i < 4; ++i)
      C[g + 8 * (i >> 1)][2 * t + (i & 1)] = static_cast<int>(val(l, 3, i));
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      long long acc = C[row][col];
      for (int k = 0; k < K; ++k) acc += A[row][k] * B[k][col];
      const unsigned wrapped = static_cast<unsigned>(acc);  // .s32 accumulation wraps
      Operand& o = (*lanes[l]->ops).at(p.args.at(0).at(i).index);
      std::memcpy(o.ptr, &wrapped, 4);
    }
  }
}

#include "cuda_host_wgmma.h"

}  // namespace

float flush_subnormal(float f) { return flush(f); }
// The GPU's float32 arithmetic gives every NaN result as the canonical NaN 0x7FFFFFFF
// (no payload, no sign: the first H100 session coded 0/0 as +NaN where x86 gives -NaN),
// and so does cvt.f32.f16 (sm_90 runs it as an add, HADD2.F32: the second H100 session coded a
// float16 -NaN quantized to float8_e4m3fn as 0x7F, the contract 0xFF).
float gpu_nan(float f) {
  if (f == f) return f;
  const unsigned canonical = 0x7FFFFFFFu;
  std::memcpy(&f, &canonical, 4);
  return f;
}

void ptx_init(PtxSite& site, const char* file, int line) {
  const ParsedPtx& p = lookup(site.tmpl);
  (void)file;
  (void)line;
  auto in_order = [&](size_t n) {
    if (p.args.size() != n) return false;
    for (size_t k = 0; k < n; ++k)
      if (p.args[k].size() != 1 || p.args[k][0].kind != PtxAtom::reg ||
          p.args[k][0].index != static_cast<int>(k))
        return false;
    return true;
  };
  const std::string& m0 = p.mods.at(0);
  if (p.op == Op::dp4a && p.mods.size() == 3 && in_order(4)) {
    site.fast = PtxSite::dp4a;
    site.sa = p.mods[1] == "s32";
    site.sb = p.mods[2] == "s32";
  } else if (p.op == Op::arith && m0 != "fma" && p.has("rn") && p.has("f32") && in_order(3) &&
             p.mods.size() == (p.has("ftz") ? 4u : 3u)) {
    site.fast = m0 == "add" ? PtxSite::add : m0 == "sub" ? PtxSite::sub
              : m0 == "mul" ? PtxSite::mul : PtxSite::div;
    site.ftz = p.has("ftz");
  }
  site.parsed = &p;
}

static void land_all_pending_discard(Thread& t) {
  if (!t.async) return;
  AsyncQueues& q = *static_cast<AsyncQueues*>(t.async);
  q.open.clear();  // copies never waited for are dropped with the block
  q.groups.clear();
}

void ptx(const char* tmpl, std::initializer_list<Operand> outs, std::initializer_list<Operand> ins,
         const char* file, int line) {
  const ParsedPtx& p = lookup(tmpl);
  Operand local[24];
  std::vector<Operand> big;
  OpList ops;
  ops.v = local;
  const size_t total = outs.size() + ins.size();
  if (total > 24) {
    if (total > 200) fault("%s:%d: too many asm operands", file, line);
    big.resize(total);
    ops.v = big.data();
  }
  for (const Operand& o : outs) ops.v[ops.n++] = o;
  for (const Operand& o : ins) ops.v[ops.n++] = o;
  const Ctx c{p, ops, file, line};
  const std::string& op = p.mods.at(0);
  if (p.op == Op::dp4a) {
    if (p.mods.size() != 3) c.unsupported();
    const bool sa = p.mods[1] == "s32", sb = p.mods[2] == "s32";
    const unsigned a = static_cast<unsigned>(c.in(1)), b = static_cast<unsigned>(c.in(2));
    unsigned acc = static_cast<unsigned>(c.in(3));
    for (int j = 0; j < 4; ++j) acc += static_cast<unsigned>(elem8(a, j, sa) * elem8(b, j, sb));
    c.out(0, acc);
  } else if (p.op == Op::arith) {
    if (!p.has("rn") || !p.has("f32")) c.unsupported();
    const bool ftz = p.has("ftz");
    auto f = [&](size_t i) { return ftz ? flush(c.fin(i)) : c.fin(i); };
    volatile float r;
    if (op == "add") r = f(1) + f(2);
    else if (op == "sub") r = f(1) - f(2);
    else if (op == "mul") r = f(1) * f(2);
    else if (op == "div") r = f(1) / f(2);
    else r = std::fma(f(1), f(2), f(3));
    c.fout(0, gpu_nan(ftz ? flush(r) : r));
  } else if (p.op == Op::cvt) {
    if (p.mods.size() == 3 && p.mods[1] == "f32" && p.mods[2] == "f16") {
      // a NaN as the GPU gives it: the H100 quantized float16 -NaN to float8 +NaN (0x7F)
      c.fout(0, gpu_nan(half_to_float(static_cast<unsigned short>(c.in(1)))));
    } else if (p.has("rn") && p.mods[p.mods.size() - 2] == "f16" && p.mods.back() == "f32") {
      const float v = p.has("ftz") ? flush(c.fin(1)) : c.fin(1);
      c.out(0, float_to_half(v));
    } else {
      c.unsupported();
    }
  } else if (p.op == Op::mov) {
    if (p.mods.size() != 2 || p.mods[1] != "u32" || p.args.at(1).at(0).kind != PtxAtom::special)
      c.unsupported();
    c.out(0, c.in(1));
  } else if (p.op == Op::cp_async) {
    const std::string& what = p.mods.at(2);
    if (what == "commit_group") cp_async_commit();
    else if (what == "wait_group") cp_async_wait(c.in(0));
    else if (what == "wait_all") { cp_async_commit(); cp_async_wait(0); }
    else cp_async(c);
  } else if (p.op == Op::ldmatrix) {
    if (!p.has("sync") || !p.has("aligned") || !p.has("m8n8") || !p.has("b16")) c.unsupported();
    LaneCall call;
    call.key = tmpl;
    call.ptx = &p;
    call.ops = &ops;
    collective(call, 0xffffffffu, exec_ldmatrix, file, line);
  } else if (p.op == Op::mma) {
    if (!p.has("sync") || !p.has("aligned") || !p.has("row") || !p.has("col") ||
        !(p.has("m16n8k32") || p.has("m16n8k16")) || p.mods.back() != "s32")
      c.unsupported();
    LaneCall call;
    call.key = tmpl;
    call.ptx = &p;
    call.ops = &ops;
    collective(call, 0xffffffffu, exec_mma, file, line);
  } else if (p.op == Op::wgmma) {
    wgmma(c, tmpl);
  } else if (p.op == Op::fence) {
    // fence.proxy.async[.shared::cta]: orders this thread's generic-proxy shared-memory
    // accesses before later async-proxy ones (wgmma). The harness runs every access in
    // program order, so there is nothing to do.
    const size_t k = p.mods.size();
    if (k < 3 || k > 4 || p.mods[1] != "proxy" || p.mods[2] != "async" ||
        (k == 4 && p.mods[3] != "shared::cta") || !p.args.empty())
      c.unsupported();
  } else {
    c.unsupported();
  }
}

// ------------------------------------------------------------------ launch

struct LaunchResult {
  bool ok;
  std::string error;
};

static LaunchResult launch(void (*body)(void*), void* arg, dim3 grid, dim3 block, unsigned dyn_smem,
                           unsigned order, unsigned char poison) {
  Machine& m = machine();
  m.grid = grid;
  m.block = block;
  m.nthreads = block.x * block.y * block.z;
  m.dynamic_smem = dyn_smem;
  m.poison = poison;
  m.order = order;
  m.body = body;
  m.body_arg = arg;
  m.failed = false;
  m.error.clear();
  m.current = -1;
  m.ldsm_phases = m.ldsm_extra = 0;
  if (m.threads.size() < m.nthreads) m.threads.resize(m.nthreads);
  // The dynamic buffer has exactly the launch's size, so AddressSanitizer
  // catches a plain access past it.
  void* dyn = nullptr;
  if (posix_memalign(&dyn, 1024, dyn_smem ? dyn_smem : 1) != 0) return {false, "out of memory"};
  m.dyn = static_cast<unsigned char*>(dyn);
  bool ok = true;
  for (unsigned z = 0; z < grid.z && ok; ++z)
    for (unsigned y = 0; y < grid.y && ok; ++y)
      for (unsigned x = 0; x < grid.x && ok; ++x) {
        m.block_idx = dim3(x, y, z);
        poison_shared();
        ok = run_block();
      }
  std::free(m.dyn);
  m.dyn = nullptr;
  return {ok && !m.failed, m.error};
}

}  // namespace cuda_host

// ------------------------------------------------------------------ the runner's request loop
// Requests on stdin, replies on stdout (little-endian, see harness.py):
//   request: u32 kernel (0xffffffff: list kernels), u32 grid[3], u32 block[3],
//            u32 dynamic_smem, u32 order (bit 0 reverse, bit 1 warp-major), u32 poison, u32 nbuf, u32 narg,
//            nbuf x (u64 size, u64 address mod 256, bytes), narg x (u32 kind: 0 buffer (u32 index,
//            i64 offset) | 1 null | 2 bytes (u32 size, bytes))
//   reply:   u32 status (0 ok), u32 length, message, then nbuf x (u64 size, bytes)

namespace {

// ---- device memory, checked as compute-sanitizer's memcheck checks it
// Each buffer of a launch is a mapping of its own: kGuard bytes of PROT_NONE
// before and after, and between them pages holding the buffer at its address
// modulo 256 (the caller's), the bytes before and after it in those pages
// poisoned for AddressSanitizer, at least kRedzone of them on each side (so a
// near miss is always ASan's report, which names the access's size, never a
// fault in a guard, which does not, whatever the buffer's offset in its page). So a kernel's access outside its buffers is
// an ASan report (in the pages) or a fault (in the guards) however far it
// strays within kGuard, and it cannot land in another buffer of the launch.
// On such an error the death callback below writes the launch (kernel, block,
// thread) and the buffer table after ASan's report, for harness.py to name the
// argument and the offset.
constexpr size_t kGuard = size_t(1) << 20;
constexpr size_t kRedzone = 256;

struct DeviceBuffer {
  unsigned char* map = nullptr;
  size_t map_size = 0, body = 0;
  unsigned char* data = nullptr;
  unsigned long long size = 0, skew = 0;
};

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// Mappings of earlier launches, by their body's size, kept for reuse (the
// system calls cost more than small launches); at most kKeep bytes of bodies
// per runner process.
std::unordered_multimap<size_t, unsigned char*> g_spare;
size_t g_spare_bytes = 0;
constexpr size_t kKeep = size_t(32) << 20;

bool map_buffer(DeviceBuffer& b) {
  const size_t page = page_size();
  const size_t lead = kRedzone + b.skew;  // keeps the address modulo 256: the body is page-aligned
  b.body = (lead + (b.size ? b.size : 1) + kRedzone + page - 1) / page * page;
  b.map_size = kGuard + b.body + kGuard;
  auto spare = g_spare.find(b.body);
  if (spare != g_spare.end()) {
    b.map = spare->second;
    g_spare.erase(spare);
    g_spare_bytes -= b.body;
  } else {
    void* m = mmap(nullptr, b.map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    b.map = static_cast<unsigned char*>(m);
    if (mprotect(b.map + kGuard, b.body, PROT_READ | PROT_WRITE) != 0) return false;
  }
  b.data = b.map + kGuard + lead;
  unsigned char* body = b.map + kGuard;
  __asan_unpoison_memory_region(body, b.body);
  __asan_poison_memory_region(body, lead);
  __asan_poison_memory_region(b.data + b.size, body + b.body - (b.data + b.size));
  return true;
}

void unmap_buffer(DeviceBuffer& b) {
  __asan_unpoison_memory_region(b.map + kGuard, b.body);
  if (g_spare_bytes + b.body <= kKeep) {
    g_spare.emplace(b.body, b.map);
    g_spare_bytes += b.body;
  } else {
    munmap(b.map, b.map_size);
  }
  b.map = nullptr;
}

// What the death callback reports: the launch under way.
struct LaunchRecord {
  const char* kernel = nullptr;
  const std::vector<DeviceBuffer>* bufs = nullptr;
  const std::vector<int>* arg_buf = nullptr;
} g_launch;

void report_launch() {
  const cuda_host::Machine& m = cuda_host::machine();
  if (!g_launch.kernel) return;
  std::fprintf(stderr, "cuda_host launch: %s", g_launch.kernel);
  if (m.current >= 0 && static_cast<size_t>(m.current) < m.threads.size()) {
    const dim3 t = m.threads[m.current].idx;
    std::fprintf(stderr, " block (%u,%u,%u) thread (%u,%u,%u)", m.block_idx.x, m.block_idx.y, m.block_idx.z,
                 t.x, t.y, t.z);
  }
  std::fprintf(stderr, "\n");
  const std::vector<DeviceBuffer>& bufs = *g_launch.bufs;
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::fprintf(stderr, "cuda_host buffer %zu: 0x%llx %llu args", i,
                 static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(bufs[i].data)), bufs[i].size);
    for (size_t j = 0; j < g_launch.arg_buf->size(); ++j)
      if ((*g_launch.arg_buf)[j] == static_cast<int>(i)) std::fprintf(stderr, " %zu", j);
    std::fprintf(stderr, "\n");
  }
  std::fflush(stderr);
}

bool read_all(void* p, size_t n) {
  unsigned char* c = static_cast<unsigned char*>(p);
  while (n) {
    const size_t got = std::fread(c, 1, n, stdin);
    if (got == 0) return false;
    c += got;
    n -= got;
  }
  return true;
}

template <typename T>
T read_val() {
  T v;
  if (!read_all(&v, sizeof v)) std::exit(0);
  return v;
}

void write_all(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, stdout) != n) std::exit(1);
}

void reply(unsigned status, const std::string& msg) {
  const unsigned len = static_cast<unsigned>(msg.size());
  write_all(&status, 4);
  write_all(&len, 4);
  write_all(msg.data(), len);
}

}  // namespace

int main() {
  __sanitizer_set_death_callback(&report_launch);
  for (;;) {
    const unsigned kernel = read_val<unsigned>();
    if (kernel == 0xffffffffu) {
      std::string list;
      for (int i = 0; i < cuda_host_kernel_count; ++i)
        list += std::string(cuda_host_kernels[i].name) + "\t" + cuda_host_kernels[i].sig() + "\n";
      reply(0, list);
      std::fflush(stdout);
      continue;
    }
    unsigned g[3], b[3];
    for (unsigned& v : g) v = read_val<unsigned>();
    for (unsigned& v : b) v = read_val<unsigned>();
    const unsigned dyn = read_val<unsigned>();
    const unsigned order = read_val<unsigned>();
    const unsigned poison = read_val<unsigned>();
    const unsigned nbuf = read_val<unsigned>();
    const unsigned narg = read_val<unsigned>();
    std::vector<DeviceBuffer> dbufs(nbuf);
    std::vector<unsigned char*> bufs(nbuf);
    std::vector<unsigned long long> sizes(nbuf);
    std::vector<std::vector<unsigned char>> before(nbuf);
    for (unsigned i = 0; i < nbuf; ++i) {
      sizes[i] = dbufs[i].size = read_val<unsigned long long>();
      // The buffer keeps its address modulo 256 from the caller's array, so
      // alignment-dependent paths run as they would there (see map_buffer).
      dbufs[i].skew = read_val<unsigned long long>() % 256;
      if (!map_buffer(dbufs[i])) return 1;
      bufs[i] = dbufs[i].data;
      if (!read_all(bufs[i], sizes[i])) return 0;
      before[i].assign(bufs[i], bufs[i] + sizes[i]);
    }
    std::vector<std::vector<unsigned char>> storage(narg);
    std::vector<void*> args(narg);
    std::vector<int> arg_buf(narg, -1);
    for (unsigned i = 0; i < narg; ++i) {
      const unsigned kind = read_val<unsigned>();
      storage[i].assign(16, 0);
      if (kind == 0) {
        const unsigned idx = read_val<unsigned>();
        const long long off = read_val<long long>();
        unsigned char* p = bufs.at(idx) + off;
        std::memcpy(storage[i].data(), &p, sizeof p);
        arg_buf[i] = static_cast<int>(idx);
      } else if (kind == 2) {
        const unsigned size = read_val<unsigned>();
        storage[i].resize(std::max<unsigned>(size, 16));
        if (!read_all(storage[i].data(), size)) return 0;
      }  // kind 1: a null pointer (zeros)
      args[i] = storage[i].data();
    }
    std::string status;
    bool ok = kernel < static_cast<unsigned>(cuda_host_kernel_count);
    if (!ok) status = "no such kernel";
    if (ok) {
      const cuda_host_kernel& k = cuda_host_kernels[kernel];
      const std::vector<std::string> sig = sig_tokens(k.sig());
      // Buffers reached only through const pointers must come back unchanged.
      std::vector<bool> writable(nbuf, false);
      for (unsigned i = 0; i < narg; ++i)
        if (arg_buf[i] >= 0 && i < sig.size() && sig[i] == "P") writable[arg_buf[i]] = true;
      CallArgs ca{&k, args.data()};
      g_launch = {k.name, &dbufs, &arg_buf};
      const cuda_host::LaunchResult r =
          cuda_host::launch(&run_kernel, &ca, dim3(g[0], g[1], g[2]), dim3(b[0], b[1], b[2]), dyn,
                            order, static_cast<unsigned char>(poison));
      g_launch = {};
      ok = r.ok;
      status = r.error;
      if (ok) {  // what the launch measured (harness.py: HostDevice.ldmatrix)
        const cuda_host::Machine& m = cuda_host::machine();
        status = "ldmatrix " + std::to_string(m.ldsm_phases) + " " + std::to_string(m.ldsm_extra);
      }
      for (unsigned i = 0; ok && i < nbuf; ++i)
        if (!writable[i] && sizes[i] && std::memcmp(before[i].data(), bufs[i], sizes[i]) != 0) {
          ok = false;
          status = "the kernel wrote into buffer " + std::to_string(i) +
                   ", which it receives only through const pointers";
        }
    }
    reply(ok ? 0 : 1, status);
    for (unsigned i = 0; i < nbuf; ++i) {
      write_all(&sizes[i], 8);
      write_all(bufs[i], sizes[i]);
      unmap_buffer(dbufs[i]);
    }
    std::fflush(stdout);
  }
}
