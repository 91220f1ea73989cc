// The thread count and the one way the CPU kernels split work (see src/cpu_kernels.py).
#ifndef ALBERT_KERNELS_PARALLEL_H_
#define ALBERT_KERNELS_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace albert {

// Threads each kernel call is split over; SetThreads (cpu_threads) sets it, default the hardware's.
inline int &Threads() {
  static int threads = std::max(1u, std::thread::hardware_concurrency());
  return threads;
}

// Runs fn(part, begin, end) over `parts` contiguous slices of [0, n), at least `grain` items each, slice 0 on the
// calling thread. Returns the number of parts used (callers that keep per-part partial results size them by it).
template <typename Fn>
int64_t ParallelFor(int64_t n, int64_t grain, Fn fn) {
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(Threads(), n / std::max<int64_t>(grain, 1)));
  if (parts == 1) {
    fn(0, 0, n);
    return 1;
  }
  std::vector<std::thread> workers;
  for (int64_t p = 1; p < parts; ++p) {
    workers.emplace_back([&, p] { fn(p, n * p / parts, n * (p + 1) / parts); });
  }
  fn(0, 0, n / parts);
  for (auto &worker : workers) worker.join();
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
