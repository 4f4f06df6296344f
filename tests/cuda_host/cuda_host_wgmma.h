// wgmma (Hopper's warpgroup MMA) for the host harness's PTX interpreter: a part of
// cuda_host.cpp, included there inside its anonymous namespace (it uses the interpreter's
// Ctx, ParsedPtx, LaneCall and collective()). What is emulated is listed in cuda_host_ptx.h.
//
// From the PTX ISA ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"):
// - a warpgroup is 4 contiguous warps, the first one's rank a multiple of 4; every wgmma
//   instruction is .sync.aligned: all 128 threads execute the same one;
// - matrix descriptor: bits 0-13 start address, 16-29 leading dimension byte offset (LBO),
//   32-45 stride dimension byte offset (SBO), each (x & 0x3FFFF) >> 4; 49-51 base offset;
//   62-63 swizzle (0 none, 1 128B, 2 64B, 3 32B);
// - K-major canonical layouts, in units of T = 16 one-byte elements:
//     no swizzle:  ((8,m),(T,2k)):((1T,SBO),(1,LBO))   row r of a core matrix at +16 r,
//                  core matrices SBO apart along M/N, LBO apart along K;
//     128B swizzle: ((8,m),(T,2k)):((8T,SBO),(1,T)) under Swizzle<3,4,3>: rows 128 bytes
//                  apart, 8-row groups SBO apart, address bits 4-6 XOR bits 7-9;
// - the s32 accumulator of m64nNk32: N/2 registers a thread; register i of thread T
//   (warp w = T/32 of the group, lane l) is D[16 w + l/4 + 8 ((i%4)/2)][8 (i/4) + 2 (l%4) + i%2]
//   (the ISA's figure for the m64nNk32 D fragment, the same as m64nNk16's);
// - the operands in shared memory may be read until a wgmma.wait_group retires the group.

struct WgmmaRead {  // one 16-byte chunk of an operand, as it was at issue
  const unsigned char* at;
  unsigned addr;
  unsigned char bytes[16];
};
struct WgmmaOp {  // an issued wgmma.mma_async whose group has not been waited for
  const char* file;
  int line;
  std::vector<WgmmaRead> reads;
};
struct WarpgroupState {
  std::vector<WgmmaOp> open;                 // issued, not yet committed
  std::deque<std::vector<WgmmaOp>> groups;   // committed, oldest first
};
std::vector<WarpgroupState> g_warpgroups;

}  // namespace

static void wgmma_block_start(unsigned nthreads) {
  g_warpgroups.assign((nthreads + 127) / 128, WarpgroupState{});
  g_wgmma_reading.clear();
}

static void wgmma_thread_exit() {
  Machine& m = machine();
  if (g_warpgroups.empty()) return;
  const WarpgroupState& s = g_warpgroups.at(static_cast<unsigned>(m.current) / 128);
  const WgmmaOp* left = !s.open.empty() ? &s.open.front() : nullptr;
  for (const auto& g : s.groups)
    if (!left && !g.empty()) left = &g.front();
  if (!left) return;  // empty groups only
  fault("a thread exits while the wgmma.mma_async at %s:%d is in flight (%s; wgmma.wait_group "
        "must retire it before the block ends)", left->file, left->line,
        s.open.empty() ? "committed, not waited for" : "never committed");
}

