// Every probe macro once, in a kernel that does nothing else: with XSTAGE_TRACE undefined the
// compiled code must contain no clock, timer or SM-id reads.
#include <xstage/probe.cuh>

__global__ void probe_sites(xstage::DeviceBuffer buf, float* out, int n) {
  __shared__ xstage::Record stage[16];
  XSTAGE_PROBE_OPEN_SMEM(buf, 0, threadIdx.x < 32, stage, 16);
  XSTAGE_BEGIN(0, blockIdx.x);
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += out[i];
  XSTAGE_MARK(1, blockIdx.x, n);
  XSTAGE_END_P(0, blockIdx.x, n * 4);
  XSTAGE_END(2, blockIdx.x);
  XSTAGE_PROBE_CLOSE();
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void probe_sites_streaming(xstage::DeviceBuffer buf, float* out) {
  XSTAGE_PROBE_OPEN(buf, 0);
  XSTAGE_BEGIN(0, 1);
  out[threadIdx.x] = 1.f;
  XSTAGE_END(0, 1);
  XSTAGE_PROBE_CLOSE();
}

__global__ void probe_sites_one_warp(xstage::DeviceBuffer buf, float* out) {
  XSTAGE_PROBE_OPEN_IF(buf, 1, threadIdx.x >= 32);
  XSTAGE_BEGIN(0, 1);
  out[threadIdx.x] = 1.f;
  XSTAGE_END(0, 1);
  XSTAGE_PROBE_CLOSE();
}
