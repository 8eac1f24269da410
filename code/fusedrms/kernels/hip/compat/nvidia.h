// HIP names used by rmsnorm.hip and the host program, mapped onto CUDA, so nvcc builds the same text:
//   nvcc -x cu -arch=sm_90 rmsnorm.hip
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define FUSEDRMS_PLATFORM_NAME "NVIDIA GPU (nvcc + compat/nvidia.h)"
#define FUSEDRMS_WARP_LANES 32

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

// HIP's shuffles take no mask; CUDA's need the lanes taking part.
#define __shfl_xor(v, mask, ...) __shfl_xor_sync(__activemask(), v, mask, ##__VA_ARGS__)
#define __shfl_down(v, delta, ...) __shfl_down_sync(__activemask(), v, delta, ##__VA_ARGS__)
#define __shfl(v, lane, ...) __shfl_sync(__activemask(), v, lane, ##__VA_ARGS__)

__device__ __forceinline__ float fusedrms_half_to_float(unsigned short b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ unsigned short fusedrms_float_to_half(float f) { return __half_as_ushort(__float2half_rn(f)); }
