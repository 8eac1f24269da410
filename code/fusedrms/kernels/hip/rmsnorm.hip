// RMSNorm in HIP: y = x * r * w with r = 1 / sqrt(mean(x^2) + eps) per row.
//
// One source, three builds:
//   AMD GPU:    HIP_PLATFORM=amd hipcc -x hip --offload-arch=gfx90a -O3 -fPIC -shared rmsnorm.hip
//   NVIDIA GPU: nvcc -x cu -arch=sm_90 -O3 -shared -Xcompiler -fPIC rmsnorm.hip   (compat/nvidia.h)
//   no GPU:     g++ -x c++ -std=c++17 -O2 -fPIC -shared -pthread rmsnorm.hip   (compat/cpu.h)
// Kernels are launched with hipLaunchKernelGGL (valid C++), never with <<< >>>.
// Lanes per warp come from warpSize in device code (32 on NVIDIA; 64 on CDNA, 32 on RDNA, as the
// target was compiled), never from a compile-time macro: the host pass cannot know the target's.
// Data types: float, fp16 and bf16 storage; all arithmetic in fp32, one cast at the end.
#if defined(__CUDACC__)
#include "compat/nvidia.h"
#elif defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#define FUSEDRMS_PLATFORM_NAME "AMD GPU (hipcc)"
__device__ __forceinline__ float fusedrms_half_to_float(unsigned short b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ unsigned short fusedrms_float_to_half(float f) { return __half_as_ushort(__float2half(f)); }
#else
#include "compat/cpu.h"
#endif

#include <stdint.h>
#include <stdio.h>

// ---- storage types: 16-bit formats are kept as raw bits and converted in registers ----
struct half_bits { unsigned short bits; };
struct bf16_bits { unsigned short bits; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(half_bits v) { return fusedrms_half_to_float(v.bits); }
__device__ __forceinline__ float to_float(bf16_bits v) { return __uint_as_float((unsigned)v.bits << 16); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ half_bits from_float<half_bits>(float v) { return half_bits{fusedrms_float_to_half(v)}; }
template <> __device__ __forceinline__ bf16_bits from_float<bf16_bits>(float v) {
    unsigned u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_bits{(unsigned short)((u >> 16) | 0x40u)};  // keep NaN a NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return bf16_bits{(unsigned short)(u >> 16)};
}

// r = 1 / sqrt(mean(x^2) + eps), or NaN where that denominator left fp32's normal range: the sum
// of squares overflowed, the row holds a NaN or an Inf, or eps = 0 with mean(x^2) < 1.2e-38.
// An overflowed row would otherwise come back as zeros, finite and wrong. One compare per row.
__device__ __forceinline__ float row_scale(float sum_sq, int cols, float eps) {
    const float denominator = sum_sq / cols + eps;
    const bool in_range = denominator >= 1.17549435e-38f && denominator <= 3.40282347e38f;
    return in_range ? rsqrtf(denominator) : __uint_as_float(0x7fc00000u);  // quiet NaN
}

// [book:serial]
// One thread per row: the sum of squares is one long sequential chain.
template <typename T>
__global__ void rmsnorm_serial(const T* x, const T* w, T* y, int rows, int cols,
                               long x_stride, float eps) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const T* x_row = x + row * x_stride;
    float sum_sq = 0.0f;
    for (int col = 0; col < cols; ++col) {
        const float v = to_float(x_row[col]);
        sum_sq += v * v;
    }
    const float r = row_scale(sum_sq, cols, eps);
    for (int col = 0; col < cols; ++col)
        y[(long)row * cols + col] =
            from_float<T>(to_float(x_row[col]) * r * to_float(w[col]));
}
// [/book:serial]

// [book:block]
// One block per row: each thread sums its strided columns, then the block adds
// the partial sums in a shared-memory tree. blockDim.x must be a power of two.
template <typename T>
__global__ void rmsnorm_block(const T* x, const T* w, T* y, int rows, int cols,
                              long x_stride, float eps) {
    HIP_DYNAMIC_SHARED(float, partial)
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const T* x_row = x + row * x_stride;
    float sum_sq = 0.0f;  // a thread with no columns keeps 0, joins the tree
    for (int col = tid; col < cols; col += blockDim.x) {
        const float v = to_float(x_row[col]);
        sum_sq += v * v;
    }
    // [/book:block]
    // [book:block_tree]
    partial[tid] = sum_sq;
    __syncthreads();  // every partial sum is written before anyone reads one
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) partial[tid] += partial[tid + stride];
        __syncthreads();  // all threads, also those that added nothing
    }
    // the mean divides by cols, not by blockDim.x
    const float r = row_scale(partial[0], cols, eps);
    for (int col = tid; col < cols; col += blockDim.x)
        y[(long)row * cols + col] =
            from_float<T>(to_float(x_row[col]) * r * to_float(w[col]));
}
// [/book:block_tree]

