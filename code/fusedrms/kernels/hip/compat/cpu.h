// The CPU runtime: runs the HIP kernels of rmsnorm.hip with no GPU, compiled by a plain C++ compiler.
//
// Each block's threads are real OS threads that meet at a real barrier (__syncthreads), share one
// shared-memory region per block, and exchange values through emulated warp shuffles. Two kinds of
// bug that a GPU hides are turned into clear errors instead of hangs or silent wrong numbers:
//   - a divergent barrier: a thread returns without reaching a __syncthreads() that others wait at;
//   - a shared-memory race: two threads touch the same word, at least one writing, with no
//     __syncthreads() between them (every access is checked against a shadow of the block's memory).
// The first error of a launch is reported by hipGetLastError() / fusedrms_error_message(), in words
// that do not depend on how the OS schedules the threads: a divergent barrier once no thread can
// run, a race as the first by block, barrier, word and threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

#ifndef FUSEDRMS_CPU_WARP
#define FUSEDRMS_CPU_WARP 32  // build with -DFUSEDRMS_CPU_WARP=64 to run as 64-lane wavefronts
#endif
#define FUSEDRMS_PLATFORM_NAME "CPU runtime (OS threads)"
inline constexpr int warpSize = FUSEDRMS_CPU_WARP;  // as HIP and CUDA device code see it

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 { unsigned x, y, z; };

typedef int hipError_t;
typedef void* hipStream_t;
enum { hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorLaunchFailure = 719 };
enum hipMemcpyKind { hipMemcpyHostToDevice, hipMemcpyDeviceToHost, hipMemcpyDeviceToDevice };
enum hipDeviceAttribute_t { hipDeviceAttributeWarpSize };

inline thread_local uint3 threadIdx = {0, 0, 0};
inline thread_local uint3 blockIdx = {0, 0, 0};
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float fusedrms_half_to_float(unsigned short b) { _Float16 h; std::memcpy(&h, &b, 2); return (float)h; }
inline unsigned short fusedrms_float_to_half(float f) {
    _Float16 h = (_Float16)f;  // round to nearest even
    unsigned short b; std::memcpy(&b, &h, 2); return b;
}

