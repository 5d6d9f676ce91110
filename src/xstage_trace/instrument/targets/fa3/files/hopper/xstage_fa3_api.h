// xstage-trace setter for FlashAttention-3 (written for xstage-trace; included once, by
// flash_api.cpp / flash_api_stable.cpp). Python: ctypes.CDLL(flash_attn_3._C.__file__).xstage_fa3_set_trace_buffer(
// *ProbeBuffer(num_ctas=grid, roles_per_cta=1, capacity=...).device_fields()).
#pragma once

#include <cstdint>

#include "xstage_fa3.h"

extern "C" __attribute__((visibility("default"))) int xstage_fa3_set_trace_buffer(
    uint64_t meta_ptr, uint64_t records_ptr, uint32_t capacity, uint32_t roles_per_cta, uint32_t num_slices) {
    if (meta_ptr == 0 || records_ptr == 0 || capacity == 0 || roles_per_cta < flash::xstage_fa3::kNumRoles) return -1;
    flash::xstage_fa3::current() = ::xstage::DeviceBuffer{reinterpret_cast<::xstage::SliceMeta*>(meta_ptr),
                                                          reinterpret_cast<::xstage::Record*>(records_ptr),
                                                          capacity, roles_per_cta, num_slices, 0};
    return 0;
}

extern "C" __attribute__((visibility("default"))) void xstage_fa3_clear_trace_buffer() {
    flash::xstage_fa3::current() = ::xstage::DeviceBuffer{};
}
