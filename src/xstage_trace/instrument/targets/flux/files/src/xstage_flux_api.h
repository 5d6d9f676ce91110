// xstage-trace setter for FLUX (written for xstage-trace; included once, by src/pybind/ths_op.cc).
// Python: ctypes.CDLL(flux_lib_path).xstage_flux_set_trace_buffer(*ProbeBuffer(num_ctas=grid,
// roles_per_cta=1, capacity=...).device_fields()) before the op is created (Params are built then),
// and buf.reset() before each launch (the sm80 epilogue resumes its CTA's slice from the stored count).
#pragma once

#include <cstdint>

#include "xstage_flux.h"

extern "C" __attribute__((visibility("default"))) int xstage_flux_set_trace_buffer(
    uint64_t meta_ptr, uint64_t records_ptr, uint32_t capacity, uint32_t roles_per_cta, uint32_t num_slices) {
  if (meta_ptr == 0 || records_ptr == 0 || capacity == 0 || roles_per_cta != 1) return -1;
  bytedance::flux::xstage_flux::current() = ::xstage::DeviceBuffer{
      reinterpret_cast<::xstage::SliceMeta*>(meta_ptr), reinterpret_cast<::xstage::Record*>(records_ptr),
      capacity, roles_per_cta, num_slices, 0};
  return 0;
}

extern "C" __attribute__((visibility("default"))) void xstage_flux_clear_trace_buffer() {
  bytedance::flux::xstage_flux::current() = ::xstage::DeviceBuffer{};
}
