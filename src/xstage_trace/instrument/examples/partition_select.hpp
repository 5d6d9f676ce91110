// partition_select.hpp -- launch-time choice of the communication-CTA count C (docs/model.md §9, paper 004).
//
// Host-only, no allocation, no CUDA: the launcher of gather_rs_moe.cu calls it before each launch with what it
// knows (routed rows per expert, shapes, occupancy, the calibrated service times) and gets C*. The same
// arithmetic as xstage_trace.analysis.partition_select.select_comm_ctas (the Python reference the tests use):
//   R(C) = ceil(C/o_comm), P(C) = o_comp (G - R(C));  W_comp = sum_e ceil(M_e/T_M) ceil(ceil(N/L)/T_N);
//   W_comm = ceil(M/T_M^comm) ceil(ceil(N/L)/T_N^comm);  V_comm = ceil(W_comm/C);
//   A_s = ceil((s+1) W_comp / P(C));  q(C) = V_comm(C) * rho(C);  F_s = max(A_s, F_{s-1}) + q;  T = F_{L-1};
//   C* = argmin T, ties -> fewest empty slots in the last compute wave, then the smaller C.
// rho(C) = max(tau_1, C * tau_bw) / t_wave: one communication wave in compute waves, where a comm tile takes
// tau_1 ns when its CTA's own issue rate limits it and C * tau_bw ns when C CTAs share a destination of
// aggregate bandwidth tile_bytes / tau_bw (the xstage-trace extension of §9's fixed rho; tau_bw = 0 gives it).
#pragma once

namespace xstage_partition {

struct Service {
  double t_wave_ns;   // one compute wave (one compute tile of this K on every compute slot)
  double tau_1_ns;    // one comm tile, CTA-issue bound
  double tau_bw_ns;   // one comm tile's share of the destination's aggregate bandwidth (0: unbounded)
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

inline long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

// Returns C* (0 if no C is legal).
inline int select_comm_ctas(const Problem& p, const Service& s) {
  const long long width = cdiv(p.hidden, p.splits);
  long long mtiles = 0;
  for (int e = 0; e < p.experts; ++e) mtiles += cdiv(p.rows_per_expert[e], p.tile_m);
  const long long w_comp = mtiles * cdiv(width, p.tile_n);
  const long long w_comm = cdiv(p.tokens, p.comm_tile_m) * cdiv(width, p.comm_tile_n);
  int best_c = 0;
  double best_t = 0;
  long long best_empty = 0;
  for (int c = 1; c <= p.max_comm_ctas; ++c) {
    const long long slots = (long long)p.comp_per_sm * (p.num_sms - cdiv(c, p.comm_per_sm));
    if (slots <= 0) break;
    const double tau = s.tau_1_ns > c * s.tau_bw_ns ? s.tau_1_ns : c * s.tau_bw_ns;
    const double q = (double)cdiv(w_comm, c) * tau / s.t_wave_ns;
    double f = 0;
    for (int sp = 0; sp < p.splits; ++sp) {
      const double a = (double)cdiv((sp + 1) * w_comp, slots);
      f = (a > f ? a : f) + q;
    }
    const long long empty = cdiv(w_comp, slots) * slots - w_comp;
    // ties are exact in wave units: compare rounded to 1e-9 waves
    const double t = (double)(long long)(f * 1e9 + 0.5) * 1e-9;
    if (best_c == 0 || t < best_t || (t == best_t && empty < best_empty)) {
      best_c = c;
      best_t = t;
      best_empty = empty;
    }
  }
  return best_c;
}

}  // namespace xstage_partition