// [book:shuffle_sum]
// Block sum with shuffles: lanes of a warp (NVIDIA, 32) or wavefront (AMD, 64
// or 32) exchange registers directly; shared memory is used once, to combine
// one total per warp.
__device__ __forceinline__ float warp_sum(float v, int lanes) {
    for (int mask = lanes / 2; mask > 0; mask >>= 1)
        v += __shfl_xor(v, mask, lanes);
    return v;  // every lane now holds the sum of its warp
}

__device__ float block_sum_shuffle(float partial) {
    HIP_DYNAMIC_SHARED(float, warp_totals)
    const int lanes = (int)blockDim.x < warpSize ? (int)blockDim.x : warpSize;
    const int warp = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    const int warps = blockDim.x / lanes;  // at most 1024 / 32 = 32 <= lanes
    const float mine = warp_sum(partial, lanes);
    if (lane == 0) warp_totals[warp] = mine;
    __syncthreads();  // one barrier: warp totals written before any read
    const float total = lane < warps ? warp_totals[lane] : 0.0f;
    return warp_sum(total, lanes);  // each warp adds them: no second barrier
}
// [/book:shuffle_sum]

// [book:shuffle]
template <typename T>
__global__ void rmsnorm_shuffle(const T* x, const T* w, T* y, int rows,
                                int cols, long x_stride, float eps) {
    const int row = blockIdx.x;
    const T* x_row = x + row * x_stride;
    float sum_sq = 0.0f;
    for (int col = threadIdx.x; col < cols; col += blockDim.x) {
        const float v = to_float(x_row[col]);
        sum_sq += v * v;
    }
    const float r = row_scale(block_sum_shuffle(sum_sq), cols, eps);
    for (int col = threadIdx.x; col < cols; col += blockDim.x)
        y[(long)row * cols + col] =
            from_float<T>(to_float(x_row[col]) * r * to_float(w[col]));
}
// [/book:shuffle]

// [book:vectorized]
// 16-byte loads (4 floats or 8 halves at once), and the row stays in registers
// between the two passes, so x is read from memory once. VEC = 1 is the
// fallback for rows that are not 16-byte aligned or whose width is not a
// multiple of the vector.
constexpr int ROW_FLOATS_PER_THREAD = 32;  // registers: cols <= 32 * blockDim.x

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack { T v[VEC]; };
// [/book:vectorized]

// [book:vectorized_load]
template <typename T, int VEC>
__global__ void rmsnorm_vectorized(const T* x, const T* w, T* y, int rows,
                                   int cols, long x_stride, float eps) {
    using P = Pack<T, VEC>;
    constexpr int PACKS = ROW_FLOATS_PER_THREAD / VEC;
    const int packs_in_row = cols / VEC;
    const P* x_row = reinterpret_cast<const P*>(x + blockIdx.x * x_stride);
    P held[PACKS];  // the row as loaded: 16-bit formats stay 16-bit
    float sum_sq = 0.0f;
#pragma unroll
    for (int i = 0; i < PACKS; ++i) {
        const int p = threadIdx.x + i * blockDim.x;
        if (p < packs_in_row) {
            held[i] = x_row[p];
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                sum_sq += to_float(held[i].v[j]) * to_float(held[i].v[j]);
        }
    }
    // [/book:vectorized_load]
    // [book:vectorized_scale]
    const float r = row_scale(block_sum_shuffle(sum_sq), cols, eps);
    const P* w_packs = reinterpret_cast<const P*>(w);
    P* y_row = reinterpret_cast<P*>(y + (long)blockIdx.x * cols);
#pragma unroll
    for (int i = 0; i < PACKS; ++i) {
        const int p = threadIdx.x + i * blockDim.x;
        if (p < packs_in_row) {
            const P wp = w_packs[p];
            P out;
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                out.v[j] = from_float<T>(to_float(held[i].v[j]) * r
                                         * to_float(wp.v[j]));
            y_row[p] = out;
        }
    }
}
// [/book:vectorized_scale]

