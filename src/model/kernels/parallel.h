// The thread count and the one way the CPU kernels split work (see src/model/cpu_kernels.py).
#ifndef ALBERT_KERNELS_PARALLEL_H_
#define ALBERT_KERNELS_PARALLEL_H_

#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace albert {

// Threads each kernel call is split over; SetThreads (cpu_threads) sets it, default the hardware's.
inline int &Threads() {
  static int threads = std::max(1u, std::thread::hardware_concurrency());
  return threads;
}

// This thread's floating-point control word (x86: MXCSR; Arm: FPCR): its rounding mode and whether subnormal numbers
// are flushed to zero.
inline uint64_t FloatControl() {
#if defined(__x86_64__)
  return _mm_getcsr();
#elif defined(__aarch64__)
  uint64_t fpcr;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr) : : "memory");
  return fpcr;
#else
  return 0;
#endif
}

inline void SetFloatControl(uint64_t control) {
#if defined(__x86_64__)
  _mm_setcsr(static_cast<unsigned>(control));
#elif defined(__aarch64__)
  asm volatile("msr fpcr, %0" : : "r"(control) : "memory");
#else
  (void)control;
#endif
}

// The kernels' work runs with subnormal numbers (below 1.2e-38 in float32) flushed to zero, on every thread of a call:
// x86's flush-to-zero and denormals-are-zero (MXCSR bits 15 and 6), Arm's FPCR.FZ (bit 24). Why: on Intel CPUs a
// product reading subnormal operands runs ~20x slower (microcode assists), and a fine-tuned model's attention
// probabilities do reach below 1e-38 (exp of scores ~90 under the row's largest): serving a fine-tuned SQuAD head
// at seq 384 on a Xeon with AMX answered 7.1-7.5 requests/s instead of 45.5 (2026-12-06, benchmarks/results/README.md).
// And so that a call's numbers do not depend on which thread ran which part: before, each worker thread kept the mode
// of the thread that happened to start it, whatever mode that thread was in. The caller's mode is restored when the
// work is done; the exception flags raised meanwhile (x86 keeps them in the same word: kExceptionFlags) are kept.
#if defined(__x86_64__)
const uint64_t kFlushSubnormals = 0x8040, kExceptionFlags = 0x3f;
#elif defined(__aarch64__)
const uint64_t kFlushSubnormals = uint64_t{1} << 24, kExceptionFlags = 0;  // Arm's flags live in FPSR
#else
const uint64_t kFlushSubnormals = 0, kExceptionFlags = 0;
#endif

class FlushSubnormals {
 public:
  FlushSubnormals() : saved_(FloatControl()) { SetFloatControl(saved_ | kFlushSubnormals); }
  ~FlushSubnormals() { SetFloatControl((saved_ & ~kExceptionFlags) | (FloatControl() & kExceptionFlags)); }
  FlushSubnormals(const FlushSubnormals &) = delete;
  FlushSubnormals &operator=(const FlushSubnormals &) = delete;

 private:
  const uint64_t saved_;
};

// Threads kept between kernel calls: starting a thread costs 60-80 us on a VM, and a train step makes ~500 calls.
// Each worker, after its part, spins for kSpinMicros (the next call usually comes within tens of microseconds),
// then sleeps on a condition variable. One call at a time: a call arriving while another holds the pool (MindSpore
// may launch independent kernels concurrently) gets fresh threads instead. Never destroyed (its threads would have
// to be joined at exit); a forked child makes its own.
class ThreadPool {
 public:
  static ThreadPool &Get() {
    static ThreadPool *pool = nullptr;
    static pid_t owner = 0;
    static std::mutex create;
    std::lock_guard<std::mutex> lock(create);
    if (pool == nullptr || owner != getpid()) {
      pool = new ThreadPool();  // a pool inherited through fork has no threads: left behind, not freed
      owner = getpid();
    }
    return *pool;
  }

