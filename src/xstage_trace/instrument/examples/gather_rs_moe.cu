// gather_rs_moe.cu -- reference dependency-coupled kernel in the manner of paper 004's GEMM2+GatherRS
// (docs/model.md §9): the CTA partition C is a launch parameter, chosen by partition_select.hpp.
//
// One persistent launch of C + P(C) CTAs, 256 threads each, one role per CTA (blockIdx.x < C: communication):
//   compute CTAs (P(C) of them) run grouped-GEMM2 tiles Y[rows of expert e, n0:n0+128] = X_e W_e (bf16 operands,
//     fp32 accumulate, WMMA m16n16k16, a 4-stage cp.async pipeline, bf16 Y) over a routed token assignment; the global
//     tile sequence is split-major (all tiles of split 0, then split 1, ...), CTA b takes tiles b, b+P, b+2P, ...;
//     after a tile's rows are stored, the CTA adds 1 to its split's readiness counter (release, gpu scope).
//   communication CTAs (C) serve the splits in order: wait until split s's counter reaches W_comp (acquire),
//     then take comm tiles j = c, c+C, ... of the split (128 tokens x up to 1024 hidden columns): gather the
//     top-k expert rows of each token, reduce them with the router's gate weights and store the bf16 result to
//     the destination: host-mapped pinned memory (the remote path: PCIe stores) or local HBM (the control).
// Residency: the shared-memory footprint (140 KiB) admits one CTA of either role per SM, so o_comp = o_comm = 1
// (the driver reads it from cudaOccupancyMaxActiveBlocksPerMultiprocessor and sizes P(C) = o_comp (G - ceil(C/o_comm))).
//
// Probes (<xstage/probe.cuh>, one slice per CTA, written by thread 0): compute CTAs: comp_tile B/E per tile
// (tile = global tile index; the end record, after the readiness add, carries the split); communication CTAs:
// ready_wait B/E per split (tile = split) and comm_tile B/E per comm tile (tile = s * W_comm + j, payload = bytes
// stored).
//
//   gather_rs_moe --dest host|local --workloads SHAPE:M:SKEW:SEED:CMAX[,...] --out DIR
//                 [--trials N] [--warmup N] [--summary] [--dump-workloads i,j] [--tag T]
//                 [--service FILE]   (the launcher's selector inputs per shape: calibrated service times)
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/xstage_trace/instrument/include \
//        [-DXSTAGE_TRACE] gather_rs_moe.cu -o gather_rs_moe
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <xstage/host.hpp>
#include <xstage/probe.cuh>

#include "partition_select.hpp"

using namespace nvcuda;

enum Event : unsigned { EV_COMP_TILE = 0, EV_READY_WAIT = 1, EV_COMM_TILE = 2 };
static const std::vector<std::string> kEventNames = {"comp_tile", "ready_wait", "comm_tile"};

constexpr int THREADS = 256;
constexpr int TM = 128, TN = 128, BK = 64, STAGES = 4;
constexpr int A_LD = BK + 8, B_LD = TN + 8, C_LD = TN + 4;
constexpr int A_STAGE = TM * A_LD, B_STAGE = BK * B_LD;  // bf16 elements
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;        // 143360: one CTA per SM (228 KiB per SM)
constexpr int COMM_TM = 128, COMM_TN = 1024, MAX_TOPK = 8, MAX_SPLITS = 8;
static_assert(TM * C_LD * 4 <= SMEM_BYTES, "the epilogue's fp32 staging reuses the pipeline's shared memory");
constexpr int COMM_IDX_BYTES = COMM_TM * MAX_TOPK * 8;  // rows_s + gate_s
static_assert(COMM_IDX_BYTES + 2 * 2 * MAX_TOPK * THREADS * 16 <= SMEM_BYTES, "the comm role's indices and gather stages fit");

struct Tile {
  int expert, row0, rows, n0;
};

struct Params {
  const __nv_bfloat16* X;  // [rows_total, K] routed rows, sorted by expert
  const __nv_bfloat16* W;  // [E, K, N]
  __nv_bfloat16* Y;        // [rows_total, N] GEMM2 output (bf16, as the grouped GEMM2 writes it)
  const Tile* tiles;       // global tile sequence, split-major
  const int* row_of;       // [M * topk]: Y row of token t's j-th expert
  const float* gate;       // [M * topk]
  __nv_bfloat16* dest;     // [M, N] destination (host-mapped or local)
  unsigned* ready;         // [L] tiles of split s done
  int K, N, tokens, topk, splits, w_comp, w_comm, comm_ctas, comp_ctas;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(smem)),
               "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_gpu(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// One 128 x 64 A block and one 64 x 128 B block of k-step kt into pipeline stage st.