// The unfused pipeline: three kernels, two intermediates in global memory (the
// squares, rows*cols floats, and one sum per row), as a framework computing op
// by op would run it. VEC elements per access: 1 for hip.unfused (scalar loads,
// like hip.shuffle), 16 bytes for hip.vectorized_unfused (like hip.vectorized),
// so each fused kernel has an unfused twin that differs only in fusion.
// [book:unfused]
template <typename T, int VEC>
__global__ void square_kernel(const T* x, float* squares, int rows, int cols,
                              long x_stride) {
    const int packs_in_row = cols / VEC;
    const long n = (long)rows * packs_in_row;
    const long step = (long)gridDim.x * blockDim.x;
    const long first = blockIdx.x * (long)blockDim.x + threadIdx.x;
    for (long i = first; i < n; i += step) {
        const long row = i / packs_in_row;
        const Pack<T, VEC> p = reinterpret_cast<const Pack<T, VEC>*>(
            x + row * x_stride)[i % packs_in_row];
        Pack<float, VEC> sq;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float v = to_float(p.v[j]);
            sq.v[j] = v * v;
        }
        reinterpret_cast<Pack<float, VEC>*>(squares)[i] = sq;
    }
}
// [/book:unfused]

// [book:unfused_sum]

template <int VEC>
__global__ void row_sum_kernel(const float* squares, float* row_sums,
                               int cols) {
    const Pack<float, VEC>* row = reinterpret_cast<const Pack<float, VEC>*>(
        squares + (long)blockIdx.x * cols);
    float s = 0.0f;
    for (int p = threadIdx.x; p < cols / VEC; p += blockDim.x) {
        const Pack<float, VEC> sq = row[p];
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += sq.v[j];
    }
    s = block_sum_shuffle(s);
    if (threadIdx.x == 0) row_sums[blockIdx.x] = s;
}
// [/book:unfused_sum]

template <typename T, int VEC>
__global__ void scale_kernel(const T* x, const T* w, const float* row_sums,
                             T* y, int rows, int cols, long x_stride,
                             float eps) {
    using P = Pack<T, VEC>;
    const int packs_in_row = cols / VEC;
    const long n = (long)rows * packs_in_row;
    const long step = (long)gridDim.x * blockDim.x;
    const long first = blockIdx.x * (long)blockDim.x + threadIdx.x;
    for (long i = first; i < n; i += step) {
        const long row = i / packs_in_row;
        const int p = (int)(i % packs_in_row);
        const float r = row_scale(row_sums[row], cols, eps);
        const P xp = reinterpret_cast<const P*>(x + row * x_stride)[p];
        const P wp = reinterpret_cast<const P*>(w)[p];
        P out;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            out.v[j] = from_float<T>(to_float(xp.v[j]) * r * to_float(wp.v[j]));
        reinterpret_cast<P*>(y)[i] = out;
    }
}

// ---------------------------------------------------------------------------------------------
// C ABI: what Python (ctypes) and the host program call. dtype: 0 float32, 1 float16, 2 bfloat16.
// Each returns 0 on success, otherwise an error code; fusedrms_error_message() says what happened.
static char fusedrms_message[1024];

static int fusedrms_fail(const char* what) {
    snprintf(fusedrms_message, sizeof(fusedrms_message), "%s", what);
    return 1;
}

static int fusedrms_status() {
    hipError_t e = hipGetLastError();
    if (e == hipSuccess) return 0;
    snprintf(fusedrms_message, sizeof(fusedrms_message), "%s", hipGetErrorString(e));
    return (int)e == 0 ? 1 : (int)e;
}

static bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

static int check_block(int block) {
    if (block < 1 || block > 1024 || !is_power_of_two(block))
        return fusedrms_fail("block size must be a power of two between 1 and 1024 (the tree "
                             "reduction halves the active threads each step)");
    return 0;
}