  // task(p) for p in [0, parts), part 0 on the calling thread, every part with the caller's FloatControl. False
  // (nothing run) when another call holds the pool.
  bool Run(int parts, const std::function<void(int)> &task) {
    std::unique_lock<std::mutex> busy(run_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const uint64_t control = FloatControl();
    while (static_cast<int>(workers_.size()) < parts - 1) {
      workers_.emplace_back(new Worker());
      std::thread(&ThreadPool::Work, this, workers_.back().get()).detach();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int p = 1; p < parts; ++p) {
        Worker &worker = *workers_[p - 1];
        worker.task = &task;
        worker.part = p;
        worker.control = control;
        worker.done.store(false, std::memory_order_relaxed);
        worker.ticket.fetch_add(1, std::memory_order_release);
      }
    }
    wake_.notify_all();
    task(0);
    for (int p = 1; p < parts; ++p) {
      for (int spins = 0; !workers_[p - 1]->done.load(std::memory_order_acquire); ++spins) {
        if (spins < 4096) {
          Pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
    return true;
  }

 private:
  // One thread's assignment: a new ticket means run task(part), then set done.
  struct Worker {
    std::atomic<uint64_t> ticket{0};
    std::atomic<bool> done{true};
    const std::function<void(int)> *task = nullptr;
    int part = 0;
    uint64_t control = 0;  // the caller's FloatControl
  };

  static constexpr int64_t kSpinMicros = 100;

  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  void Work(Worker *worker) {
    for (uint64_t seen = 0;;) {
      seen = WaitForTicket(*worker, seen);
      SetFloatControl(worker->control);
      (*worker->task)(worker->part);
      worker->done.store(true, std::memory_order_release);
    }
  }

  // Spins, then sleeps, until the worker's ticket moves past `seen`; returns the new one.
  uint64_t WaitForTicket(const Worker &worker, uint64_t seen) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int spins = 1;; ++spins) {
      const uint64_t now = worker.ticket.load(std::memory_order_acquire);
      if (now != seen) return now;
      if (spins % 64 == 0 && std::chrono::steady_clock::now() > until) break;
      Pause();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return worker.ticket.load(std::memory_order_acquire) != seen; });
    return worker.ticket.load(std::memory_order_acquire);
  }

  std::mutex run_;  // held by the one call using the pool
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

// Runs fn(part, begin, end) over `parts` contiguous slices of [0, n), at least `grain` items each, slice 0 on the
// calling thread, every slice with subnormals flushed (FlushSubnormals). Returns the number of parts used (callers
// that keep per-part partial results size them by it).
template <typename Fn>
int64_t ParallelFor(int64_t n, int64_t grain, Fn fn) {
  const FlushSubnormals flushed;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(Threads(), n / std::max<int64_t>(grain, 1)));
  if (parts == 1) {
    fn(0, 0, n);
    return 1;
  }
  const std::function<void(int)> slice = [&](int p) { fn(p, n * p / parts, n * (p + 1) / parts); };
  if (!ThreadPool::Get().Run(static_cast<int>(parts), slice)) {
    std::vector<std::thread> workers;  // each starts in this thread's floating-point mode (POSIX threads inherit it)
    for (int p = 1; p < parts; ++p) workers.emplace_back(slice, p);
    slice(0);
    for (auto &worker : workers) worker.join();
  }
  return parts;
}

// True when every tensor of the call is float32 (the only type these kernels are built for).
inline bool AllFloat32(int count, const char **dtypes) {
  for (int i = 0; i < count; ++i) {
    if (std::strcmp(dtypes[i], "float32") != 0) return false;
  }
  return true;
}

// Elements of tensor i.
inline int64_t Size(int i, const int *ndims, int64_t **shapes) {
  int64_t size = 1;
  for (int d = 0; d < ndims[i]; ++d) size *= shapes[i][d];
  return size;
}

}  // namespace albert

#endif  // ALBERT_KERNELS_PARALLEL_H_