__device__ __forceinline__ void load_stage(const Params& p, const Tile& t, int kt, __nv_bfloat16* smem, int st) {
  __nv_bfloat16* As = smem + st * (A_STAGE + B_STAGE);
  __nv_bfloat16* Bs = As + A_STAGE;
  const int k0 = kt * BK;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // A: 128 rows x 8 chunks of 16 B
    const int c = threadIdx.x + i * THREADS, r = c >> 3, c8 = c & 7;
    const bool ok = r < t.rows;
    const __nv_bfloat16* src = p.X + (size_t)(t.row0 + (ok ? r : 0)) * p.K + k0 + c8 * 8;
    cp_async16(As + r * A_LD + c8 * 8, src, ok);
  }
  const __nv_bfloat16* wb = p.W + (size_t)t.expert * p.K * p.N + (size_t)k0 * p.N + t.n0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // B: 64 rows x 16 chunks of 16 B
    const int c = threadIdx.x + i * THREADS, r = c >> 4, c16 = c & 15;
    cp_async16(Bs + r * B_LD + c16 * 8, wb + (size_t)r * p.N + c16 * 8, true);
  }
}

__device__ void compute_role(const Params& p, __nv_bfloat16* smem, xstage::DeviceBuffer buf) {
  XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
  const int warp = threadIdx.x / 32, wm = warp >> 2, wn = warp & 3;  // warp tile 64 x 32 at (wm*64, wn*32)
  const int nk = p.K / BK, total = p.w_comp * p.splits;
  float* Cs = reinterpret_cast<float*>(smem);
  for (int ti = blockIdx.x - p.comm_ctas; ti < total; ti += p.comp_ctas) {
    XSTAGE_BEGIN(EV_COMP_TILE, ti);
    const Tile t = p.tiles[ti];
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      if (st < nk) load_stage(p, t, st, smem, st);
      cp_async_commit();
    }
    for (int kt = 0; kt < nk; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      if (kt + STAGES - 1 < nk) load_stage(p, t, kt + STAGES - 1, smem, (kt + STAGES - 1) % STAGES);
      cp_async_commit();
      const __nv_bfloat16* As = smem + (kt % STAGES) * (A_STAGE + B_STAGE);
      const __nv_bfloat16* Bs = As + A_STAGE;
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[4];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb[2];
#pragma unroll
        for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], As + (wm * 64 + i * 16) * A_LD + kk, A_LD);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], Bs + kk * B_LD + wn * 32 + j * 16, B_LD);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the stages: the fp32 staging overwrites them
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(Cs + (wm * 64 + i * 16) * C_LD + wn * 32 + j * 16, acc[i][j], C_LD, wmma::mem_row_major);
    __syncthreads();
#pragma unroll 2
    for (int i = threadIdx.x; i < TM * TN / 8; i += THREADS) {  // only the tile's valid rows (the next expert's follow)
      const int r = i >> 4, c8 = i & 15;
      if (r < t.rows) {
        const float* c = Cs + r * C_LD + c8 * 8;
        const float4 lo = *reinterpret_cast<const float4*>(c), hi = *reinterpret_cast<const float4*>(c + 4);
        __nv_bfloat162 o[4] = {__floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
                               __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w)};
        *reinterpret_cast<uint4*>(p.Y + (size_t)(t.row0 + r) * p.N + t.n0 + c8 * 8) = *reinterpret_cast<uint4*>(o);
      }
    }
    __threadfence();
    __syncthreads();  // all rows stored and fenced; the staging is free for the next tile's loads
    const int split = ti / p.w_comp;
    if (threadIdx.x == 0) red_release_gpu(p.ready + split, 1u);
    XSTAGE_END_P(EV_COMP_TILE, ti, split);
  }
  XSTAGE_PROBE_CLOSE();
}

// acc[0..7] += g * the eight bf16 of v
__device__ __forceinline__ void fma_bf16x8(float (&acc)[8], float g, uint4 v) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] += g * f.x;
    acc[2 * i + 1] += g * f.y;
  }
}

// One communication tile: gather the top-k rows of its tokens, reduce them with the gate weights, store bf16 to
// the destination. Each thread owns 8 columns of 2 token rows per step; the 2 * TOPK 16-byte row pieces of a step
// go to shared memory by cp.async (stage [2][2 * TOPK][THREADS], this thread's column of it), the next step's
// copies are issued before this step's wait, and the reduction reads only after cp.async.wait_group. The wait is a
// hard boundary for ptxas: every load of a step is issued before its first FMA, in the traced and the untraced
// build alike (the probes' registers cannot move the loads into the reduction, as they did with loads to
// registers for TOPK = 8).
template <int TOPK>
__device__ __forceinline__ void gather_issue(const Params& p, const int* rows_s, int r, int r2, int col, uint4* slot) {
#pragma unroll
  for (int k = 0; k < TOPK; ++k) {
    cp_async16(slot + k * THREADS, p.Y + (size_t)rows_s[r * TOPK + k] * p.N + col, true);
    cp_async16(slot + (TOPK + k) * THREADS, p.Y + (size_t)rows_s[r2 * TOPK + k] * p.N + col, true);
  }
}