#define FUSEDRMS_DISPATCH(dtype, LAUNCH)                      \
    switch (dtype) {                                         \
        case 0: { typedef float T; LAUNCH; break; }          \
        case 1: { typedef half_bits T; LAUNCH; break; }      \
        case 2: { typedef bf16_bits T; LAUNCH; break; }      \
        default: return fusedrms_fail("dtype code must be 0 (float32), 1 (float16) or 2 (bfloat16)"); \
    }

// The three launches of the unfused pipeline; cols must be a multiple of VEC (and of 4 for VEC > 1).
template <typename T, int VEC>
static int launch_unfused(const T* x, const T* w, T* y, float* workspace, int rows, int cols,
                          long x_stride, float eps, int block, hipStream_t stream) {
    constexpr int SUM_VEC = VEC == 1 ? 1 : 4;  // the squares are floats: 16 bytes = 4 of them
    float* squares = workspace;
    float* row_sums = workspace + (long)rows * cols;
    const long packs = (long)rows * (cols / VEC);
    const int grid = (int)((packs + block - 1) / block < 65535 ? (packs + block - 1) / block : 65535);
    int status = 0;
    hipLaunchKernelGGL((square_kernel<T, VEC>), dim3(grid), dim3(block), 0, stream, x, squares, rows, cols, x_stride);
    if ((status = fusedrms_status())) return status;
    hipLaunchKernelGGL((row_sum_kernel<SUM_VEC>), dim3(rows), dim3(block), block * sizeof(float), stream,
                       (const float*)squares, row_sums, cols);
    if ((status = fusedrms_status())) return status;
    hipLaunchKernelGGL((scale_kernel<T, VEC>), dim3(grid), dim3(block), 0, stream, x, w, (const float*)row_sums,
                       y, rows, cols, x_stride, eps);
    return fusedrms_status();
}

extern "C" {

const char* fusedrms_error_message() { return fusedrms_message; }
const char* fusedrms_platform() { return FUSEDRMS_PLATFORM_NAME; }
// Lanes per warp of the current device, as its runtime reports them (0 if it cannot say).
int fusedrms_warp_lanes() {
    int device = 0, lanes = 0;
    if (hipGetDevice(&device) != hipSuccess ||
        hipDeviceGetAttribute(&lanes, hipDeviceAttributeWarpSize, device) != hipSuccess) return 0;
    return lanes;
}

int fusedrms_rmsnorm_serial(int dtype, const void* x, const void* w, void* y, int rows, int cols,
                            long x_stride, float eps, int block, hipStream_t stream) {
    if (check_block(block)) return 1;
    const int grid = (rows + block - 1) / block;
    FUSEDRMS_DISPATCH(dtype, hipLaunchKernelGGL((rmsnorm_serial<T>), dim3(grid), dim3(block), 0, stream,
                                                (const T*)x, (const T*)w, (T*)y, rows, cols, x_stride, eps))
    return fusedrms_status();
}

int fusedrms_rmsnorm_block(int dtype, const void* x, const void* w, void* y, int rows, int cols,
                           long x_stride, float eps, int block, hipStream_t stream) {
    if (check_block(block)) return 1;
    FUSEDRMS_DISPATCH(dtype, hipLaunchKernelGGL((rmsnorm_block<T>), dim3(rows), dim3(block),
                                                block * sizeof(float), stream,
                                                (const T*)x, (const T*)w, (T*)y, rows, cols, x_stride, eps))
    return fusedrms_status();
}

int fusedrms_rmsnorm_shuffle(int dtype, const void* x, const void* w, void* y, int rows, int cols,
                             long x_stride, float eps, int block, hipStream_t stream) {
    if (check_block(block)) return 1;
    FUSEDRMS_DISPATCH(dtype, hipLaunchKernelGGL((rmsnorm_shuffle<T>), dim3(rows), dim3(block),
                                                block * sizeof(float), stream,
                                                (const T*)x, (const T*)w, (T*)y, rows, cols, x_stride, eps))
    return fusedrms_status();
}

// Which vector width the vectorized kernel will use for these pointers (1 = scalar fallback).
// Built with -DFUSEDRMS_SCALAR_LOADS it is always 1: the same kernel, one value per load (chapter
// 3's ladder measures the vectorized kernel's two changes one at a time).
int fusedrms_vector_width(int dtype, const void* x, const void* w, const void* y, int cols, long x_stride) {
#ifdef FUSEDRMS_SCALAR_LOADS
    return 1;
#endif
    const int elem = dtype == 0 ? 4 : 2, vec = 16 / elem;
    const bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)w % 16 == 0) && ((uintptr_t)y % 16 == 0) &&
                         (x_stride * elem) % 16 == 0;
    return (aligned && cols % vec == 0) ? vec : 1;
}

