// A standalone host program for the kernels of rmsnorm.hip (no Python, no torch).
//
//   AMD:    HIP_PLATFORM=amd hipcc -x hip --offload-arch=gfx90a -O3 rmsnorm_host.cpp -o rmsnorm_host
//   NVIDIA: nvcc -x cu -arch=sm_90 -O3 rmsnorm_host.cpp -o rmsnorm_host
//   no GPU: g++ -x c++ -std=c++17 -O2 -pthread rmsnorm_host.cpp -o rmsnorm_host   (CPU runtime)
//
//   ./rmsnorm_host --rows 1024 --cols 4096 --block 256 --variant all --warmup 10 --repeats 50
//
// Inputs are uniform in [-1, 1) from a fixed seed; every output is checked against a float64 CPU
// reference before and after timing; kernel time is measured with events around each launch (the
// median of the repeats). Prints one RESULT line per variant; exits 1 if any check fails.
#include "../rmsnorm.hip"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
    int rows = 1024, cols = 4096, block = 256, warmup = 10, repeats = 50;
    float eps = 1e-5f;
    unsigned seed = 2026;
    std::string variant = "all";
};

void usage() {
    std::printf("usage: rmsnorm_host [--rows N] [--cols N] [--block N] [--variant "
                "serial|block|shuffle|vectorized|unfused|vectorized_unfused|all] [--warmup N] [--repeats N] [--eps E] [--seed S]\n");
}

bool parse(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") { usage(); std::exit(0); }
        if (i + 1 >= argc) { std::fprintf(stderr, "missing value after %s\n", a.c_str()); return false; }
        const char* v = argv[++i];
        if (a == "--rows") o.rows = std::atoi(v);
        else if (a == "--cols") o.cols = std::atoi(v);
        else if (a == "--block") o.block = std::atoi(v);
        else if (a == "--warmup") o.warmup = std::atoi(v);
        else if (a == "--repeats") o.repeats = std::atoi(v);
        else if (a == "--eps") o.eps = (float)std::atof(v);
        else if (a == "--seed") o.seed = (unsigned)std::strtoul(v, nullptr, 10);
        else if (a == "--variant") o.variant = v;
        else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return false; }
    }
    if (o.rows < 1 || o.cols < 1) { std::fprintf(stderr, "rows and cols must be >= 1\n"); return false; }
    if (o.block < 1 || o.block > 1024 || (o.block & (o.block - 1))) {
        std::fprintf(stderr, "--block must be a power of two from 1 to 1024 (the tree reduction halves "
                             "the active threads each step), got %d\n", o.block);
        return false;
    }
    if (o.repeats < 1 || o.warmup < 0) { std::fprintf(stderr, "--repeats >= 1 and --warmup >= 0\n"); return false; }
    return true;
}

