// The flux recipe's sm80 probe as FLUX uses it: the handle is a member of the epilogue visitor's
// callbacks, built once per tile, and a CTA runs several tiles' epilogues (as cutlass' stream-K
// kernel does). Each CTA of the grid takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... and runs, per
// tile, begin_step for each step and end_epilogue on a fresh Callbacks. With the probes on, the host
// checks that every CTA's slice holds every tile's rs_store span in tile order (begin, end, begin,
// end, ...), that the open anchors are the first epilogue's and that the slice is closed; it prints
// "ok" and exits 0, else names the first mismatch and exits 1. Built without XSTAGE_TRACE, it only
// checks that the macros compile away (the kernel still runs, the slice table stays zero).
#include <cstdio>
#include <cstring>
#include <vector>

#include "xstage_flux.h"

namespace {
constexpr int kCtas = 3;
constexpr int kTiles = 8;  // CTA 0 and 1 run 3 epilogues, CTA 2 runs 2
constexpr int kSteps = 4;
constexpr unsigned kCapacity = 64;

struct Params {
  ::xstage::DeviceBuffer xstage_buf;
};

struct Callbacks {
  XSTAGE_FLUX_PROBE_MEMBER
  const Params& params;
  int tile_idx;
  int thread_idx;
  float* out;
  __device__ Callbacks(const Params& p, int tile, float* o) : params(p), tile_idx(tile), thread_idx(threadIdx.x), out(o) {}
  __device__ void begin_step(int step_idx) {
    XSTAGE_FLUX_RS_BEGIN(params.xstage_buf, step_idx, tile_idx, thread_idx);
    out[(tile_idx * kSteps + step_idx) * blockDim.x + threadIdx.x] = float(tile_idx);
  }
  __device__ void end_epilogue() { XSTAGE_FLUX_RS_END(tile_idx); }
};
}  // namespace

__global__ void epilogues(const __grid_constant__ Params params, float* out) {
  for (int tile = blockIdx.x; tile < kTiles; tile += gridDim.x) {
    Callbacks cb(params, tile, out);
    for (int step = 0; step < kSteps; ++step) cb.begin_step(step);
    __syncthreads();
    cb.end_epilogue();
  }
}

#define CHECK(cond, ...)            \
  do {                              \
    if (!(cond)) {                  \
      std::printf(__VA_ARGS__);     \
      std::printf("\n");            \
      return 1;                     \
    }                               \
  } while (0)

int main() {
  using namespace ::xstage;
  Params params{};
  float* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(float) * kTiles * kSteps * 128) == cudaSuccess, "cudaMalloc out");
  CHECK(cudaMalloc(&params.xstage_buf.meta, sizeof(SliceMeta) * kCtas) == cudaSuccess, "cudaMalloc meta");
  CHECK(cudaMalloc(&params.xstage_buf.records, sizeof(Record) * kCtas * kCapacity) == cudaSuccess, "cudaMalloc records");
  cudaMemset(params.xstage_buf.meta, 0, sizeof(SliceMeta) * kCtas);
  cudaMemset(params.xstage_buf.records, 0, sizeof(Record) * kCtas * kCapacity);
  params.xstage_buf.capacity = kCapacity;
  params.xstage_buf.roles_per_cta = 1;
  params.xstage_buf.num_slices = kCtas;
  epilogues<<<kCtas, 128>>>(params, out);
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "kernel failed: %s", cudaGetErrorString(cudaGetLastError()));
  std::vector<SliceMeta> meta(kCtas);
  std::vector<Record> rec(kCtas * kCapacity);
  cudaMemcpy(meta.data(), params.xstage_buf.meta, sizeof(SliceMeta) * kCtas, cudaMemcpyDeviceToHost);
  cudaMemcpy(rec.data(), params.xstage_buf.records, sizeof(Record) * kCtas * kCapacity, cudaMemcpyDeviceToHost);
#ifdef XSTAGE_TRACE
  for (int cta = 0; cta < kCtas; ++cta) {
    const SliceMeta& m = meta[cta];
    const unsigned tiles = (kTiles - cta + kCtas - 1) / kCtas;
    CHECK(m.count == 2 * tiles, "cta %d: count %u, expected %u (2 records per tile)", cta, m.count, 2 * tiles);
    CHECK(m.closed == 1, "cta %d: not closed", cta);
    CHECK(m.clk_open != 0 && m.gt_open != 0 && m.gt_close >= m.gt_open, "cta %d: open/close anchors", cta);
    unsigned long long prev = m.clk_open & 0xFFFFFFFFFFFFull;
    for (unsigned i = 0; i < m.count; ++i) {
      const Record& r = rec[cta * kCapacity + i];
      const unsigned event = unsigned(r.ts_ev >> 48) & 0xFF, kind = unsigned(r.ts_ev >> 56) & 0x3;
      const unsigned long long clk = r.ts_ev & 0xFFFFFFFFFFFFull;
      const unsigned tile = cta + kCtas * (i / 2);
      CHECK(event == bytedance::flux::xstage_flux::kEvRsStore && r.tile == tile, "cta %d record %u: event %u tile %u, expected tile %u",
            cta, i, event, r.tile, tile);
      CHECK(kind == (i % 2 == 0 ? unsigned(kKindBegin) : unsigned(kKindEnd)), "cta %d record %u: kind %u", cta, i, kind);
      CHECK(clk >= prev, "cta %d record %u: clock before the previous record's (or the open)", cta, i);
      prev = clk;
    }
  }
#else
  for (int cta = 0; cta < kCtas; ++cta) CHECK(meta[cta].count == 0 && meta[cta].clk_open == 0, "cta %d: probes compiled out wrote", cta);
#endif
  std::printf("ok\n");
  return 0;
}
