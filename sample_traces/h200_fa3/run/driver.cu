// FA3 forward (bf16, head dim 128) run without torch: fills FlashAttention-3's Flash_fwd_params,
// calls its compiled run_mha_fwd_ instantiation in two builds linked into this one binary -- probes
// on (the tree patched by `xstage-trace instrument apply --target fa3`, -DXSTAGE_TRACE=1) and probes
// compiled out (run_mha_fwd_plain_, see build.sh) -- checks O and LSE against a CPU reference,
// times interleaved trials and writes one probe dump per case.
//
//   fa3_driver check OUT_DIR
//       small cases (non-causal and causal, O in HBM and host-mapped, both builds) against the CPU;
//       writes OUT_DIR/check.csv, and OUT_DIR/records.csv (the traced launch's records against the
//       recipe's layout), exit status 6 when a result is wrong.
//   fa3_driver bench OUT_DIR TRIALS CASE...        CASE = batch,heads,seqlen,causal,dest
//       dest = local (O in HBM) or host (O in cudaHostAllocMapped memory: the PCIe store path).
//       Per trial the three variants run in rotating order: plain (probes compiled out), traced
//       (probes on, buffer set), cleared (probes on, no buffer: clock reads only). Writes
//       OUT_DIR/times.csv (every trial), OUT_DIR/fa3_<dest>_s<seqlen>_<causal|noncausal>.xsp (the
//       records of the last traced trial of the case) and OUT_DIR/records_bench.csv (those records against
//       the recipe's layout, as check's records.csv); exit status 7 when a case's records are wrong.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cute/tensor.hpp"  // xstage_fa3.h (included by xstage_fa3_api.h) reads block coordinates with cute::get
#include "cutlass/numeric_types.h"
#include "flash.h"
#include "tile_size.h"
#include "xstage_fa3_api.h"
#include <xstage/host.hpp>
#include <xstage/nvtx.hpp>

// The probes-off build of the same instantiation (build.sh renames it by the preprocessor).
template <int Arch, typename T, int kHeadDim, int kHeadDimV, bool Split, bool PagedKVNonTMA, bool Has_softcap, bool PackGQA>
void run_mha_fwd_plain_(Flash_fwd_params& params, cudaStream_t stream);

namespace {

constexpr int kHeadDim = 128;
constexpr int kOutBytes = 2;  // bf16 O
const std::vector<std::string> kEventNames = {"mainloop", "epilogue", "kv_step"};

enum class Build { kPlain, kTraced, kCleared };
const char* build_name(Build b) { return b == Build::kPlain ? "plain" : (b == Build::kTraced ? "traced" : "cleared"); }

struct Case {
  int batch, heads, seqlen;
  bool causal;
  std::string dest;  // "local" (HBM) or "host" (host-mapped)
};

__global__ void fill_uniform(__nv_bfloat16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    x[i] = __float2bfloat16((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);  // uniform in [-1, 1)
  }
}

// Q, K, V in HBM; O in HBM or host-mapped memory; LSE and the causal scheduler's semaphore in HBM.
struct Tensors {
  size_t elems = 0;
  __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *o_host = nullptr;
  float* lse = nullptr;
  int* semaphore = nullptr;