namespace fusedrms_cpu {

// One team of OS threads runs the blocks given to it, one block at a time.
// The two lowest thread ids that wrote, and that read, a shared word since the last barrier: enough to
// find the race between the lowest writer and the lowest other thread whatever order they came in.
struct Cell { int writers[2] = {-1, -1}, readers[2] = {-1, -1}; unsigned write_epoch = 0, read_epoch = 0; };

inline void keep_two_lowest(int* two, int t) {
    if (t == two[0] || t == two[1]) return;
    if (two[0] < 0 || t < two[0]) { two[1] = two[0]; two[0] = t; }
    else if (two[1] < 0 || t < two[1]) two[1] = t;
}

// The lowest id in `two` other than `me`, or -1: a thread never races with itself.
inline int lowest_other(const int* two, int me) {
    return two[0] >= 0 && two[0] != me ? two[0] : two[1] >= 0 && two[1] != me ? two[1] : -1;
}

struct Barrier {  // waiters sleep on the barrier's own condition variable (no thundering herd)
    unsigned arrived = 0, generation = 0;
    std::condition_variable cv;
    void reset() { arrived = 0; }
};

struct Team {
    unsigned threads = 0, lanes = 0;
    std::mutex m;
    std::condition_variable cv;
    Barrier block;
    std::unique_ptr<Barrier[]> warps;
    unsigned warp_count = 0;
    std::vector<unsigned> epoch;            // barriers each thread has passed in this block
    std::vector<int> waits_at;              // per thread: NOT_WAITING, AT_SYNCTHREADS or its warp
    std::vector<float> shuffle_slots;       // one per thread
    std::vector<unsigned char> shared;      // the block's shared memory
    std::vector<Cell> shadow;               // one per 4-byte word of shared
    unsigned exited = 0, waiting = 0, block_generation = 0;
    std::string error;                      // the first error in this launch
    // A race stops nothing: the block runs on, barriers and all, and the race reported is the first
    // by (block, barrier, word, threads), whichever access the OS scheduled first.
    std::vector<unsigned> race_key;         // of the race reported so far
    std::string race_text;                  // empty: no race found
};

inline thread_local Team* team = nullptr;
inline thread_local unsigned tid = 0;

inline std::mutex& launch_mutex() { static std::mutex m; return m; }
inline std::string& last_error() { static std::string s; return s; }

inline std::string where() {
    return "block " + std::to_string(blockIdx.x) + ", thread " + std::to_string(tid);
}

inline constexpr int NOT_WAITING = -2, AT_SYNCTHREADS = -1, EXITED = -3;

// Record the first error and wake everybody; callers hold team->m.
inline void fail(const std::string& what) {
    if (team->error.empty()) team->error = what;
    team->cv.notify_all();
    team->block.cv.notify_all();
    for (unsigned w = 0; w < team->warp_count; ++w) team->warps[w].cv.notify_all();
}

// "thread 3", "threads 0-1, 4": the threads in `which`, ascending, consecutive ones as a range.
inline std::string thread_list(const std::vector<unsigned>& which) {
    std::string out = which.size() == 1 ? "thread " : "threads ";
    for (size_t i = 0; i < which.size();) {
        size_t j = i;
        while (j + 1 < which.size() && which[j + 1] == which[j] + 1) ++j;
        if (i > 0) out += ", ";
        out += std::to_string(which[i]) + (j > i ? "-" + std::to_string(which[j]) : "");
        i = j + 1;
    }
    return out;
}

// Every thread of the block has returned or waits and none can go on: say which did what. It is
// reported only once no thread runs, so the message is the same on every run, whichever thread
// the OS scheduled first. Callers hold team->m.
inline void fail_stuck() {
    std::vector<unsigned> exited, at_sync, in_shuffle;
    unsigned barrier = 0;
    for (unsigned t = 0; t < team->threads; ++t) {
        int at = team->waits_at[t];
        if (at == EXITED) exited.push_back(t);
        else if (at == AT_SYNCTHREADS) { at_sync.push_back(t); barrier = team->epoch[t] + 1; }
        else if (at >= 0) in_shuffle.push_back(t);
    }
    std::string block = " of block " + std::to_string(blockIdx.x);
    if (exited.empty()) {
        fail("divergent barriers in block " + std::to_string(blockIdx.x) + ": every thread is waiting, "
             "but at different barriers (" + thread_list(at_sync) + " at __syncthreads(), " +
             thread_list(in_shuffle) + " in a warp shuffle), so none can complete. Every thread must "
             "reach the same barriers in order.");
    } else if (!at_sync.empty()) {
        fail("divergent __syncthreads(): " + thread_list(exited) + block + " returned while " +
             thread_list(at_sync) + " wait at __syncthreads() #" + std::to_string(barrier) +
             ". Every thread must reach every barrier: do not return early or skip a barrier inside a "
             "branch.");
    } else {  // the lanes that returned from a warp whose other lanes wait
        std::vector<unsigned> left;
        for (unsigned t : exited)
            if (std::any_of(in_shuffle.begin(), in_shuffle.end(),
                            [&](unsigned u) { return u / team->lanes == t / team->lanes; }))
                left.push_back(t);
        fail("divergent warp shuffle: " + thread_list(left) + block + " returned while " +
             thread_list(in_shuffle) + " of the same warp(s) wait in a shuffle. Every lane must reach every "
             "shuffle: do not return early or skip a shuffle inside a branch.");
    }
}

// `where_at`: AT_SYNCTHREADS or the warp's index, recorded for fail_stuck.
inline void barrier_wait(Barrier& b, unsigned participants, int where_at, std::unique_lock<std::mutex>& lk) {
    if (!team->error.empty()) return;
    unsigned gen = b.generation;
    if (++b.arrived == participants) {
        team->waiting -= participants - 1;  // the releaser accounts for the threads it releases
        b.arrived = 0;
        ++b.generation;
        b.cv.notify_all();
        return;
    }
    team->waits_at[tid] = where_at;
    if (++team->waiting + team->exited == team->threads) {  // no thread left to release anybody
        fail_stuck();
        return;
    }
    b.cv.wait(lk, [&] { return b.generation != gen || !team->error.empty(); });
    team->waits_at[tid] = NOT_WAITING;
}

inline unsigned warp_of(unsigned t) { return t / team->lanes; }
inline unsigned warp_size_of(unsigned w) { return std::min(team->lanes, team->threads - w * team->lanes); }

inline void syncthreads() {
    std::unique_lock<std::mutex> lk(team->m);
    barrier_wait(team->block, team->threads, AT_SYNCTHREADS, lk);
    ++team->epoch[tid];
}

// A shuffle: every lane of the warp posts its value, then reads the one it asked for.
template <typename F>
inline float shuffle(float v, F source_lane) {
    std::unique_lock<std::mutex> lk(team->m);
    unsigned w = warp_of(tid), lane = tid % team->lanes, n = warp_size_of(w);
    team->shuffle_slots[tid] = v;
    barrier_wait(team->warps[w], n, (int)w, lk);
    int src = source_lane((int)lane);
    float out = (src >= 0 && (unsigned)src < n) ? team->shuffle_slots[w * team->lanes + src] : v;
    barrier_wait(team->warps[w], n, (int)w, lk);
    return out;
}

// Shared memory with a race check on every access.
inline void race(unsigned word, int other, bool other_wrote, bool i_write) {
    if (!team->error.empty()) return;  // after a divergent barrier the epochs no longer line up
    const unsigned me = tid, e = team->epoch[tid], them = (unsigned)other;
    const bool both_write = other_wrote && i_write;
    const unsigned first = both_write ? std::min(me, them) : i_write ? me : them;
    const unsigned second = both_write ? std::max(me, them) : i_write ? them : me;
    std::vector<unsigned> key = {blockIdx.x, e, word, first, second};
    if (!team->race_text.empty() && !(key < team->race_key)) return;
    team->race_key = key;
    team->race_text = "shared-memory race in block " + std::to_string(blockIdx.x) + " on word " +
                      std::to_string(word) + ": " +
                      (both_write ? "threads " + std::to_string(first) + " and " + std::to_string(second) +
                                        " both write it"
                                  : "thread " + std::to_string(first) + " writes it and thread " +
                                        std::to_string(second) + " reads it") +
                      " with no __syncthreads() between them (after barrier #" + std::to_string(e) +
                      "). Add a __syncthreads() between the two accesses.";
}

// Callers hold team->m. Returns false when the access is out of range.
inline bool check_access(size_t byte, size_t size, bool write) {
    if (byte + size > team->shared.size()) {
        fail("shared-memory access out of range in " + where() + ": byte " + std::to_string(byte) +
             " of a " + std::to_string(team->shared.size()) + "-byte block allocation");
        return false;
    }
    unsigned e = team->epoch[tid];
    const int me = (int)tid;
    for (size_t word = byte / 4; word < (byte + size + 3) / 4; ++word) {
        Cell& c = team->shadow[word];
        if (c.write_epoch != e) { c.writers[0] = c.writers[1] = -1; c.write_epoch = e; }
        if (c.read_epoch != e) { c.readers[0] = c.readers[1] = -1; c.read_epoch = e; }
        const int other_writer = lowest_other(c.writers, me);
        if (other_writer >= 0) race((unsigned)word, other_writer, true, write);
        if (write) {
            const int other_reader = lowest_other(c.readers, me);
            if (other_reader >= 0) race((unsigned)word, other_reader, false, true);
            keep_two_lowest(c.writers, me);
        } else {
            keep_two_lowest(c.readers, me);
        }
    }
    return true;
}

template <typename T>
struct SharedRef {
    T* base; size_t i;
    T load() const {
        std::lock_guard<std::mutex> lk(team->m);
        return check_access(i * sizeof(T), sizeof(T), false) ? base[i] : T();
    }
    void store(T v) const {
        std::lock_guard<std::mutex> lk(team->m);
        if (check_access(i * sizeof(T), sizeof(T), true)) base[i] = v;
    }
    operator T() const { return load(); }
    const SharedRef& operator=(T v) const { store(v); return *this; }
    const SharedRef& operator=(const SharedRef& o) const { store(o.load()); return *this; }
    const SharedRef& operator+=(T v) const { store(load() + v); return *this; }
    const SharedRef& operator-=(T v) const { store(load() - v); return *this; }
    const SharedRef& operator*=(T v) const { store(load() * v); return *this; }
};

template <typename T>
struct SharedArray {
    T* base;
    SharedRef<T> operator[](long i) const { return SharedRef<T>{base, (size_t)i}; }
};

template <typename T>
inline SharedArray<T> dynamic_shared() { return SharedArray<T>{reinterpret_cast<T*>(team->shared.data())}; }

// Runs `body` as thread t of every block assigned to this team.
inline void team_thread(Team* tm, unsigned t, dim3 grid, dim3 block, unsigned first, unsigned step,
                        const std::function<void()>* body) {
    team = tm; tid = t;
    threadIdx = {t, 0, 0}; blockDim = block; gridDim = grid;
    for (unsigned b = first; b < grid.x; b += step) {
        blockIdx = {b, 0, 0};
        if (tm->error.empty()) (*body)();
        std::unique_lock<std::mutex> lk(tm->m);
        tm->waits_at[t] = EXITED;
        ++tm->exited;
        // others wait at a barrier this thread skipped, and none is left to release them
        if (tm->error.empty() && tm->waiting > 0 && tm->waiting + tm->exited == tm->threads)
            fail_stuck();
        if (tm->exited == tm->threads) {  // the last thread out resets the block's state
            if (!tm->race_text.empty() && tm->error.empty()) tm->error = tm->race_text;  // no block after it
            tm->exited = 0;
            tm->waiting = 0;
            tm->block.reset();
            for (unsigned k = 0; k < tm->warp_count; ++k) tm->warps[k].reset();
            std::fill(tm->epoch.begin(), tm->epoch.end(), 0u);
            std::fill(tm->waits_at.begin(), tm->waits_at.end(), NOT_WAITING);
            std::fill(tm->shared.begin(), tm->shared.end(), (unsigned char)0xFF);  // NaN poison
            std::fill(tm->shadow.begin(), tm->shadow.end(), Cell());
            ++tm->block_generation;
            tm->cv.notify_all();
        } else {
            unsigned gen = tm->block_generation;
            tm->cv.wait(lk, [&] { return tm->block_generation != gen; });
        }
    }
}

template <typename... KArgs, typename... Args>
hipError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t shared_bytes, hipStream_t, Args... args) {
    std::lock_guard<std::mutex> one_launch_at_a_time(launch_mutex());
    last_error().clear();
    if (block.y != 1 || block.z != 1 || grid.y != 1 || grid.z != 1 || block.x == 0 || block.x > 1024) {
        last_error() = "the CPU runtime supports 1-D grids and 1-D blocks of 1 to 1024 threads";
        return hipErrorInvalidValue;
    }
    if (grid.x == 0) return hipSuccess;
    std::function<void()> body = [=] { kernel(args...); };
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    if (const char* s = std::getenv("FUSEDRMS_CPU_TEAMS")) cores = std::max(1, std::atoi(s));
    unsigned teams = std::min<unsigned>(grid.x, std::min(cores, 4u));
    std::vector<Team> tms(teams);
    for (auto& tm : tms) {
        tm.threads = block.x;
        tm.lanes = warpSize;
        tm.warp_count = (block.x + tm.lanes - 1) / tm.lanes;
        tm.warps.reset(new Barrier[tm.warp_count]);
        tm.epoch.assign(block.x, 0u);
        tm.waits_at.assign(block.x, NOT_WAITING);
        tm.shuffle_slots.assign(block.x, 0.0f);
        tm.shared.assign((shared_bytes + 3) / 4 * 4, (unsigned char)0xFF);
        tm.shadow.assign(tm.shared.size() / 4, Cell());
    }
    std::vector<std::thread> threads;
    threads.reserve((size_t)teams * block.x);
    for (unsigned k = 0; k < teams; ++k)
        for (unsigned t = 0; t < block.x; ++t)
            threads.emplace_back(team_thread, &tms[k], t, grid, block, k, teams, &body);
    for (auto& th : threads) th.join();
    for (auto& tm : tms)
        if (!tm.error.empty()) {
            last_error() = tm.race_text.empty() ? tm.error : tm.race_text;  // a race before anything else
            return hipErrorLaunchFailure;
        }
    return hipSuccess;
}

}  // namespace fusedrms_cpu