float uniform(uint64_t& state) {  // a fixed 64-bit LCG: the same inputs on every platform
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        hipError_t e_ = (call);                                                       \
        if (e_ != hipSuccess) {                                                       \
            std::fprintf(stderr, "%s failed: %s\n", #call, hipGetErrorString(e_));    \
            std::exit(2);                                                             \
        }                                                                             \
    } while (0)

int launch(const std::string& variant, const float* x, const float* w, float* y, float* workspace,
           const Options& o) {
    if (variant == "serial") return fusedrms_rmsnorm_serial(0, x, w, y, o.rows, o.cols, o.cols, o.eps, o.block, 0);
    if (variant == "block") return fusedrms_rmsnorm_block(0, x, w, y, o.rows, o.cols, o.cols, o.eps, o.block, 0);
    if (variant == "shuffle") return fusedrms_rmsnorm_shuffle(0, x, w, y, o.rows, o.cols, o.cols, o.eps, o.block, 0);
    if (variant == "vectorized") return fusedrms_rmsnorm_vectorized(0, x, w, y, o.rows, o.cols, o.cols, o.eps, o.block, 0);
    if (variant == "unfused") return fusedrms_rmsnorm_unfused(0, x, w, y, workspace, o.rows, o.cols, o.cols, o.eps, o.block, 0);
    return fusedrms_rmsnorm_vectorized_unfused(0, x, w, y, workspace, o.rows, o.cols, o.cols, o.eps, o.block, 0);
}

// Largest error against the float64 reference, or NaN if the output holds a NaN.
bool check(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& y,
           const Options& o, double& max_abs, double& max_rel) {
    const double rtol = (std::sqrt((double)o.cols) + 8.0) * std::ldexp(1.0, -24) + 2 * std::ldexp(1.0, -24);
    const double atol = 1.17549435e-38;
    bool ok = true;
    max_abs = max_rel = 0.0;
    for (int r = 0; r < o.rows; ++r) {
        double ss = 0.0;
        for (int c = 0; c < o.cols; ++c) ss += (double)x[(size_t)r * o.cols + c] * x[(size_t)r * o.cols + c];
        const double inv = 1.0 / std::sqrt(ss / o.cols + (double)o.eps);
        for (int c = 0; c < o.cols; ++c) {
            const size_t i = (size_t)r * o.cols + c;
            const double want = (double)x[i] * inv * w[c];
            const double err = std::fabs((double)y[i] - want);
            if (!(err <= atol + rtol * std::fabs(want))) ok = false;  // NaN fails too
            max_abs = std::max(max_abs, std::isnan(err) ? INFINITY : err);
            if (want != 0) max_rel = std::max(max_rel, err / std::fabs(want));
        }
    }
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse(argc, argv, o)) { usage(); return 2; }
    const std::vector<std::string> all = {"serial", "block", "shuffle", "vectorized", "unfused", "vectorized_unfused"};
    std::vector<std::string> variants;
    if (o.variant == "all") variants = all;
    else if (std::find(all.begin(), all.end(), o.variant) != all.end()) variants = {o.variant};
    else { std::fprintf(stderr, "unknown variant %s\n", o.variant.c_str()); usage(); return 2; }

    const size_t n = (size_t)o.rows * o.cols;
    std::vector<float> hx(n), hw(o.cols), hy(n);
    uint64_t state = o.seed;
    for (auto& v : hx) v = uniform(state);
    for (auto& v : hw) v = uniform(state);
    float *x, *w, *y, *workspace;
    CHECK(hipMalloc((void**)&x, n * sizeof(float)));
    CHECK(hipMalloc((void**)&w, o.cols * sizeof(float)));
    CHECK(hipMalloc((void**)&y, n * sizeof(float)));
    CHECK(hipMalloc((void**)&workspace, (n + o.rows) * sizeof(float)));
    CHECK(hipMemcpy(x, hx.data(), n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemcpy(w, hw.data(), o.cols * sizeof(float), hipMemcpyHostToDevice));
    hipEvent_t start, stop;
    CHECK(hipEventCreate(&start));
    CHECK(hipEventCreate(&stop));

    std::printf("platform: %s; rows=%d cols=%d block=%d warmup=%d repeats=%d eps=%g\n",
                FUSEDRMS_PLATFORM_NAME, o.rows, o.cols, o.block, o.warmup, o.repeats, o.eps);
    int failures = 0;
    for (const auto& v : variants) {
        Options run = o;
        if (v == "vectorized" && o.cols > 32 * o.block) {  // the row must fit in registers
            while (run.block < 1024 && o.cols > 32 * run.block) run.block *= 2;
            std::printf("note: vectorized needs cols <= 32 * block; using block=%d\n", run.block);
        }
        if (launch(v, x, w, y, workspace, run) != 0) {
            std::printf("RESULT variant=%s ok=0 error=\"%s\"\n", v.c_str(), fusedrms_error_message());
            ++failures;
            continue;
        }
        CHECK(hipDeviceSynchronize());
        CHECK(hipMemcpy(hy.data(), y, n * sizeof(float), hipMemcpyDeviceToHost));
        double max_abs, max_rel;
        bool ok = check(hx, hw, hy, run, max_abs, max_rel);
        for (int i = 0; i < run.warmup; ++i) launch(v, x, w, y, workspace, run);
        std::vector<float> ms(run.repeats);
        for (int i = 0; i < run.repeats; ++i) {
            CHECK(hipEventRecord(start, 0));
            launch(v, x, w, y, workspace, run);
            CHECK(hipEventRecord(stop, 0));
            CHECK(hipEventSynchronize(stop));
            CHECK(hipEventElapsedTime(&ms[i], start, stop));
        }
        CHECK(hipMemcpy(hy.data(), y, n * sizeof(float), hipMemcpyDeviceToHost));
        double after_abs, after_rel;
        ok = check(hx, hw, hy, run, after_abs, after_rel) && ok;  // timing runs must stay correct
        std::sort(ms.begin(), ms.end());
        const double median = run.repeats % 2 ? ms[run.repeats / 2]
                                              : 0.5 * (ms[run.repeats / 2 - 1] + ms[run.repeats / 2]);
        std::printf("RESULT variant=%s rows=%d cols=%d block=%d median_ms=%.6f min_ms=%.6f max_ms=%.6f "
                    "max_abs_err=%.3g max_rel_err=%.3g ok=%d\n", v.c_str(), run.rows, run.cols, run.block,
                    median, ms.front(), ms.back(), std::max(max_abs, after_abs), std::max(max_rel, after_rel),
                    ok ? 1 : 0);
        failures += ok ? 0 : 1;
    }
    hipEventDestroy(start);
    hipEventDestroy(stop);
    hipFree(x); hipFree(w); hipFree(y); hipFree(workspace);
    return failures ? 1 : 0;
}
