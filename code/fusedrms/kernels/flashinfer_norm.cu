// C entry points for FlashInfer's norm kernels (flashinfer/norm.cuh, header-only), so that a
// plain nvcc shared library can be launched through ctypes on torch tensors' data_ptr().
// dtype: 0 = float16, 1 = bfloat16, 2 = float32 (FusedAddRMSNorm, RMSNorm); the FP8 block
// quantizer takes bfloat16 or float16 in and writes float8_e4m3 codes. enable_pdl: launch with
// programmatic dependent launch, as FlashInfer's Python API does by default on sm_90 and later.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "flashinfer/norm.cuh"

using flashinfer::norm::FusedAddRMSNorm;
using flashinfer::norm::FusedAddRMSNormFP8BlockQuant;
using flashinfer::norm::RMSNorm;

extern "C" {

// residual <- input + residual (in input's dtype); input <- rmsnorm(residual) * weight.
int fi_fused_add_rmsnorm(int dtype, void* input, void* residual, void* weight, unsigned rows,
                         unsigned d, unsigned stride_input, unsigned stride_residual, float eps,
                         int enable_pdl, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  switch (dtype) {
    case 0:
      e = FusedAddRMSNorm<half>(static_cast<half*>(input), static_cast<half*>(residual),
                                static_cast<half*>(weight), rows, d, stride_input,
                                stride_residual, eps, enable_pdl != 0, s);
      break;
    case 1:
      e = FusedAddRMSNorm<__nv_bfloat16>(
          static_cast<__nv_bfloat16*>(input), static_cast<__nv_bfloat16*>(residual),
          static_cast<__nv_bfloat16*>(weight), rows, d, stride_input, stride_residual, eps,
          enable_pdl != 0, s);
      break;
    case 2:
      e = FusedAddRMSNorm<float>(static_cast<float*>(input), static_cast<float*>(residual),
                                 static_cast<float*>(weight), rows, d, stride_input,
                                 stride_residual, eps, enable_pdl != 0, s);
      break;
    default:
      return -1;
  }
  return static_cast<int>(e == cudaSuccess ? cudaGetLastError() : e);
}

int fi_rmsnorm(int dtype, void* input, void* weight, void* output, unsigned rows, unsigned d,
               unsigned stride_input, unsigned stride_output, float eps, int enable_pdl,
               void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e;
  switch (dtype) {
    case 0:
      e = RMSNorm<half>(static_cast<half*>(input), static_cast<half*>(weight),
                        static_cast<half*>(output), rows, d, stride_input, stride_output, eps,
                        enable_pdl != 0, s);
      break;
    case 1:
      e = RMSNorm<__nv_bfloat16>(static_cast<__nv_bfloat16*>(input),
                                 static_cast<__nv_bfloat16*>(weight),
                                 static_cast<__nv_bfloat16*>(output), rows, d, stride_input,
                                 stride_output, eps, enable_pdl != 0, s);
      break;
    case 2:
      e = RMSNorm<float>(static_cast<float*>(input), static_cast<float*>(weight),
                         static_cast<float*>(output), rows, d, stride_input, stride_output, eps,
                         enable_pdl != 0, s);
      break;
    default:
      return -1;
  }
  return static_cast<int>(e == cudaSuccess ? cudaGetLastError() : e);
}

// bfloat16 in; residual <- x + r; normed <- rmsnorm(residual) * w (bf16); codes/scales: 1x128
// FP8 blocks of normed, scales column-major with stride scale_stride_m = round_up(rows, 4).
int fi_fused_add_rmsnorm_fp8_block(void* input, void* residual, void* weight, void* codes,
                                   float* scales, void* normed, unsigned rows, unsigned d,
                                   unsigned stride_input, unsigned stride_residual,
                                   unsigned stride_codes, unsigned stride_normed,
                                   unsigned scale_stride_m, float eps, int enable_pdl,
                                   void* stream) {
  cudaError_t e = FusedAddRMSNormFP8BlockQuant<__nv_bfloat16, __nv_fp8_e4m3>(
      static_cast<__nv_bfloat16*>(input), static_cast<__nv_bfloat16*>(residual),
      static_cast<__nv_bfloat16*>(weight), static_cast<__nv_fp8_e4m3*>(codes), scales,
      static_cast<__nv_bfloat16*>(normed), rows, d, stride_input, stride_residual, stride_codes,
      stride_normed, scale_stride_m, eps, enable_pdl != 0,
      static_cast<cudaStream_t>(stream));
  return static_cast<int>(e == cudaSuccess ? cudaGetLastError() : e);
}

}  // extern "C"