#define __syncthreads() fusedrms_cpu::syncthreads()
#define HIP_DYNAMIC_SHARED(type, name) fusedrms_cpu::SharedArray<type> name = fusedrms_cpu::dynamic_shared<type>();
#define hipLaunchKernelGGL(kernel, grid, block, shared, stream, ...) \
    (fusedrms_cpu::hip_status() = fusedrms_cpu::launch(kernel, dim3(grid), dim3(block), shared, stream, __VA_ARGS__))

namespace fusedrms_cpu {
inline hipError_t& hip_status() { static hipError_t s = hipSuccess; return s; }
}

inline float __shfl_xor(float v, int mask, int width = warpSize) {
    return fusedrms_cpu::shuffle(v, [=](int lane) { return (lane & ~(width - 1)) | ((lane ^ mask) & (width - 1)); });
}
inline float __shfl_down(float v, unsigned delta, int width = warpSize) {
    return fusedrms_cpu::shuffle(v, [=](int lane) {
        int src = lane + (int)delta;
        return ((src & ~(width - 1)) == (lane & ~(width - 1))) ? src : lane;
    });
}
inline float __shfl(float v, int src_lane, int width = warpSize) {
    return fusedrms_cpu::shuffle(v, [=](int lane) { return (lane & ~(width - 1)) + (src_lane & (width - 1)); });
}

