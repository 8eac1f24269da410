// HIP names used by rmsnorm.hip and the host program, mapped onto CUDA, so nvcc builds the same text:
//   nvcc -x cu -arch=sm_90 rmsnorm.hip
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define FUSEDRMS_PLATFORM_NAME "NVIDIA GPU (nvcc + compat/nvidia.h)"

#define hipLaunchKernelGGL(kernel, grid, block, shared, stream, ...) \
    kernel<<<(grid), (block), (shared), (stream)>>>(__VA_ARGS__)
#define HIP_DYNAMIC_SHARED(type, name) extern __shared__ type name[];

typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipGetLastError cudaGetLastError
#define hipGetErrorString cudaGetErrorString
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipEventCreate cudaEventCreate
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipEventDestroy cudaEventDestroy

#define hipGetDevice cudaGetDevice
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeWarpSize cudaDevAttrWarpSize

// HIP's shuffles take no mask; CUDA's name the lanes that must take part. Not __activemask(): it
// says which lanes happen to be converged at that instant, not which ones the sum needs. The mask
// is every lane of the caller's warp that exists: all 32, or fewer in a block smaller than a warp.
// (The book's kernels reach their shuffles with every thread of the block.)
__device__ __forceinline__ unsigned fusedrms_warp_mask() {
    const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned in_warp = threads - (linear & ~31u);
    return in_warp >= 32 ? 0xffffffffu : (1u << in_warp) - 1u;
}
#define __shfl_xor(v, mask, ...) __shfl_xor_sync(fusedrms_warp_mask(), v, mask, ##__VA_ARGS__)
#define __shfl_down(v, delta, ...) __shfl_down_sync(fusedrms_warp_mask(), v, delta, ##__VA_ARGS__)
#define __shfl(v, lane, ...) __shfl_sync(fusedrms_warp_mask(), v, lane, ##__VA_ARGS__)

__device__ __forceinline__ float fusedrms_half_to_float(unsigned short b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ unsigned short fusedrms_float_to_half(float f) { return __half_as_ushort(__float2half_rn(f)); }