namespace {

// The window address (cuda_host.h) of the 18-bit shared address a descriptor holds.
unsigned wgmma_window(unsigned a18, const char* what, const char* file, int line) {
  Machine& m = machine();
  unsigned found = 0;
  int hits = 0;
  if (a18 < m.dynamic_smem) {
    found = kDynBase + a18;
    ++hits;
  }
  for (const StaticShared& s : g_static) {
    if (s.serial != m.block_serial) continue;  // an array this block has not reached
    const unsigned off = (a18 - s.base) & 0x3FFFFu;
    if (off < s.bytes) {
      found = s.base + off;
      ++hits;
    }
  }
  if (hits == 0)
    fault("%s:%d: wgmma.mma_async %s descriptor: start address 0x%x is not in the block's "
          "shared memory (%u dynamic bytes)", file, line, what, a18, m.dynamic_smem);
  if (hits > 1)
    fault("%s:%d: wgmma.mma_async %s descriptor: start address 0x%x lies in both dynamic and "
          "static shared memory in the host harness's window (cuda_host.h); the harness cannot "
          "tell which", file, line, what, a18);
  return found;
}

// Reads a K-major 8-bit operand of `rows` rows x 32 bytes through descriptor `desc` into
// out[row][k], recording every 16-byte chunk read in `reads`.
void wgmma_operand(unsigned long long desc, int rows, const char* what, unsigned char* out,
                   std::vector<WgmmaRead>& reads, const char* file, int line) {
  const unsigned start = static_cast<unsigned>(desc & 0x3FFFu) << 4;
  const unsigned lbo = static_cast<unsigned>((desc >> 16) & 0x3FFFu) << 4;
  const unsigned sbo = static_cast<unsigned>((desc >> 32) & 0x3FFFu) << 4;
  const unsigned base_offset = static_cast<unsigned>((desc >> 49) & 7u);
  const unsigned swizzle = static_cast<unsigned>(desc >> 62);
  if (base_offset != 0)
    fault("%s:%d: wgmma.mma_async %s descriptor 0x%016llx has base offset %u; the host harness "
          "emulates only 0 (operands whose swizzle pattern starts on its boundary)",
          file, line, what, desc, base_offset);
  if (swizzle != 0 && swizzle != 1)
    fault("%s:%d: wgmma.mma_async %s descriptor 0x%016llx: the %s swizzle is not emulated by "
          "the host harness (only none and 128B)", file, line, what, desc,
          swizzle == 2 ? "64B" : "32B");
  const unsigned w = wgmma_window(start, what, file, line);
  for (int r = 0; r < rows; ++r)
    for (int kc = 0; kc < 2; ++kc) {
      unsigned a;
      if (swizzle == 0) {
        a = w + (r / 8) * sbo + (r % 8) * 16u + kc * lbo;
      } else {
        a = w + (r / 8) * sbo + (r % 8) * 128u + kc * 16u;
        a ^= ((a >> 7) & 7u) << 4;
      }
      const unsigned char* p = from_shared(a, 16, "wgmma.mma_async");
      WgmmaRead rd;
      rd.at = p;
      rd.addr = a;
      std::memcpy(rd.bytes, p, 16);
      reads.push_back(rd);
      std::memcpy(out + r * 32 + kc * 16, p, 16);
    }
}

// The s32 shapes of m64nNk32 (the ISA's fragment table: N = 8 i for i = 1..4, 16 i for i = 3..16).
bool wgmma_valid_n(int n) { return (n >= 8 && n <= 32 && n % 8 == 0) || (n >= 48 && n <= 256 && n % 16 == 0); }

struct WgmmaCall {
  int n;
  bool sa, sb, satfinite;
};

WgmmaCall wgmma_decode(const ParsedPtx& p, const char* file, int line) {
  // wgmma mma_async sync aligned m64nNk32 [satfinite] s32 atype btype [satfinite]
  auto bad = [&]() {
    fault("%s:%d: unsupported PTX '%s' (the host harness emulates wgmma.mma_async.sync.aligned."
          "m64nNk32[.satfinite].s32.{s8,u8}.{s8,u8} with both operands in shared memory)",
          file, line, p.text.c_str());
  };
  const std::vector<std::string>& md = p.mods;
  if (md.size() < 8 || md[1] != "mma_async" || md[2] != "sync" || md[3] != "aligned") bad();
  WgmmaCall w{0, false, false, false};
  const std::string& shape = md[4];
  if (shape.compare(0, 4, "m64n") != 0 || shape.size() < 8 ||
      shape.compare(shape.size() - 3, 3, "k32") != 0)
    bad();
  w.n = std::atoi(shape.substr(4, shape.size() - 7).c_str());
  if (!wgmma_valid_n(w.n))
    fault("%s:%d: wgmma.mma_async shape %s: N must be 8, 16, 24, 32 or a multiple of 16 from 48 "
          "to 256 for .s32", file, line, shape.c_str());
  size_t i = 5;
  if (md[i] == "satfinite") { w.satfinite = true; ++i; }
  if (i + 3 > md.size() || md[i] != "s32") bad();
  const std::string &at = md[i + 1], &bt = md[i + 2];
  if ((at != "s8" && at != "u8") || (bt != "s8" && bt != "u8")) bad();
  w.sa = at == "s8";
  w.sb = bt == "s8";
  i += 3;
  if (i < md.size() && md[i] == "satfinite" && !w.satfinite) { w.satfinite = true; ++i; }
  if (i != md.size()) bad();
  if (p.args.size() != 4 || p.args[0].size() != static_cast<size_t>(w.n / 2) ||
      p.args[1].size() != 1 || p.args[2].size() != 1 || p.args[3].size() != 1)
    fault("%s:%d: PTX '%s': wgmma.mma_async with descriptors takes {d0, ..., d%d}, a-desc, "
          "b-desc, scale-d", file, line, p.text.c_str(), w.n / 2 - 1);
  for (const PtxAtom& d : p.args[0])
    if (d.kind != PtxAtom::reg) bad();
  if (p.args[1][0].kind != PtxAtom::reg || p.args[2][0].kind != PtxAtom::reg) bad();
  return w;
}

struct WgmmaCtx {
  const char* file;
  int line;
};

void exec_wgmma_mma(LaneCall** lanes, int count) {
  const ParsedPtx& p = *lanes[0]->ptx;
  const WgmmaCtx& where = *static_cast<const WgmmaCtx*>(reinterpret_cast<const void*>(lanes[0]->value));
  const char* file = where.file;
  const int line = where.line;
  if (count != 128)
    fault("%s:%d: wgmma.mma_async needs a full warpgroup of 128 threads; the block's warpgroup "
          "has %d", file, line, count);
  const WgmmaCall w = wgmma_decode(p, file, line);
  auto operand = [&](int l, const PtxAtom& a) -> const Operand& {
    OpList& ops = *lanes[l]->ops;
    if (a.index < 0 || a.index >= ops.n)
      fault("%s:%d: PTX '%s' names operand %%%d of %d", file, line, p.text.c_str(), a.index, ops.n);
    return ops.v[a.index];
  };
  const PtxAtom &da = p.args[1][0], &db = p.args[2][0], &sd = p.args[3][0];
  for (const PtxAtom* a : {&da, &db})
    if (operand(0, *a).size != 8)
      fault("%s:%d: wgmma.mma_async: a matrix descriptor must be a 64-bit (\"l\") operand",
            file, line);
  const unsigned long long desc_a = operand(0, da).bits, desc_b = operand(0, db).bits;
  for (int l = 1; l < 128; ++l)
    if (operand(l, da).bits != desc_a || operand(l, db).bits != desc_b)
      fault("%s:%d: wgmma.mma_async: thread %d of the warpgroup passes %s descriptor 0x%016llx, "
            "thread 0 0x%016llx (the descriptors must be the same in all 128 threads)", file,
            line, l, operand(l, da).bits != desc_a ? "the A" : "the B",
            operand(l, da).bits != desc_a ? operand(l, da).bits : operand(l, db).bits,
            operand(l, da).bits != desc_a ? desc_a : desc_b);
  long long scale_d;
  if (sd.kind == PtxAtom::imm) {
    scale_d = sd.value;
  } else if (sd.kind == PtxAtom::reg && operand(0, sd).cons == 'n') {
    scale_d = static_cast<long long>(operand(0, sd).bits);
  } else {
    fault("%s:%d: wgmma.mma_async scale-d must be the immediate 0 or 1 (a predicate register is "
          "not emulated by the host harness)", file, line);
  }
  if (scale_d != 0 && scale_d != 1)
    fault("%s:%d: wgmma.mma_async scale-d %lld is not 0 or 1", file, line, scale_d);
  for (int l = 0; l < 128; ++l)
    for (const PtxAtom& d : p.args[0]) {
      const Operand& o = operand(l, d);
      if (!o.out || o.size != 4)
        fault("%s:%d: wgmma.mma_async accumulator %%%d must be a 32-bit \"+r\" operand", file,
              line, d.index);
    }
  WgmmaOp op{file, line, {}};
  op.reads.reserve(2 * (64 + w.n));
  unsigned char A[64 * 32], B[256 * 32];
  wgmma_operand(desc_a, 64, "A", A, op.reads, file, line);
  wgmma_operand(desc_b, w.n, "B", B, op.reads, file, line);
  int a[64][32];
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < 32; ++k) a[r][k] = w.sa ? static_cast<signed char>(A[r * 32 + k]) : A[r * 32 + k];
  std::vector<int> b(static_cast<size_t>(w.n) * 32);
  for (int c = 0; c < w.n * 32; ++c) b[c] = w.sb ? static_cast<signed char>(B[c]) : B[c];
  for (int l = 0; l < 128; ++l) {
    const int warp = l / 32, g = (l % 32) / 4, t = l % 4;
    for (int i = 0; i < w.n / 2; ++i) {
      const int row = 16 * warp + g + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * t + i % 2;
      const Operand& o = operand(l, p.args[0][i]);
      long long acc = scale_d ? static_cast<int>(static_cast<unsigned>(o.bits)) : 0;
      const int* x = a[row];
      const int* y = &b[static_cast<size_t>(col) * 32];
      for (int k = 0; k < 32; ++k) acc += x[k] * y[k];
      if (w.satfinite) acc = std::min<long long>(std::max<long long>(acc, INT32_MIN), INT32_MAX);
      const unsigned v = static_cast<unsigned>(acc);  // without .satfinite, .s32 wraps
      std::memcpy(o.ptr, &v, 4);
    }
  }
  for (const WgmmaRead& r : op.reads)  // each 16-byte chunk read: its host chunks (cp.async's check)
    for (std::uintptr_t k = reinterpret_cast<std::uintptr_t>(r.at) & ~std::uintptr_t{15};
         k <= reinterpret_cast<std::uintptr_t>(r.at) + 15; k += 16)
      ++g_wgmma_reading[k];
  g_warpgroups.at(static_cast<unsigned>(machine().current) / 128).open.push_back(std::move(op));
}

