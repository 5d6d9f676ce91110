// xstage/host.hpp -- host side of the probes: allocate the trace buffer, hand it to kernels,
// write the dump file (format: docs/probe-format.md, version 1). Needs the CUDA runtime.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <xstage/probe.cuh>

namespace xstage {

// On-disk header: 448 bytes, little endian.
struct FileHeader {
  char magic[8];           // "XSTPROBE"
  uint16_t version;        // kFormatVersion
  uint16_t record_bytes;   // kRecordBytes
  uint32_t header_bytes;   // offset of the first record
  uint32_t num_slices;
  uint32_t roles_per_cta;
  uint32_t capacity;       // records per slice on the device
  uint32_t num_events;
  uint32_t sm_count;
  uint32_t sm_clock_khz;
  uint32_t device_index;
  uint32_t rank;
  uint64_t reserved[2];
  char gpu_name[128];
  char label[256];         // free text, "key=value key=value" by convention
};
static_assert(sizeof(FileHeader) == 448, "xstage file header must be 448 bytes");
constexpr uint32_t kEventNameBytes = 32;

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "xstage: %s failed: %s\n", what, cudaGetErrorString(e));
    std::exit(3);
  }
}

class HostBuffer {
 public:
  HostBuffer(uint32_t num_ctas, uint32_t roles_per_cta, uint32_t capacity)
      : num_slices_(num_ctas * roles_per_cta), roles_(roles_per_cta), cap_(capacity) {
    check_cuda(cudaMalloc(&meta_, sizeof(SliceMeta) * num_slices_), "cudaMalloc(meta)");
    check_cuda(cudaMalloc(&rec_, sizeof(Record) * (size_t)num_slices_ * cap_), "cudaMalloc(records)");
    reset();
  }
  ~HostBuffer() {
    cudaFree(meta_);
    cudaFree(rec_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  DeviceBuffer view() const { return DeviceBuffer{meta_, rec_, cap_, roles_, num_slices_, 0}; }

  void reset(cudaStream_t stream = 0) {
    check_cuda(cudaMemsetAsync(meta_, 0, sizeof(SliceMeta) * num_slices_, stream), "memset(meta)");
  }

  // Copies the buffer back and writes it; the file appears only when complete (tmp + rename).
  void write_dump(const std::string& path, const std::vector<std::string>& event_names,
                  const std::string& label, int device, uint32_t rank = 0) const {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize before dump");
    std::vector<SliceMeta> meta(num_slices_);
    check_cuda(cudaMemcpy(meta.data(), meta_, sizeof(SliceMeta) * num_slices_, cudaMemcpyDeviceToHost),
               "copy meta");
    std::vector<Record> rec((size_t)num_slices_ * cap_);
    check_cuda(cudaMemcpy(rec.data(), rec_, sizeof(Record) * rec.size(), cudaMemcpyDeviceToHost),
               "copy records");
    cudaDeviceProp prop;
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);

    FileHeader h;
    std::memset(&h, 0, sizeof(h));
    std::memcpy(h.magic, "XSTPROBE", 8);
    h.version = kFormatVersion;
    h.record_bytes = kRecordBytes;
    h.num_slices = num_slices_;
    h.roles_per_cta = roles_;
    h.capacity = cap_;
    h.num_events = (uint32_t)event_names.size();
    h.header_bytes = (uint32_t)(sizeof(FileHeader) + kEventNameBytes * h.num_events +
                                sizeof(SliceMeta) * num_slices_);
    h.sm_count = (uint32_t)prop.multiProcessorCount;
    h.sm_clock_khz = (uint32_t)clock_khz;
    h.device_index = (uint32_t)device;
    h.rank = rank;
    std::strncpy(h.gpu_name, prop.name, sizeof(h.gpu_name) - 1);
    std::strncpy(h.label, label.c_str(), sizeof(h.label) - 1);

    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) {
      std::fprintf(stderr, "xstage: cannot write %s\n", tmp.c_str());
      std::exit(3);
    }
    std::fwrite(&h, sizeof(h), 1, f);
    for (const auto& name : event_names) {
      char buf[kEventNameBytes] = {0};
      std::strncpy(buf, name.c_str(), kEventNameBytes - 1);
      std::fwrite(buf, kEventNameBytes, 1, f);
    }
    std::fwrite(meta.data(), sizeof(SliceMeta), num_slices_, f);
    for (uint32_t s = 0; s < num_slices_; ++s) {
      const uint32_t stored = meta[s].count < cap_ ? meta[s].count : cap_;
      std::fwrite(rec.data() + (size_t)s * cap_, sizeof(Record), stored, f);
    }
    const bool ok = std::fflush(f) == 0 && !std::ferror(f);
    std::fclose(f);
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::remove(tmp.c_str());
      std::fprintf(stderr, "xstage: writing %s failed\n", path.c_str());
      std::exit(3);
    }
  }

 private:
  SliceMeta* meta_ = nullptr;
  Record* rec_ = nullptr;
  uint32_t num_slices_, roles_, cap_;
};

}  // namespace xstage