template <int TOPK>
__device__ __forceinline__ void gather_reduce_tile(const Params& p, const int* rows_s, const float* gate_s,
                                                   uint4* stage, int tok0, int ntok, int ncols, int col0) {
  const int tpr = ncols / 8, rpp = THREADS / tpr;  // threads per token row (8 columns each), rows per pass
  const int r0 = threadIdx.x / tpr, col = col0 + (threadIdx.x % tpr) * 8, step = 2 * rpp;
  if (r0 >= rpp || r0 >= ntok) return;
  gather_issue<TOPK>(p, rows_s, r0, r0 + rpp < ntok ? r0 + rpp : r0, col, stage);
  cp_async_commit();
  int buf = 0;
  for (int r = r0; r < ntok; r += step, buf ^= 1) {
    const int r2 = r + rpp < ntok ? r + rpp : r, rn = r + step;
    if (rn < ntok) gather_issue<TOPK>(p, rows_s, rn, rn + rpp < ntok ? rn + rpp : rn, col, stage + (buf ^ 1) * 2 * TOPK * THREADS);
    cp_async_commit();
    cp_async_wait<1>();  // this step's copies (this thread's own: no barrier needed)
    const uint4* v = stage + buf * 2 * TOPK * THREADS;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && r2 == r) break;
      const int rr = h ? r2 : r;
      float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int k = 0; k < TOPK; ++k) fma_bf16x8(a, gate_s[rr * TOPK + k], v[(h * TOPK + k) * THREADS]);
      __nv_bfloat162 o[4] = {__floats2bfloat162_rn(a[0], a[1]), __floats2bfloat162_rn(a[2], a[3]),
                             __floats2bfloat162_rn(a[4], a[5]), __floats2bfloat162_rn(a[6], a[7])};
      *reinterpret_cast<uint4*>(p.dest + (size_t)(tok0 + rr) * p.N + col) = *reinterpret_cast<uint4*>(o);
    }
  }
  cp_async_wait<0>();
}

template <int TOPK>
__device__ void comm_role(const Params& p, unsigned char* smem_raw, xstage::DeviceBuffer buf) {
  XSTAGE_PROBE_OPEN_IF(buf, 0, threadIdx.x < 32);
  int* rows_s = reinterpret_cast<int*>(smem_raw);                      // [COMM_TM * TOPK]
  float* gate_s = reinterpret_cast<float*>(rows_s + COMM_TM * MAX_TOPK);  // [COMM_TM * TOPK]
  uint4* stage = reinterpret_cast<uint4*>(smem_raw + COMM_IDX_BYTES) + threadIdx.x;  // this thread's gather slots
  const int c = blockIdx.x, width = p.N / p.splits, chunks = (width + COMM_TN - 1) / COMM_TN;
  for (int s = 0; s < p.splits; ++s) {
    if (threadIdx.x == 0) {
      XSTAGE_BEGIN(EV_READY_WAIT, s);
      while (ld_acquire_gpu(p.ready + s) < (unsigned)p.w_comp) __nanosleep(64);
      XSTAGE_END(EV_READY_WAIT, s);
    }
    __syncthreads();
    for (int j = c; j < p.w_comm; j += p.comm_ctas) {
      const int tt = j / chunks, cc = j % chunks;
      const int tok0 = tt * COMM_TM, ntok = min(COMM_TM, p.tokens - tok0);
      const int ncols = min(COMM_TN, width - cc * COMM_TN), col0 = s * width + cc * COMM_TN;
      XSTAGE_BEGIN(EV_COMM_TILE, s * p.w_comm + j);
      for (int i = threadIdx.x; i < ntok * TOPK; i += THREADS) {
        rows_s[i] = p.row_of[(size_t)tok0 * TOPK + i];
        gate_s[i] = p.gate[(size_t)tok0 * TOPK + i];
      }
      __syncthreads();
      gather_reduce_tile<TOPK>(p, rows_s, gate_s, stage, tok0, ntok, ncols, col0);
      __syncthreads();  // before the next tile's indices overwrite these
      XSTAGE_END_P(EV_COMM_TILE, s * p.w_comm + j, (unsigned)(ntok * ncols * 2));
    }
  }
  XSTAGE_PROBE_CLOSE();
}

__global__ void __launch_bounds__(THREADS, 1) gather_rs_kernel(Params p, xstage::DeviceBuffer buf) {
  extern __shared__ __align__(128) unsigned char smem[];
  if ((int)blockIdx.x < p.comm_ctas) {
    if (p.topk == 4) comm_role<4>(p, smem, buf);
    else if (p.topk == 6) comm_role<6>(p, smem, buf);
    else comm_role<8>(p, smem, buf);
  } else
    compute_role(p, reinterpret_cast<__nv_bfloat16*>(smem), buf);
}

// Deterministic operand values (the CPU reference recomputes them): uniform in [-scale, scale), bf16.
__host__ __device__ inline float hash_val(unsigned long long i, unsigned seed, float scale) {
  unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29;
  return ((float)(x & 0xFFFFFF) / 16777216.0f - 0.5f) * 2.0f * scale;
}
__global__ void init_kernel(__nv_bfloat16* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(hash_val(i, seed, scale));
}
// Sum of the raw bf16 bit patterns (order-independent) and the number of poison words (0xFFFF) left.
__global__ void checksum_kernel(const unsigned short* p, size_t n, unsigned long long* out) {
  unsigned long long s = 0, bad = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    s += p[i];
    bad += p[i] == 0xFFFF;
  }
  atomicAdd(out, s);
  atomicAdd(out + 1, bad);
}

