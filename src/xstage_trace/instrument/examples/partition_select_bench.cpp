// partition_select_bench.cpp -- partition_select.hpp on the host alone: C* for each problem read from stdin and
// the time of one call (steady_clock over many calls). One problem per line:
//   tokens hidden splits num_sms o_comp o_comm max_c experts M_0 ... M_{E-1} t_wave_1 .. t_wave_maxc tau_1 .. tau_maxc
// prints "C* ns_per_call" per line. Tiles as gather_rs_moe.cu: 128 x 128 compute, 128 x 1024 communication.
// Build: g++ -O2 -std=c++17 partition_select_bench.cpp -o partition_select_bench
#include <chrono>
#include <cstdio>
#include <vector>

#include "partition_select.hpp"

int main() {
  int tokens, hidden, splits, sms, oc, om, maxc, experts;
  while (std::scanf("%d %d %d %d %d %d %d %d", &tokens, &hidden, &splits, &sms, &oc, &om, &maxc, &experts) == 8) {
    std::vector<int> rows(experts);
    for (int& r : rows)
      if (std::scanf("%d", &r) != 1) return 2;
    std::vector<double> tw(maxc), tau(maxc);
    for (double& v : tw)
      if (std::scanf("%lf", &v) != 1) return 2;
    for (double& v : tau)
      if (std::scanf("%lf", &v) != 1) return 2;
    xstage_partition::Problem p{rows.data(), experts, tokens, hidden, splits, 128, 128, 128, 1024, sms, oc, om, maxc};
    xstage_partition::Service s{tw.data(), tau.data(), maxc};
    const int reps = 200000;
    volatile int sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      asm volatile("" : : "r"(&p), "r"(&s) : "memory");  // inputs may have changed: a fresh call each time
      sink = sink + xstage_partition::select_comm_ctas(p, s);
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("%d %.1f\n", xstage_partition::select_comm_ctas(p, s), ns);
  }
  return 0;
}
