// xstage-trace host side for DeepGEMM (written for xstage-trace, placed by
// `xstage-trace instrument apply --target deepgemm-megamoe`): the trace buffer every instrumented
// sm_100 Mega MoE launch passes as its last kernel argument, and the Python setter for it.
//
// The buffer travels as a kernel argument (not as a device address compiled into a header), so
// one compiled kernel serves every buffer and every process. The launchers and the kernels are
// patched together: a kernel that declares the argument launched by an unpatched `_C` would make
// the driver read one pointer past the launcher's argument array.
#pragma once

#include <cuda_runtime.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>

#include <deep_gemm/xstage_megamoe/probe.cuh>

namespace deep_gemm::xstage_trace_megamoe {

// Must equal xstage::megamoe::kNumRoles in deep_gemm/xstage_megamoe/trace.cuh (device side).
constexpr uint32_t kNumRoles = 2;

// The buffer of the next launches; all-zero (meta == nullptr) means the probes write nothing.
inline ::xstage::DeviceBuffer& current() {
    static ::xstage::DeviceBuffer buffer{};
    return buffer;
}

static void register_apis(pybind11::module_& m) {
    m.def("xstage_set_megamoe_trace_buffer",
          [](uint64_t meta_ptr, uint64_t records_ptr, uint32_t capacity, uint32_t roles_per_cta, uint32_t num_slices) {
              if (roles_per_cta < kNumRoles)
                  throw std::invalid_argument("xstage: roles_per_cta must be at least 2 (mma, epilogue)");
              if (meta_ptr == 0 or records_ptr == 0 or capacity == 0)
                  throw std::invalid_argument("xstage: null trace buffer; use xstage_clear_megamoe_trace_buffer to stop tracing");
              current() = ::xstage::DeviceBuffer{reinterpret_cast<::xstage::SliceMeta*>(meta_ptr),
                                                 reinterpret_cast<::xstage::Record*>(records_ptr),
                                                 capacity, roles_per_cta, num_slices, 0};
          },
          "Trace buffer for the following sm_100 Mega MoE launches (xstage-trace ProbeBuffer.device_fields()).");
    m.def("xstage_clear_megamoe_trace_buffer", []() { current() = ::xstage::DeviceBuffer{}; },
          "Stop writing probe records (kernels keep running with an empty buffer).");
    m.def("xstage_megamoe_roles_per_cta", []() { return kNumRoles; });
}

}  // namespace deep_gemm::xstage_trace_megamoe