struct Shape {
  const char* name;
  int hidden, ffn, experts, topk, splits;
};
// Hidden / expert-FFN sizes, experts and top-k of the three models of paper 004 (Table III); splits as the
// paper's runs (Granite one, the others two). K = the full expert FFN size (one GPU, TP = 1).
static const Shape kShapes[] = {{"granite", 1024, 512, 32, 8, 1}, {"qwen", 2048, 1408, 60, 4, 2}, {"deepseek", 2048, 1408, 64, 6, 2}};

struct Workload {
  Shape shape;
  int tokens;
  double skew;  // expert popularity p_e ~ (rank_e + 1)^-skew over a seeded permutation; 0 = uniform
  unsigned seed;
  int cmax;
};

static void usage() {
  std::fprintf(stderr, "usage: gather_rs_moe --dest host|local --workloads SHAPE:M:SKEW:SEED:CMAX[,...] --out DIR [--trials N] [--warmup N] [--summary] [--dump-workloads i,j] [--tag T] [--service FILE]\n");
  std::exit(2);
}

// Routing: each token picks topk distinct experts, by Gumbel-top-k over log p_e (a seeded mt19937_64);
// gate weights: softmax of the picked experts' Gumbel scores.
struct Routing {
  std::vector<int> expert_of;   // [M * topk]
  std::vector<float> gate;      // [M * topk]
  std::vector<int> rows;        // M_e
};
static Routing route(const Workload& w) {
  const int E = w.shape.experts, k = w.shape.topk, M = w.tokens;
  std::mt19937_64 rng(w.seed);
  std::vector<int> perm(E);
  for (int e = 0; e < E; ++e) perm[e] = e;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<double> logp(E);
  for (int e = 0; e < E; ++e) logp[perm[e]] = -w.skew * std::log((double)e + 1.0);
  std::uniform_real_distribution<double> U(1e-12, 1.0);
  Routing r;
  r.expert_of.resize((size_t)M * k);
  r.gate.resize((size_t)M * k);
  r.rows.assign(E, 0);
  std::vector<std::pair<double, int>> sc(E);
  for (int t = 0; t < M; ++t) {
    for (int e = 0; e < E; ++e) sc[e] = {logp[e] - std::log(-std::log(U(rng))), e};
    std::partial_sort(sc.begin(), sc.begin() + k, sc.end(), [](auto& a, auto& b) { return a.first > b.first; });
    double z = 0;
    for (int j = 0; j < k; ++j) z += std::exp(sc[j].first - sc[0].first);
    for (int j = 0; j < k; ++j) {
      r.expert_of[(size_t)t * k + j] = sc[j].second;
      r.gate[(size_t)t * k + j] = (float)(std::exp(sc[j].first - sc[0].first) / z);
      r.rows[sc[j].second]++;
    }
  }
  return r;
}

// --service FILE: one line per shape, "SHAPE N t_wave_1 .. t_wave_N tau_1 .. tau_N" (ns, C = 1 .. N), the
// calibration's service times (``service_times_ns`` of partition_regret.json, one line per shape).
static bool read_service(const std::string& path, const char* shape, std::vector<double>& tw, std::vector<double>& tau) {
  if (path.empty()) return false;
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) {
    std::fprintf(stderr, "gather_rs_moe: cannot read --service %s\n", path.c_str());
    std::exit(2);
  }
  char name[64];
  int n;
  bool found = false;
  while (!found && std::fscanf(f, "%63s %d", name, &n) == 2 && n > 0 && n <= 64) {
    std::vector<double> a(n), b(n);
    for (double& v : a) std::fscanf(f, "%lf", &v);
    for (double& v : b) std::fscanf(f, "%lf", &v);
    if (std::string(name) == shape) {
      tw = a;
      tau = b;
      found = true;
    }
  }
  std::fclose(f);
  return found;
}

int main(int argc, char** argv) {
  std::string dest = "host", out = ".", wl_arg, tag = "sweep", dump_arg, service_arg;
  int trials = 20, warmup = 2;
  bool summary = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dest" && i + 1 < argc) dest = argv[++i];
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--workloads" && i + 1 < argc) wl_arg = argv[++i];
    else if (a == "--trials" && i + 1 < argc) trials = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) warmup = std::atoi(argv[++i]);
    else if (a == "--summary") summary = true;
    else if (a == "--dump-workloads" && i + 1 < argc) dump_arg = "," + std::string(argv[++i]) + ",";
    else if (a == "--tag" && i + 1 < argc) tag = argv[++i];
    else if (a == "--service" && i + 1 < argc) service_arg = argv[++i];
    else usage();
  }
  if (dest != "host" && dest != "local") usage();
  std::vector<Workload> wls;
  {
    std::string item;
    for (size_t pos = 0; pos <= wl_arg.size(); ++pos) {
      if (pos == wl_arg.size() || wl_arg[pos] == ',') {
        char nm[32];
        int m, cmax;
        unsigned seed;
        double skew;
        if (std::sscanf(item.c_str(), "%31[^:]:%d:%lf:%u:%d", nm, &m, &skew, &seed, &cmax) != 5) usage();
        const Shape* sh = nullptr;
        for (const Shape& s : kShapes)
          if (std::string(s.name) == nm) sh = &s;
        if (!sh || m <= 0 || cmax < 1) usage();
        wls.push_back({*sh, m, skew, seed, cmax});
        item.clear();
      } else {
        item += wl_arg[pos];
      }
    }
  }
