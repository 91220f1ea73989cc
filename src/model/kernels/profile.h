// Where the kernels' time goes, measured inside them: MindSpore's profiler sees every kernel as one "Custom"
// operation, which says nothing about which product, conversion or row pass costs what. Off unless SetProfile(1)
// (benchmarks/bench_train.py --profile); then each named scope adds its calls and nanoseconds to a counter, read
// and reset by ProfileReport. Scopes inside the threads' parts (conversion, products) add every thread's time, so
// they measure CPU time; the kernels' entry points measure wall time.
#ifndef ALBERT_KERNELS_PROFILE_H_
#define ALBERT_KERNELS_PROFILE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace albert {

struct ProfileCounter {
  std::atomic<const char *> name{nullptr};
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> nanos{0};
};

const int kProfileCounters = 64;

inline std::atomic<bool> &Profiling() {
  static std::atomic<bool> on{false};
  return on;
}

inline ProfileCounter *ProfileCounters() {
  static ProfileCounter counters[kProfileCounters];
  return counters;
}

// The counter of `name` (a string literal: compared by address, then by text), claimed on first use.
inline ProfileCounter *CounterFor(const char *name) {
  ProfileCounter *counters = ProfileCounters();
  for (int i = 0; i < kProfileCounters; ++i) {
    const char *held = counters[i].name.load(std::memory_order_acquire);
    if (held == nullptr) {
      const char *expected = nullptr;
      if (counters[i].name.compare_exchange_strong(expected, name)) return &counters[i];
      held = expected;
    }
    if (held == name || std::strcmp(held, name) == 0) return &counters[i];
  }
  return nullptr;  // more names than counters: not counted
}

// Adds the time from construction to destruction to the counter of `name`, when profiling is on.
class ProfileScope {
 public:
  explicit ProfileScope(const char *name)
      : counter_(Profiling().load(std::memory_order_relaxed) ? CounterFor(name) : nullptr) {
    if (counter_) start_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (!counter_) return;
    const auto spent = std::chrono::steady_clock::now() - start_;
    counter_->calls.fetch_add(1, std::memory_order_relaxed);
    counter_->nanos.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count(),
                              std::memory_order_relaxed);
  }
  ProfileScope(const ProfileScope &) = delete;
  ProfileScope &operator=(const ProfileScope &) = delete;

 private:
  ProfileCounter *counter_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace albert

namespace albert {

// Profiling on (1) or off (0); turning it on resets the counters.
inline void SetProfiling(int on) {
  ProfileCounter *counters = ProfileCounters();
  if (on) {
    for (int i = 0; i < kProfileCounters; ++i) {
      counters[i].calls.store(0);
      counters[i].nanos.store(0);
    }
  }
  Profiling().store(on != 0);
}

// "name calls nanoseconds" lines into out (at most size bytes, NUL-terminated); returns the length needed.
inline int ProfileReport(char *out, int size) {
  ProfileCounter *counters = ProfileCounters();
  int length = 0;
  for (int i = 0; i < kProfileCounters; ++i) {
    const char *name = counters[i].name.load();
    if (name == nullptr || counters[i].calls.load() == 0) continue;
    char line[160];
    const int n = std::snprintf(line, sizeof line, "%s %lld %lld\n", name,
                                static_cast<long long>(counters[i].calls.load()),
                                static_cast<long long>(counters[i].nanos.load()));
    if (out && length + n < size) std::memcpy(out + length, line, n + 1);
    length += n;
  }
  return length;
}

}  // namespace albert

#define ALBERT_PROFILE(name) albert::ProfileScope albert_profile_scope_(name)

#endif  // ALBERT_KERNELS_PROFILE_H_
