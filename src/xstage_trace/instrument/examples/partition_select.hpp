// partition_select.hpp -- launch-time choice of the communication-CTA count C (docs/model.md §9, paper 004).
//
// Host-only, no allocation, no CUDA: the launcher of gather_rs_moe.cu calls it before each launch with what it
// knows (routed rows per expert, shapes, occupancy, the calibrated service times) and gets C*. The same
// arithmetic as xstage_trace.analysis.partition_select.select_comm_ctas (the Python reference the tests use):
//   R(C) = ceil(C/o_comm), P(C) = o_comp (G - R(C));  W_comp = sum_e ceil(M_e/T_M) ceil(ceil(N/L)/T_N);
//   W_comm = ceil(M/T_M^comm) ceil(ceil(N/L)/T_N^comm);  V_comm = ceil(W_comm/C);
//   A_s = ceil((s+1) W_comp / P(C)) t_wave(C);  q(C) = V_comm(C) tau(C);  F_s = max(A_s, F_{s-1}) + q;  T = F_{L-1};
//   C* = argmin T, ties -> fewest empty slots in the last compute wave, then the smaller C.
// Service times measured on the kernel (docs/model.md §9 with ρ measured): t_wave(C), one compute wave, and tau(C),
// one communication wave, in ns for C = 1 .. n, read off a calibration run; A_s and q(C) = V_comm(C) tau(C) are taken
// in ns, A_s(C) = ceil((s+1) W_comp / P(C)) t_wave(C), so that T(C) compares across C whose compute waves differ.
// With constant tables this is §9 exactly (rho = tau / t_wave).
#pragma once

namespace xstage_partition {

struct Service {
  const double* t_wave_ns;  // [n]: one compute wave (one compute tile on every compute slot) with C = i + 1 comm CTAs
  const double* tau_ns;     // [n]: one communication wave (one comm tile on every comm CTA) with C = i + 1
  int n;                    // C covered: 1 .. n
};

struct Problem {
  const int* rows_per_expert;  // M_e
  int experts;                 // E
  int tokens;                  // M
  int hidden;                  // N
  int splits;                  // L
  int tile_m, tile_n;          // compute tile
  int comm_tile_m, comm_tile_n;
  int num_sms;                 // G
  int comp_per_sm, comm_per_sm;
  int max_comm_ctas;
};

inline int cdiv(int a, int b) { return (a + b - 1) / b; }
// ceil(a / b) for non-negative integers below 2^31 held in doubles, b < 2^16: a/b is exact when b divides a and
// otherwise at least 1/b from an integer, far above the rounding error, so ceil of the quotient is exact.
// (Truncation and one compare instead of ceil(), which is a libm call without SSE4.1.)
inline double ceil_div(double a, double b) {
  const double q = a / b;
  const double f = (double)(long long)q;
  return f < q ? f + 1.0 : f;
}

constexpr int kMaxCandidates = 64;

// Returns C* (0 if no C is legal). O(E + L·C_max); the per-C work is straight-line double arithmetic.
inline int select_comm_ctas(const Problem& p, const Service& s) {
  const int width = cdiv(p.hidden, p.splits);
  int mtiles = 0;
  if ((p.tile_m & (p.tile_m - 1)) == 0) {  // the usual power-of-two tile: a shift per expert
    const int sh = __builtin_ctz((unsigned)p.tile_m), add = p.tile_m - 1;
    for (int e = 0; e < p.experts; ++e) mtiles += (p.rows_per_expert[e] + add) >> sh;
  } else {
    for (int e = 0; e < p.experts; ++e) mtiles += cdiv(p.rows_per_expert[e], p.tile_m);
  }
  const double w_comp = (double)mtiles * cdiv(width, p.tile_n);
  const double w_comm = (double)cdiv(p.tokens, p.comm_tile_m) * cdiv(width, p.comm_tile_n);
  int n = p.max_comm_ctas < kMaxCandidates ? p.max_comm_ctas : kMaxCandidates;
  if (n > s.n) n = s.n;
  double t[kMaxCandidates], empty[kMaxCandidates];
  for (int i = 0; i < n; ++i) {
    const double c = i + 1;
    const double slots = p.comp_per_sm * (p.num_sms - ceil_div(c, p.comm_per_sm));
    const double q = ceil_div(w_comm, c) * s.tau_ns[i], wave = s.t_wave_ns[i];
    double f = 0;
    for (int sp = 0; sp < p.splits; ++sp) {
      const double a = ceil_div((sp + 1) * w_comp, slots) * wave;
      f = (a > f ? a : f) + q;
    }
    t[i] = slots > 0 ? f : 1e300;
    empty[i] = ceil_div(w_comp, slots) * slots - w_comp;
  }
  int best = -1;
  for (int i = 0; i < n; ++i) {  // within 1e-6 ns is a tie
    if (t[i] >= 1e300) continue;
    if (best < 0 || t[i] < t[best] - 1e-6 || (t[i] <= t[best] + 1e-6 && empty[i] < empty[best])) best = i;
  }
  return best + 1;
}

}  // namespace xstage_partition