#ifdef XSTAGE_TRACE
  const bool traced = true;
#else
  const bool traced = false;
  summary = false;
  dump_arg.clear();
#endif
  xstage::check_cuda(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int G = prop.multiProcessorCount;
  xstage::check_cuda(cudaFuncSetAttribute(gather_rs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES), "smem attr");
  int occ = 0;
  xstage::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, gather_rs_kernel, THREADS, SMEM_BYTES), "occupancy");
  cudaFuncAttributes fa;
  cudaFuncGetAttributes(&fa, gather_rs_kernel);
  const int o_comp = occ, o_comm = occ;  // one kernel: both roles have its footprint
  std::printf("gather_rs_kernel: %d registers, %zu B static + %d B dynamic shared memory, %d threads -> %d CTA(s)/SM (o_comp = o_comm = %d), G = %d\n",
              fa.numRegs, fa.sharedSizeBytes, SMEM_BYTES, THREADS, occ, occ, G);
  {
    FILE* fm = std::fopen((out + "/kernel_" + tag + "_" + dest + (traced ? "_on" : "_off") + ".txt").c_str(), "w");
    std::fprintf(fm, "registers=%d static_smem=%zu dynamic_smem=%d threads=%d occupancy=%d num_sms=%d gpu=%s\n", fa.numRegs,
                 fa.sharedSizeBytes, SMEM_BYTES, THREADS, occ, G, prop.name);
    std::fclose(fm);
  }
  if (occ < 1) return 3;

  const std::string sfx = tag + "_" + dest + (traced ? "_on" : "_off");
  FILE* ft = std::fopen((out + "/times_" + sfx + ".csv").c_str(), "w");
  std::fprintf(ft, "workload,dest,shape,tokens,skew,seed,traced,comm_ctas,compute_ctas,trial,kernel_ms\n");
  FILE* fw = std::fopen((out + "/workloads_" + sfx + ".csv").c_str(), "w");
  std::fprintf(fw, "workload,dest,shape,tokens,skew,seed,hidden,ffn,experts,topk,splits,rows_per_expert,w_comp,w_comm,occupancy,num_sms,c_launch_select,select_ns,check_rel_err,checksum\n");
  FILE* fs = nullptr;
  if (summary) {
    fs = std::fopen((out + "/probes_" + sfx + ".csv").c_str(), "w");
    std::fprintf(fs, "workload,dest,comm_ctas,kernel_ms,span_us,distinct_sms,comp_tile_med_us,comp_tile_mean_us,comp_tiles,comm_tile_med_us,comm_tile_mean_us,comm_tiles,"
                     "comp_end_us,ready_us_s0,ready_us_s1,comm_done_us_s0,comm_done_us_s1,wait_sum_us_s0,wait_sum_us_s1,wait_max_us_s0,wait_max_us_s1,comm_busy_us\n");
  }
  unsigned long long* dsum;
  cudaMalloc(&dsum, 2 * sizeof(unsigned long long));
  unsigned* ready;
  cudaMalloc(&ready, MAX_SPLITS * sizeof(unsigned));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);

  for (size_t wi = 0; wi < wls.size(); ++wi) {
    const Workload& w = wls[wi];
    const Shape& sh = w.shape;
    const int M = w.tokens, N = sh.hidden, K = sh.ffn, E = sh.experts, k = sh.topk, L = sh.splits;
    if ((k != 4 && k != 6 && k != 8) || L > MAX_SPLITS || K % BK || (N / L) % TN || (N / L) % 8) {
      std::fprintf(stderr, "gather_rs_moe: unsupported shape %s\n", sh.name);
      return 2;
    }
    const Routing rt = route(w);
    std::vector<int> off(E + 1, 0);
    for (int e = 0; e < E; ++e) off[e + 1] = off[e] + rt.rows[e];
    const int rows_total = off[E];
    std::vector<int> fill(off.begin(), off.end() - 1), row_of((size_t)M * k);
    for (size_t i = 0; i < row_of.size(); ++i) row_of[i] = fill[rt.expert_of[i]]++;
    const int width = N / L;
    std::vector<Tile> tiles;
    for (int s = 0; s < L; ++s)
      for (int e = 0; e < E; ++e)
        for (int m0 = 0; m0 < rt.rows[e]; m0 += TM)
          for (int n0 = 0; n0 < width; n0 += TN) tiles.push_back({e, off[e] + m0, std::min(TM, rt.rows[e] - m0), s * width + n0});
    const int w_comp = (int)tiles.size() / L;
    const int w_comm = ((M + COMM_TM - 1) / COMM_TM) * ((width + COMM_TN - 1) / COMM_TN);

    // The launcher's choice (docs/model.md §9), from --service's calibrated times for this shape (c_launch = 0
    // without them: the sweep runs every C either way), timed as the launcher runs it.
    xstage_partition::Problem pr{rt.rows.data(), E, M, N, L, TM, TN, COMM_TM, COMM_TN, G, o_comp, o_comm, 16};
    std::vector<double> tw(16, 30000.0), tau(16, 30000.0);  // placeholders when --service has no line for this shape
    const bool have_service = read_service(service_arg, sh.name, tw, tau);
    xstage_partition::Service sv{tw.data(), tau.data(), (int)tw.size()};
    const int reps = 20000;
    volatile int sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      asm volatile("" : : "r"(&pr), "r"(&sv) : "memory");  // the inputs may have changed: a fresh call each time
      sink = sink + xstage_partition::select_comm_ctas(pr, sv);
    }
    const double sel_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / reps;
    const int c_launch = have_service ? xstage_partition::select_comm_ctas(pr, sv) : 0;

    __nv_bfloat16 *X, *Wt, *dst = nullptr;
    __nv_bfloat16* Y;
    float* gate_d;
    Tile* tiles_d;
    int* row_of_d;
    void* host_dst = nullptr;
    xstage::check_cuda(cudaMalloc(&X, (size_t)rows_total * K * 2), "cudaMalloc(X)");
    xstage::check_cuda(cudaMalloc(&Wt, (size_t)E * K * N * 2), "cudaMalloc(W)");
    xstage::check_cuda(cudaMalloc(&Y, (size_t)rows_total * N * 2), "cudaMalloc(Y)");
    cudaMalloc(&tiles_d, tiles.size() * sizeof(Tile));
    cudaMalloc(&row_of_d, row_of.size() * 4);
    cudaMalloc(&gate_d, rt.gate.size() * 4);
    const size_t dst_bytes = (size_t)M * N * 2;
    if (dest == "host") {
      xstage::check_cuda(cudaHostAlloc(&host_dst, dst_bytes, cudaHostAllocMapped), "cudaHostAlloc");
      cudaHostGetDevicePointer((void**)&dst, host_dst, 0);
    } else {
      xstage::check_cuda(cudaMalloc(&dst, dst_bytes), "cudaMalloc(dest)");
    }
    const unsigned xseed = w.seed * 2 + 1, wseed = 7919u * (unsigned)(sh.ffn + sh.hidden);
    init_kernel<<<1024, 256>>>(X, (size_t)rows_total * K, xseed, 1.0f);
    init_kernel<<<1024, 256>>>(Wt, (size_t)E * K * N, wseed, 0.05f);
    cudaMemcpy(tiles_d, tiles.data(), tiles.size() * sizeof(Tile), cudaMemcpyHostToDevice);
    cudaMemcpy(row_of_d, row_of.data(), row_of.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(gate_d, rt.gate.data(), rt.gate.size() * 4, cudaMemcpyHostToDevice);
    xstage::check_cuda(cudaDeviceSynchronize(), "init");

    std::vector<int> cs;
    for (int c = 1; c <= w.cmax; ++c)
      if (o_comp * (G - (c + o_comm - 1) / o_comm) > 0) cs.push_back(c);
    auto params = [&](int c) {
      Params p{X, Wt, Y, tiles_d, row_of_d, gate_d, dst, ready, K, N, M, k, L, w_comp, w_comm, c, o_comp * (G - (c + o_comm - 1) / o_comm)};
      return p;
    };
    const size_t min_p = (size_t)params(cs.back()).comp_ctas;
    const uint32_t cap = (uint32_t)std::max((size_t)(2 * L + 2 * (size_t)w_comm * L + 8), 2 * ((tiles.size() + min_p - 1) / min_p) + 8);
    auto launch = [&](int c, xstage::DeviceBuffer b) -> float {
      const Params p = params(c);
      cudaMemsetAsync(ready, 0, MAX_SPLITS * sizeof(unsigned));
      cudaEventRecord(e0);
      gather_rs_kernel<<<p.comm_ctas + p.comp_ctas, THREADS, SMEM_BYTES>>>(p, b);
      cudaEventRecord(e1);
      xstage::check_cuda(cudaGetLastError(), "gather_rs_kernel launch");
      xstage::check_cuda(cudaEventSynchronize(e1), "gather_rs_kernel");
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      return ms;
    };
    auto checksum = [&](unsigned long long* v) {
      cudaMemset(dsum, 0, 2 * sizeof(unsigned long long));
      checksum_kernel<<<264, 256>>>((const unsigned short*)dst, (size_t)M * N, dsum);
      xstage::check_cuda(cudaMemcpy(v, dsum, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost), "checksum");
    };

    // Correctness: poisoned destination, one launch at the first C; every word written; sampled tokens against
    // an fp64 CPU reference from the same operand values; then the same checksum after every other C.
    cudaMemset(dst, 0xFF, dst_bytes);
    launch(cs[0], xstage::DeviceBuffer{});
    unsigned long long ref_sum[2];
    checksum(ref_sum);
    if (ref_sum[1] != 0) {
      std::fprintf(stderr, "gather_rs_moe: %llu destination words never written (workload %zu)\n", ref_sum[1], wi);
      return 6;
    }
    double num = 0, den = 0;
    {
      std::vector<__nv_bfloat16> got(N);
      const int sample[6] = {0, 1, M / 3, M / 2, (2 * M) / 3, M - 1};
      constexpr int NCOL = 64;  // checked columns: 64 spread over every split (n = 37 i mod N)
      double ref[NCOL];
      for (int t : sample) {
        cudaMemcpy(got.data(), dst + (size_t)t * N, N * 2, cudaMemcpyDeviceToHost);
        std::fill(ref, ref + NCOL, 0.0);
        for (int j = 0; j < k; ++j) {
          const int e = rt.expert_of[(size_t)t * k + j], row = row_of[(size_t)t * k + j];
          const double g = rt.gate[(size_t)t * k + j];
          for (int kk = 0; kk < K; ++kk) {
            const double xv = __bfloat162float(__float2bfloat16(hash_val((size_t)row * K + kk, xseed, 1.0f)));
            const size_t wrow = ((size_t)e * K + kk) * N;
            for (int i = 0; i < NCOL; ++i)
              ref[i] += g * xv * (double)__bfloat162float(__float2bfloat16(hash_val(wrow + (37 * i) % N, wseed, 0.05f)));
          }
        }
        for (int i = 0; i < NCOL; ++i) {
          const double d = (double)__bfloat162float(got[(37 * i) % N]) - ref[i];
          num += d * d;
          den += ref[i] * ref[i];
        }
      }
    }
    const double rel = std::sqrt(num / den);
    if (!(rel < 1e-2)) {
      std::fprintf(stderr, "gather_rs_moe: WRONG RESULT (workload %zu): rel_err %.3e\n", wi, rel);
      return 6;
    }
    char wname[96];
    std::snprintf(wname, sizeof(wname), "%s_M%d_s%.2f_r%u", sh.name, M, w.skew, w.seed);
    std::string rows_s;
    for (int e = 0; e < E; ++e) rows_s += (e ? " " : "") + std::to_string(rt.rows[e]);
    std::fprintf(fw, "%s,%s,%s,%d,%.3f,%u,%d,%d,%d,%d,%d,%s,%d,%d,%d,%d,%d,%.1f,%.3e,%llu\n", wname, dest.c_str(), sh.name, M, w.skew, w.seed, N, K, E, k, L,
                 rows_s.c_str(), w_comp, w_comm, occ, G, c_launch, sel_ns, rel, ref_sum[0]);
    std::fflush(fw);

    // Interleaved trials: every round runs every C once, the order rotated from round to round.
    std::vector<std::vector<float>> ms(cs.size());
    for (int tr = -warmup; tr < trials; ++tr)
      for (size_t q = 0; q < cs.size(); ++q) {
        const size_t ci = (q + (size_t)(tr + warmup)) % cs.size();
        const float t = launch(cs[ci], xstage::DeviceBuffer{});
        if (tr >= 0) {
          ms[ci].push_back(t);
          std::fprintf(ft, "%s,%s,%s,%d,%.3f,%u,%d,%d,%d,%d,%.5f\n", wname, dest.c_str(), sh.name, M, w.skew, w.seed, traced, cs[ci], params(cs[ci]).comp_ctas, tr, t);
        }
      }
    for (size_t ci = 1; ci < cs.size(); ++ci) {  // bitwise the same output at every C (fixed reduction orders)
      cudaMemset(dst, 0xFF, dst_bytes);
      launch(cs[ci], xstage::DeviceBuffer{});
      unsigned long long s2[2];
      checksum(s2);
      if (s2[0] != ref_sum[0] || s2[1] != 0) {
        std::fprintf(stderr, "gather_rs_moe: CHECKSUM MISMATCH at C=%d (workload %zu): %llu vs %llu, %llu unwritten\n", cs[ci], wi, s2[0], ref_sum[0], s2[1]);
        return 5;
      }
    }
    std::printf("%-26s %s W_comp=%d W_comm=%d rel_err=%.1e select=%.0f ns | median ms:", wname, dest.c_str(), w_comp, w_comm, rel, sel_ns);
    for (size_t ci = 0; ci < cs.size(); ++ci) {
      std::vector<float> v = ms[ci];
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::printf(" %d:%.3f", cs[ci], v[v.size() / 2]);
    }
    std::printf("\n");
    std::fflush(ft);

    if (summary) {  // one traced launch per C: the probes' reduction (and dumps where asked)
      const bool dump = dump_arg.find("," + std::to_string(wi) + ",") != std::string::npos;
      for (int c : cs) {
        const Params p = params(c);
        xstage::HostBuffer tb(p.comm_ctas + p.comp_ctas, 1, cap);
        const float kms = launch(c, tb.view());
        const uint32_t ns = p.comm_ctas + p.comp_ctas;
        xstage::DeviceBuffer v = tb.view();
        std::vector<xstage::SliceMeta> meta(ns);
        std::vector<xstage::Record> rec((size_t)ns * cap);
        cudaMemcpy(meta.data(), v.meta, ns * sizeof(xstage::SliceMeta), cudaMemcpyDeviceToHost);
        cudaMemcpy(rec.data(), v.records, rec.size() * sizeof(xstage::Record), cudaMemcpyDeviceToHost);
        unsigned long long t0g = ~0ull, t1g = 0;
        std::vector<int> sms;
        for (auto& m : meta) {
          if (!m.closed || m.count > cap) {
            std::fprintf(stderr, "gather_rs_moe: probe slice not closed or overflowed (C=%d)\n", c);
            return 7;
          }
          t0g = std::min(t0g, m.gt_open);
          t1g = std::max(t1g, m.gt_close);
          sms.push_back((int)m.smid_open);
        }
        std::sort(sms.begin(), sms.end());
        const int distinct = (int)(std::unique(sms.begin(), sms.end()) - sms.begin());
        std::vector<double> ct, mt;
        double comp_end = 0, ready_t[2] = {0, 0}, done_t[2] = {0, 0}, wsum[2] = {0, 0}, wmax[2] = {0, 0}, busy = 0;
        for (uint32_t sl = 0; sl < ns; ++sl) {
          const xstage::SliceMeta& m = meta[sl];
          const double npc = (double)(m.gt_close - m.gt_open) / (double)(m.clk_close - m.clk_open);
          auto at = [&](const xstage::Record& r) {
            const unsigned long long cyc = ((r.ts_ev & 0xFFFFFFFFFFFFull) - (m.clk_open & 0xFFFFFFFFFFFFull)) & 0xFFFFFFFFFFFFull;
            return ((double)(m.gt_open - t0g) + cyc * npc) * 1e-3;  // us since the first slice opened
          };
          double open_t = -1;
          for (uint32_t i = 0; i < m.count; ++i) {
            const xstage::Record& r = rec[(size_t)sl * cap + i];
            const unsigned ev = (r.ts_ev >> 48) & 0xFF, kind = (r.ts_ev >> 56) & 3;
            const double t = at(r);
            if (kind == xstage::kKindBegin) {
              open_t = t;
              continue;
            }
            const double d = t - open_t;
            if (ev == EV_COMP_TILE) {
              ct.push_back(d);
              comp_end = std::max(comp_end, t);
              if (r.payload < 2) ready_t[r.payload] = std::max(ready_t[r.payload], t);
            } else if (ev == EV_READY_WAIT) {
              if (r.tile < 2) {
                wsum[r.tile] += d;
                wmax[r.tile] = std::max(wmax[r.tile], d);
              }
            } else {
              mt.push_back(d);
              busy += d;
              const unsigned s = r.tile / p.w_comm;
              if (s < 2) done_t[s] = std::max(done_t[s], t);
            }
          }
        }
        auto med = [](std::vector<double> x) {
          if (x.empty()) return 0.0;
          std::nth_element(x.begin(), x.begin() + x.size() / 2, x.end());
          return x[x.size() / 2];
        };
        auto mean = [](const std::vector<double>& x) {
          double s = 0;
          for (double y : x) s += y;
          return x.empty() ? 0.0 : s / x.size();
        };
        std::fprintf(fs, "%s,%s,%d,%.5f,%.2f,%d,%.3f,%.3f,%zu,%.3f,%.3f,%zu,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", wname, dest.c_str(), c, kms,
                     (t1g - t0g) * 1e-3, distinct, med(ct), mean(ct), ct.size(), med(mt), mean(mt), mt.size(), comp_end, ready_t[0], ready_t[1], done_t[0],
                     done_t[1], wsum[0], wsum[1], wmax[0], wmax[1], busy);
        if (dump) {
          char label[256], name[512];
          std::snprintf(label, sizeof(label), "kernel=gather_rs_moe dest=%s shape=%s tokens=%d skew=%.2f seed=%u comm_ctas=%d ctas=%u w_comp=%d w_comm=%d splits=%d control=%d",
                        dest.c_str(), sh.name, M, w.skew, w.seed, c, ns, w_comp, w_comm, L, dest == "local" ? 1 : 0);
          std::snprintf(name, sizeof(name), "%s/grs_%s_%s_C%d.xsp", out.c_str(), dest.c_str(), wname, c);
          tb.write_dump(name, kEventNames, label, 0, 0);
        }
      }
      std::fflush(fs);
    }
    cudaFree(X);
    cudaFree(Wt);
    cudaFree(Y);
    cudaFree(tiles_d);
    cudaFree(row_of_d);
    cudaFree(gate_d);
    if (host_dst) cudaFreeHost(host_dst);
    else cudaFree(dst);
  }
  std::fclose(ft);
  std::fclose(fw);
  if (fs) std::fclose(fs);
  return 0;
}