  Tensors(const Case& c) {
    elems = (size_t)c.batch * c.seqlen * c.heads * kHeadDim;
    const size_t bytes = elems * sizeof(__nv_bfloat16);
    xstage::check_cuda(cudaMalloc(&q, bytes), "cudaMalloc(q)");
    xstage::check_cuda(cudaMalloc(&k, bytes), "cudaMalloc(k)");
    xstage::check_cuda(cudaMalloc(&v, bytes), "cudaMalloc(v)");
    if (c.dest == "host") {
      xstage::check_cuda(cudaHostAlloc(&o_host, bytes, cudaHostAllocMapped), "cudaHostAlloc(o)");
      xstage::check_cuda(cudaHostGetDevicePointer((void**)&o, o_host, 0), "cudaHostGetDevicePointer(o)");
    } else {
      xstage::check_cuda(cudaMalloc(&o, bytes), "cudaMalloc(o)");
    }
    xstage::check_cuda(cudaMalloc(&lse, sizeof(float) * c.batch * c.heads * c.seqlen), "cudaMalloc(lse)");
    xstage::check_cuda(cudaMalloc(&semaphore, sizeof(int)), "cudaMalloc(semaphore)");
    fill_uniform<<<1024, 256>>>(q, elems, 0x1234u);
    fill_uniform<<<1024, 256>>>(k, elems, 0x5678u);
    fill_uniform<<<1024, 256>>>(v, elems, 0x9abcu);
    xstage::check_cuda(cudaDeviceSynchronize(), "fill_uniform");
  }
  ~Tensors() {
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(lse); cudaFree(semaphore);
    if (o_host) cudaFreeHost(o_host); else cudaFree(o);
  }
  Tensors(const Tensors&) = delete;
  Tensors& operator=(const Tensors&) = delete;
};

// The fields FA3's own mha_fwd (hopper/flash_api.cpp, set_params_fprop) sets for a dense, non-varlen,
// non-paged bf16 forward with equal Q/K lengths and head counts; layout (batch, seqlen, heads, dim).
Flash_fwd_params make_params(const Case& c, Tensors& t, int num_sm) {
  Flash_fwd_params p = {};
  const int64_t row = (int64_t)c.heads * kHeadDim, batch = row * c.seqlen;
  p.is_bf16 = true;
  p.q_ptr = t.q; p.k_ptr = t.k; p.v_ptr = t.v; p.o_ptr = t.o;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = row;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = kHeadDim;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = batch;
  p.v_dim_stride = 1;
  p.softmax_lse_ptr = t.lse;
  p.b = p.b_k = c.batch;
  p.h = p.h_k = c.heads;
  p.seqlen_q = p.seqlen_k = c.seqlen;
  p.total_q = p.total_k = c.batch * c.seqlen;
  p.seqlen_q_rounded = p.seqlen_k_rounded = (c.seqlen + 127) / 128 * 128;
  p.d = p.d_rounded = p.dv = p.dv_rounded = kHeadDim;
  p.scale_softmax = 1.0f / std::sqrt((float)kHeadDim);
  p.p_dropout = 1.0f; p.rp_dropout = 1.0f; p.p_dropout_in_uint8_t = 255;
  p.is_causal = c.causal;
  p.window_size_left = c.seqlen - 1;
  p.window_size_right = c.causal ? 0 : c.seqlen - 1;
  p.arch = 90;
  p.num_sm = num_sm;
  p.num_splits = 1;
  p.tile_count_semaphore = c.causal ? t.semaphore : nullptr;  // the dynamic (causal) scheduler's tile counter
  return p;
}

void launch(Build b, Flash_fwd_params& p, const xstage::HostBuffer* tb) {
  if (p.tile_count_semaphore) xstage::check_cuda(cudaMemsetAsync(p.tile_count_semaphore, 0, sizeof(int)), "memset(semaphore)");
  if (b == Build::kPlain) {
    run_mha_fwd_plain_<90, cutlass::bfloat16_t, kHeadDim, kHeadDim, false, false, false, false>(p, 0);
  } else {
    if (b == Build::kTraced && tb) {
      const xstage::DeviceBuffer v = tb->view();
      if (xstage_fa3_set_trace_buffer((uint64_t)v.meta, (uint64_t)v.records, v.capacity, v.roles_per_cta, v.num_slices) != 0) {
        std::fprintf(stderr, "fa3_driver: xstage_fa3_set_trace_buffer rejected the buffer\n");
        std::exit(3);
      }
    } else {
      xstage_fa3_clear_trace_buffer();
    }
    run_mha_fwd_<90, cutlass::bfloat16_t, kHeadDim, kHeadDim, false, false, false, false>(p, 0);
  }
  xstage::check_cuda(cudaGetLastError(), "FA3 launch");
}

std::tuple<int, int> block_mn(bool causal) {
  const auto t = tile_size_fwd_sm90(kHeadDim, kHeadDim, causal, false, 2, false, false, false);
  return {std::get<0>(t), std::get<1>(t)};
}

float bf16_to_float(__nv_bfloat16 x) {
  uint16_t bits;
  std::memcpy(&bits, &x, 2);
  const uint32_t w = (uint32_t)bits << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

std::vector<float> to_host(const __nv_bfloat16* d, size_t n) {
  std::vector<__nv_bfloat16> raw(n);
  xstage::check_cuda(cudaMemcpy(raw.data(), d, n * 2, cudaMemcpyDefault), "copy to host");
  std::vector<float> out(n);
  std::transform(raw.begin(), raw.end(), out.begin(), bf16_to_float);
  return out;
}

// softmax(scale * Q K^T [masked]) V and the log-sum-exp per row, in double, from the bf16 inputs.
void reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
               std::vector<float>& o, std::vector<float>& lse) {
  const double scale = 1.0 / std::sqrt((double)kHeadDim);
  o.assign((size_t)c.batch * c.seqlen * c.heads * kHeadDim, 0.f);
  lse.assign((size_t)c.batch * c.heads * c.seqlen, 0.f);
  std::vector<double> s(c.seqlen), acc(kHeadDim);
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads; ++h)
      for (int i = 0; i < c.seqlen; ++i) {
        const float* qi = &q[(((size_t)b * c.seqlen + i) * c.heads + h) * kHeadDim];
        const int last = c.causal ? i : c.seqlen - 1;
        double mx = -1e300;
        for (int j = 0; j <= last; ++j) {
          const float* kj = &k[(((size_t)b * c.seqlen + j) * c.heads + h) * kHeadDim];
          double dot = 0;
          for (int d = 0; d < kHeadDim; ++d) dot += (double)qi[d] * kj[d];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j <= last; ++j) {
          const double e = std::exp(s[j] - mx);
          sum += e;
          const float* vj = &v[(((size_t)b * c.seqlen + j) * c.heads + h) * kHeadDim];
          for (int d = 0; d < kHeadDim; ++d) acc[d] += e * vj[d];
        }
        float* oi = &o[(((size_t)b * c.seqlen + i) * c.heads + h) * kHeadDim];
        for (int d = 0; d < kHeadDim; ++d) oi[d] = (float)(acc[d] / sum);
        lse[((size_t)b * c.heads + h) * c.seqlen + i] = (float)(mx + std::log(sum));  // FA3's LSE layout (b, h, s)
      }
}