// Memory and events, so the standalone host program also runs on the CPU runtime.
inline hipError_t hipGetLastError() { hipError_t s = fusedrms_cpu::hip_status(); fusedrms_cpu::hip_status() = hipSuccess; return s; }
inline const char* hipGetErrorString(hipError_t e) {
    if (e == hipSuccess) return "no error";
    return fusedrms_cpu::last_error().empty() ? "CPU runtime error" : fusedrms_cpu::last_error().c_str();
}
inline hipError_t hipMalloc(void** p, size_t n) { *p = std::malloc(n ? n : 1); return *p ? hipSuccess : hipErrorInvalidValue; }
template <typename T> inline hipError_t hipMalloc(T** p, size_t n) { return hipMalloc((void**)p, n); }
inline hipError_t hipFree(void* p) { std::free(p); return hipSuccess; }
inline hipError_t hipMemcpy(void* d, const void* s, size_t n, hipMemcpyKind) { std::memcpy(d, s, n); return hipSuccess; }
inline hipError_t hipDeviceSynchronize() { return hipSuccess; }
inline hipError_t hipGetDevice(int* device) { *device = 0; return hipSuccess; }
inline hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attribute, int) {
    if (attribute != hipDeviceAttributeWarpSize) return hipErrorInvalidValue;
    *value = warpSize;
    return hipSuccess;
}
typedef std::chrono::steady_clock::time_point* hipEvent_t;
inline hipError_t hipEventCreate(hipEvent_t* e) { *e = new std::chrono::steady_clock::time_point(); return hipSuccess; }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t = nullptr) { *e = std::chrono::steady_clock::now(); return hipSuccess; }
inline hipError_t hipEventSynchronize(hipEvent_t) { return hipSuccess; }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) {
    *ms = std::chrono::duration<float, std::milli>(*b - *a).count(); return hipSuccess;
}
inline hipError_t hipEventDestroy(hipEvent_t e) { delete e; return hipSuccess; }
