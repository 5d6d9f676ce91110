// Allocator for torch.cuda.CUDAPluggableAllocator (written for xstage-trace): pinned host memory
// mapped into the device's address space, so that a torch tensor on "cuda" lives in host memory
// and a kernel's stores to it (DeepGEMM's TMA stores of D) cross PCIe.
//   nvcc -O2 -shared -Xcompiler -fPIC host_mapped_alloc.cu -o host_mapped_alloc.so
#include <cuda_runtime.h>
#include <sys/types.h>

extern "C" {

void* xstage_host_mapped_alloc(ssize_t size, int device, cudaStream_t stream) {
    void* host = nullptr;
    if (cudaHostAlloc(&host, static_cast<size_t>(size), cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
        return nullptr;
    void* dev = nullptr;
    // With unified addressing (every 64-bit CUDA platform) the device pointer is the host pointer;
    // refuse anything else, since free() gets the device pointer back.
    if (cudaHostGetDevicePointer(&dev, host, 0) != cudaSuccess or dev != host) {
        cudaFreeHost(host);
        return nullptr;
    }
    return dev;
}

void xstage_host_mapped_free(void* ptr, ssize_t size, int device, cudaStream_t stream) {
    cudaFreeHost(ptr);
}

}  // extern "C"