// The K/V steps the recipe records per sampled tile (flash::xstage_fa3::kKvSlots: the tile's last blocks) and its
// sampling period (kKvEvery: the writer's tiles 0, S, 2S, ... of its slice carry them; 0 without K/V steps).
constexpr int kKvSlots = (int)flash::xstage_fa3::kKvSlots;
constexpr uint32_t kKvEvery = flash::xstage_fa3::kKvEvery;

// K/V blocks of Q tile m_block: all of them (non-causal), those up to the diagonal (causal; equal Q and K lengths).
int kv_blocks(const Case& c, int m_block) {
  const auto [bm, bn] = block_mn(c.causal);
  const int keys = c.causal ? std::min(c.seqlen, (m_block + 1) * bm) : c.seqlen;
  return (keys + bn - 1) / bn;
}

// The traced launch's records against the recipe's layout: every issued tile exactly once, as its
// records in this order -- mainloop begin (payload kKvEvery); on a sampled tile (its ordinal in the slice a multiple
// of kKvEvery; none without K/V steps) per K/V step of its last min(K/V blocks, kKvSlots) blocks, in the order
// they ran (K/V block n descending to 0), a kv_step begin and end with payload n, each step beginning at the clock
// its predecessor ended (one mark), the first K/V block's step (when recorded) at the mainloop's begin; mainloop
// end, epilogue begin, epilogue end -- all of its tile id, with non-decreasing clocks, the mainloop's end and the
// epilogue's begin one clock read (the recipe's XSTAGE_FA3_SPAN_STAMP); every slice holding records closed, within
// the capacity. One row per case in records.csv; false when anything differs.
bool records_ok(const xstage::HostBuffer& tb, const Case& c, FILE* f) {
  xstage::check_cuda(cudaDeviceSynchronize(), "FA3 kernel");
  const xstage::DeviceBuffer v = tb.view();
  std::vector<xstage::SliceMeta> meta(v.num_slices);
  std::vector<xstage::Record> rec((size_t)v.num_slices * v.capacity);
  xstage::check_cuda(cudaMemcpy(meta.data(), v.meta, meta.size() * sizeof(meta[0]), cudaMemcpyDeviceToHost), "copy meta");
  xstage::check_cuda(cudaMemcpy(rec.data(), v.records, rec.size() * sizeof(rec[0]), cudaMemcpyDeviceToHost), "copy records");
  const auto [bm, bn] = block_mn(c.causal);
  const int m_blocks = (c.seqlen + bm - 1) / bm;
  std::vector<int> seen((size_t)c.batch * c.heads * m_blocks, 0);
  size_t records = 0, expected_records = 0, kv_step_records = 0;
  int bad_slices = 0, bad_tiles = 0, same_clock = 0;
  auto event = [](const xstage::Record& r) { return (uint32_t)((r.ts_ev >> 48) & 0xFF); };
  auto kind = [](const xstage::Record& r) { return (uint32_t)((r.ts_ev >> 56) & 0x3); };
  auto clock = [](const xstage::Record& r) { return r.ts_ev & 0xFFFFFFFFFFFFull; };
  for (uint32_t s = 0; s < v.num_slices; ++s) {
    const xstage::SliceMeta& m = meta[s];
    records += m.count;
    if ((m.count && !m.closed) || m.count > v.capacity) {
      ++bad_slices;
      continue;
    }
    const xstage::Record* r = &rec[(size_t)s * v.capacity];
    uint32_t pos = 0, ordinal = 0;
    while (pos < m.count) {
      const uint32_t tile = r[pos].tile, b = tile >> 24, h = (tile >> 12) & 0xFFF, mb = tile & 0xFFF;
      if (!(b < (uint32_t)c.batch && h < (uint32_t)c.heads && mb < (uint32_t)m_blocks)) { ++bad_tiles; break; }
      const bool sampled = kKvEvery != 0 && (ordinal++ & (kKvEvery - 1)) == 0;  // S a power of 2 (static_assert in the header)
      const int blocks = kv_blocks(c, (int)mb), steps = sampled ? std::min(blocks, kKvSlots) : 0;
      const uint32_t n = 4 + 2 * (uint32_t)steps;
      if (pos + n > m.count) { ++bad_tiles; break; }
      bool ok = event(r[pos]) == 0 && kind(r[pos]) == xstage::kKindBegin && r[pos].payload == kKvEvery;
      for (int j = 0; j < steps; ++j) {
        const xstage::Record& sb = r[pos + 1 + 2 * j];
        const xstage::Record& se = r[pos + 2 + 2 * j];
        const uint32_t block = (uint32_t)(steps - 1 - j);
        ok = ok && event(sb) == 2 && kind(sb) == xstage::kKindBegin && sb.payload == block && event(se) == 2 &&
             kind(se) == xstage::kKindEnd && se.payload == block && (j == 0 || clock(sb) == clock(r[pos + 2 * j]));
      }
      if (steps > 0 && steps == blocks) ok = ok && clock(r[pos + 1]) == clock(r[pos]);  // the first block's step
      const xstage::Record* t = &r[pos + 1 + 2 * steps];
      ok = ok && event(t[0]) == 0 && kind(t[0]) == xstage::kKindEnd && event(t[1]) == 1 && kind(t[1]) == xstage::kKindBegin &&
           event(t[2]) == 1 && kind(t[2]) == xstage::kKindEnd && t[0].payload == 0 && t[1].payload == 0 && t[2].payload == 0;
      for (uint32_t j = 0; j < n; ++j) ok = ok && r[pos + j].tile == tile && (j == 0 || clock(r[pos + j - 1]) <= clock(r[pos + j]));
      same_clock += clock(t[0]) == clock(t[1]);
      if (ok) {
        ++seen[((size_t)b * c.heads + h) * m_blocks + mb];
      } else {
        ++bad_tiles;
      }
      kv_step_records += 2 * (size_t)steps;
      expected_records += n;
      pos += n;
    }
  }
  const int traced_once = (int)std::count(seen.begin(), seen.end(), 1);
  const bool ok = bad_slices == 0 && bad_tiles == 0 && traced_once == (int)seen.size() && records == expected_records &&
                  same_clock == (int)seen.size();
  std::fprintf(f, "%d,%d,%d,%d,%s,%zu,%d,%zu,%zu,%d,%d,%d,%d\n", c.batch, c.heads, c.seqlen, (int)c.causal, c.dest.c_str(), seen.size(),
               traced_once, records, kv_step_records, bad_slices, bad_tiles, same_clock, ok);
  std::printf("records causal=%d seqlen=%d dest=%s: %d of %zu tiles traced once, %zu records (%zu kv_step), switch at one clock %d -> %s\n",
              (int)c.causal, c.seqlen, c.dest.c_str(), traced_once, seen.size(), records, kv_step_records, same_clock, ok ? "ok" : "WRONG");
  return ok;
}