// A retired wgmma's operands must still hold what they held at issue: the GPU may read them
// at any time until then.
void wgmma_retire(const WgmmaOp& op, const char* file, int line) {
  for (const WgmmaRead& r : op.reads)
    for (std::uintptr_t k = reinterpret_cast<std::uintptr_t>(r.at) & ~std::uintptr_t{15};
         k <= reinterpret_cast<std::uintptr_t>(r.at) + 15; k += 16) {
      auto it = g_wgmma_reading.find(k);
      if (it != g_wgmma_reading.end() && --it->second == 0) g_wgmma_reading.erase(it);
    }
  for (const WgmmaRead& r : op.reads)
    if (std::memcmp(r.at, r.bytes, 16) != 0)
      fault("%s:%d: wgmma operand in shared memory changed before wait_group retired it (the "
            "wgmma.mma_async at %s:%d reads 16 bytes at shared 0x%x, written since it was issued)",
            file, line, op.file, op.line, r.addr);
}

struct WgmmaSync {
  int kind;  // 0 fence, 1 commit_group, 2 wait_group
  unsigned long long n;
  const char* file;
  int line;
};

void exec_wgmma_sync(LaneCall** lanes, int count) {
  const WgmmaSync& s = *reinterpret_cast<const WgmmaSync*>(lanes[0]->value);
  static const char* const names[] = {"wgmma.fence", "wgmma.commit_group", "wgmma.wait_group"};
  if (count != 128)
    fault("%s:%d: %s needs a full warpgroup of 128 threads; the block's warpgroup has %d", s.file,
          s.line, names[s.kind], count);
  for (int l = 1; l < 128; ++l)
    if (reinterpret_cast<const WgmmaSync*>(lanes[l]->value)->n != s.n)
      fault("%s:%d: wgmma.wait_group: threads of a warpgroup wait with different N", s.file, s.line);
  WarpgroupState& st = g_warpgroups.at(static_cast<unsigned>(machine().current) / 128);
  if (s.kind == 1) {
    st.groups.push_back(std::move(st.open));
    st.open.clear();
  } else if (s.kind == 2) {
    while (st.groups.size() > s.n) {
      for (const WgmmaOp& op : st.groups.front()) wgmma_retire(op, s.file, s.line);
      st.groups.pop_front();
    }
  }
}