int fusedrms_vectorized_max_cols(int block) { return ROW_FLOATS_PER_THREAD * block; }

int fusedrms_rmsnorm_vectorized(int dtype, const void* x, const void* w, void* y, int rows, int cols,
                                long x_stride, float eps, int block, hipStream_t stream) {
    if (check_block(block)) return 1;
    if (cols > ROW_FLOATS_PER_THREAD * block)
        return fusedrms_fail("the vectorized kernel keeps the row in registers: cols must be at most "
                             "32 * block size; use a larger block (up to 1024) or the block kernel");
    const int vec = fusedrms_vector_width(dtype, x, w, y, cols, x_stride);
    const size_t shared = block * sizeof(float);
    if (vec == 1) {
        FUSEDRMS_DISPATCH(dtype, hipLaunchKernelGGL((rmsnorm_vectorized<T, 1>), dim3(rows), dim3(block), shared,
                                                    stream, (const T*)x, (const T*)w, (T*)y, rows, cols, x_stride, eps))
    } else if (dtype == 0) {
        hipLaunchKernelGGL((rmsnorm_vectorized<float, 4>), dim3(rows), dim3(block), shared, stream,
                           (const float*)x, (const float*)w, (float*)y, rows, cols, x_stride, eps);
    } else if (dtype == 1) {
        hipLaunchKernelGGL((rmsnorm_vectorized<half_bits, 8>), dim3(rows), dim3(block), shared, stream,
                           (const half_bits*)x, (const half_bits*)w, (half_bits*)y, rows, cols, x_stride, eps);
    } else {
        hipLaunchKernelGGL((rmsnorm_vectorized<bf16_bits, 8>), dim3(rows), dim3(block), shared, stream,
                           (const bf16_bits*)x, (const bf16_bits*)w, (bf16_bits*)y, rows, cols, x_stride, eps);
    }
    return fusedrms_status();
}

// workspace: rows * cols + rows floats (the squares, then one sum per row).
int fusedrms_rmsnorm_unfused(int dtype, const void* x, const void* w, void* y, float* workspace,
                             int rows, int cols, long x_stride, float eps, int block, hipStream_t stream) {
    if (check_block(block)) return 1;
    FUSEDRMS_DISPATCH(dtype, return (launch_unfused<T, 1>)((const T*)x, (const T*)w, (T*)y, workspace, rows, cols,
                                                         x_stride, eps, block, stream))
    return 0;
}

// The same pipeline with 16-byte accesses where the pointers and the width allow (else VEC = 1).
int fusedrms_rmsnorm_vectorized_unfused(int dtype, const void* x, const void* w, void* y, float* workspace,
                                        int rows, int cols, long x_stride, float eps, int block,
                                        hipStream_t stream) {
    if (check_block(block)) return 1;
    const bool packed = fusedrms_vector_width(dtype, x, w, y, cols, x_stride) > 1 &&
                        (uintptr_t)workspace % (8 * sizeof(float)) == 0;  // 8 squares per bf16 pack
    if (!packed) return fusedrms_rmsnorm_unfused(dtype, x, w, y, workspace, rows, cols, x_stride, eps, block, stream);
    if (dtype == 0)
        return launch_unfused<float, 4>((const float*)x, (const float*)w, (float*)y, workspace, rows, cols,
                                        x_stride, eps, block, stream);
    if (dtype == 1)
        return launch_unfused<half_bits, 8>((const half_bits*)x, (const half_bits*)w, (half_bits*)y, workspace,
                                            rows, cols, x_stride, eps, block, stream);
    return launch_unfused<bf16_bits, 8>((const bf16_bits*)x, (const bf16_bits*)w, (bf16_bits*)y, workspace,
                                        rows, cols, x_stride, eps, block, stream);
}

}  // extern "C"