const char* kRecordsHeader = "batch,heads,seqlen,causal,dest,tiles,tiles_traced_once,records,kv_step_records,bad_slices,bad_tiles,switch_one_clock,ok\n";

int check(const std::string& out, int num_sm) {
  // seqlen 520 is no multiple of either block size (128 x 176 non-causal, 128 x 128 causal): partial m and n blocks
  const Case base{2, 2, 520, false, "local"};
  FILE* f = std::fopen((out + "/check.csv").c_str(), "w");
  std::fprintf(f, "batch,heads,seqlen,causal,dest,build,o_max_abs_err,lse_max_abs_err,same_as_plain,ok\n");
  FILE* fr = std::fopen((out + "/records.csv").c_str(), "w");
  std::fprintf(fr, "%s", kRecordsHeader);
  int bad = 0;
  for (int causal = 0; causal < 2; ++causal) {
    Case c = base;
    c.causal = causal;
    std::vector<float> ref_o, ref_lse;
    bool have_ref = false;
    for (const char* dest : {"local", "host"}) {
      c.dest = dest;
      Tensors t(c);
      if (!have_ref) {
        reference(c, to_host(t.q, t.elems), to_host(t.k, t.elems), to_host(t.v, t.elems), ref_o, ref_lse);
        have_ref = true;  // the inputs depend only on the seeds and sizes, not on dest
      }
      xstage::HostBuffer tb(num_sm, flash::xstage_fa3::kNumRoles, 1024);
      Flash_fwd_params p = make_params(c, t, num_sm);
      std::vector<float> plain_o;
      for (Build b : {Build::kPlain, Build::kTraced, Build::kCleared}) {
        xstage::check_cuda(cudaMemset(t.o, 0, t.elems * 2), "memset(o)");
        launch(b, p, &tb);
        xstage::check_cuda(cudaDeviceSynchronize(), "FA3 kernel");
        if (b == Build::kTraced) bad += !records_ok(tb, c, fr);
        const std::vector<float> o = to_host(t.o, t.elems);
        std::vector<float> lse(ref_lse.size());
        xstage::check_cuda(cudaMemcpy(lse.data(), t.lse, lse.size() * 4, cudaMemcpyDeviceToHost), "copy lse");
        double eo = 0, el = 0;
        for (size_t i = 0; i < o.size(); ++i) eo = std::max(eo, (double)std::fabs(o[i] - ref_o[i]));
        for (size_t i = 0; i < lse.size(); ++i) el = std::max(el, (double)std::fabs(lse[i] - ref_lse[i]));
        if (b == Build::kPlain) plain_o = o;
        const bool same = o == plain_o;
        // bf16 output of values in [-1, 1]: a few bf16 ulps (2^-8 relative); LSE in fp32
        const bool ok = eo < 1.5e-2 && el < 1e-3 && std::isfinite(eo) && std::isfinite(el);
        bad += !ok;
        std::fprintf(f, "%d,%d,%d,%d,%s,%s,%.3e,%.3e,%d,%d\n", c.batch, c.heads, c.seqlen, causal, dest, build_name(b), eo, el, same, ok);
        std::printf("check causal=%d dest=%s build=%s: O max abs err %.3e, LSE max abs err %.3e, same as plain %d -> %s\n",
                    causal, dest, build_name(b), eo, el, same, ok ? "ok" : "WRONG");
      }
    }
  }
  std::fclose(f);
  std::fclose(fr);
  return bad ? 6 : 0;
}