void wgmma(const Ctx& c, const char* tmpl) {
  const ParsedPtx& p = c.p;
  LaneCall call;
  call.key = tmpl;
  call.ptx = &p;
  call.ops = &c.ops;
  call.group = 128;
  const std::string& what = p.mods.size() > 1 ? p.mods[1] : std::string();
  if (what == "mma_async") {
    WgmmaCtx where{c.file, c.line};
    call.value = reinterpret_cast<unsigned long long>(&where);
    collective(call, 0xffffffffu, exec_wgmma_mma, c.file, c.line);
    return;
  }
  const bool sync_aligned = p.mods.size() == 4 && p.mods[2] == "sync" && p.mods[3] == "aligned";
  WgmmaSync s{-1, 0, c.file, c.line};
  if (sync_aligned && what == "fence" && p.args.empty()) s.kind = 0;
  else if (sync_aligned && what == "commit_group" && p.args.empty()) s.kind = 1;
  else if (sync_aligned && what == "wait_group" && p.args.size() == 1) {
    const PtxAtom& a = p.args[0].at(0);
    if (a.kind != PtxAtom::imm && !(a.kind == PtxAtom::reg && c.op(a).cons == 'n'))
      fault("%s:%d: wgmma.wait_group N must be an integer constant", c.file, c.line);
    s.kind = 2;
    s.n = c.in(0);
  }
  if (s.kind < 0) c.unsupported();
  call.value = reinterpret_cast<unsigned long long>(&s);
  collective(call, 0xffffffffu, exec_wgmma_sync, c.file, c.line);
}
