// NVTX ranges in the "xstage" domain (NVTX3, header-only, ships with the CUDA toolkit).
//
// The drivers mark each launch with a range whose message is the launch label, so that
// `nsys profile --nvtx-domain-include=xstage` keeps only ours and `xstage-trace analyze --nvtx`
// selects kernels by it. The domain name matches xstage_trace.instrument.buffer.NVTX_DOMAIN.
#pragma once
#include <nvtx3/nvToolsExt.h>

namespace xstage {

inline nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("xstage");
  return d;
}

// RAII range: pushed on construction, popped on destruction, in the xstage domain.
class NvtxRange {
 public:
  explicit NvtxRange(const char* message) {
    nvtxEventAttributes_t a = {};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = message;
    nvtxDomainRangePushEx(nvtx_domain(), &a);
  }
  ~NvtxRange() { nvtxDomainRangePop(nvtx_domain()); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace xstage