std::vector<Case> parse_cases(int argc, char** argv, int first) {
  std::vector<Case> cases;
  for (int i = first; i < argc; ++i) {
    Case c;
    char dest[16] = {0};
    int causal = 0;
    if (std::sscanf(argv[i], "%d,%d,%d,%d,%15s", &c.batch, &c.heads, &c.seqlen, &causal, dest) != 5 ||
        c.batch < 1 || c.heads < 1 || c.seqlen < 1 || (causal != 0 && causal != 1) ||
        (std::strcmp(dest, "local") != 0 && std::strcmp(dest, "host") != 0)) {
      std::fprintf(stderr, "fa3_driver: bad case '%s' (want batch,heads,seqlen,causal(0|1),dest(local|host))\n", argv[i]);
      std::exit(2);
    }
    c.causal = causal;
    c.dest = dest;
    cases.push_back(c);
  }
  return cases;
}

int bench(const std::string& out, int trials, const std::vector<Case>& cases, int num_sm) {
  const int device = 0;
  FILE* f = std::fopen((out + "/times.csv").c_str(), "w");
  std::fprintf(f, "batch,heads,seqlen,causal,dest,block_m,block_n,tiles,build,trial,position,kernel_ms\n");
  FILE* fr = std::fopen((out + "/records_bench.csv").c_str(), "w");
  std::fprintf(fr, "%s", kRecordsHeader);
  int bad = 0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (const Case& c : cases) {
    Tensors t(c);
    Flash_fwd_params p = make_params(c, t, num_sm);
    const auto [bm, bn] = block_mn(c.causal);
    const int tiles = (c.seqlen + bm - 1) / bm * c.heads * c.batch;
    const uint32_t per_cta = (uint32_t)((tiles + num_sm - 1) / num_sm);
    // at most 4 + 2 * kKvSlots records per tile; dynamic scheduling is uneven
    xstage::HostBuffer tb(num_sm, flash::xstage_fa3::kNumRoles, (4 + 2 * kKvSlots) * per_cta * 4 + 16);
    char label[256];
    std::snprintf(label, sizeof(label),
                  "kernel=fa3 dest=%s shape=b%dh%ds%d%s tiles=%d ctas=%d batch=%d heads=%d seqlen=%d causal=%d block_m=%d block_n=%d head_dim=%d out_bytes=%d kv_every=%u",
                  c.dest.c_str(), c.batch, c.heads, c.seqlen, c.causal ? "c" : "n", tiles, num_sm, c.batch, c.heads, c.seqlen, (int)c.causal,
                  bm, bn, kHeadDim, kOutBytes, kKvEvery);
    const Build order[3] = {Build::kPlain, Build::kTraced, Build::kCleared};
    int last_traced = -1;
    for (int tr = -3; tr < trials; ++tr) {  // three warm-up rounds
      const int shift = ((tr % 3) + 3) % 3;
      for (int pos = 0; pos < 3; ++pos) {
        const Build b = order[(pos + shift) % 3];
        if (b == Build::kTraced) tb.reset();
        char nv[320];
        std::snprintf(nv, sizeof(nv), "%s build=%s trial=%d", label, build_name(b), tr);
        {
          xstage::NvtxRange range(nv);
          cudaEventRecord(e0);
          launch(b, p, &tb);
          cudaEventRecord(e1);
        }
        xstage::check_cuda(cudaEventSynchronize(e1), "FA3 kernel");
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (tr >= 0) std::fprintf(f, "%d,%d,%d,%d,%s,%d,%d,%d,%s,%d,%d,%.5f\n", c.batch, c.heads, c.seqlen, (int)c.causal,
                                  c.dest.c_str(), bm, bn, tiles, build_name(b), tr, pos, ms);
        if (b == Build::kTraced) last_traced = tr;
      }
    }
    std::fflush(f);
    bad += !records_ok(tb, c, fr);  // the last traced trial's records, the ones the dump holds
    char name[512], dump_label[300];
    std::snprintf(name, sizeof(name), "%s/fa3_%s_s%d_%s.xsp", out.c_str(), c.dest.c_str(), c.seqlen, c.causal ? "causal" : "noncausal");
    std::snprintf(dump_label, sizeof(dump_label), "%s trial=%d", label, last_traced);
    tb.write_dump(name, kEventNames, dump_label, device);
    std::printf("case %s: dump %s\n", label, name);
  }
  std::fclose(f);
  std::fclose(fr);
  return bad ? 7 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (std::strcmp(argv[1], "check") != 0 && std::strcmp(argv[1], "bench") != 0) ||
      (std::strcmp(argv[1], "bench") == 0 && argc < 5)) {
    std::fprintf(stderr, "usage: fa3_driver check OUT_DIR | fa3_driver bench OUT_DIR TRIALS batch,heads,seqlen,causal,dest...\n");
    return 2;
  }
  int num_sm = 0;
  xstage::check_cuda(cudaDeviceGetAttribute(&num_sm, cudaDevAttrMultiProcessorCount, 0), "multiProcessorCount");
  const std::string out = argv[2];
  if (std::strcmp(argv[1], "check") == 0) return check(out, num_sm);
  const int trials = std::atoi(argv[3]);
  if (trials < 1) {
    std::fprintf(stderr, "fa3_driver: TRIALS must be >= 1\n");
    return 2;
  }
  return bench(out, trials, parse_cases(argc, argv, 4), num_sm);
}
