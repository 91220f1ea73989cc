// Matrix products for MindSpore's Custom op (func_type "aot") on CPU, computed by oneDNN's sgemm from the libdnnl
// that ships inside the MindSpore wheel. That library is built for a caller-supplied thread pool and runs
// single-threaded here, so each product is split by rows of the result over `g_threads` std::threads
// (default: the hardware's; SetThreads sets it).
// See src/cpu_gemm.py: it compiles this file, and the network falls back to MindSpore's MatMul without it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

extern "C" int dnnl_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

namespace {

int g_threads = std::max(1u, std::thread::hardware_concurrency());
const int64_t kMinRowsPerThread = 64;

// c[m, n] = op(a) op(b), all row-major float32; op(x) = x or x^T. Rows of c are dealt out to the threads.
int Gemm(bool ta, bool tb, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (ndims[0] != 2 || ndims[1] != 2 || ndims[2] != 2) return 1;
  for (int i = 0; i < 3; ++i) {
    if (std::strcmp(dtypes[i], "float32") != 0) return 2;
  }
  const float *a = static_cast<const float *>(params[0]);
  const float *b = static_cast<const float *>(params[1]);
  float *c = static_cast<float *>(params[2]);
  const int64_t m = ta ? shapes[0][1] : shapes[0][0], k = ta ? shapes[0][0] : shapes[0][1];
  const int64_t n = tb ? shapes[1][0] : shapes[1][1], lda = shapes[0][1], ldb = shapes[1][1];
  const char opa = ta ? 'T' : 'N', opb = tb ? 'T' : 'N';
  auto rows = [&](int64_t begin, int64_t end) {
    // Row r of op(a) starts at a + r * lda (a stored [m, k]) or at a + r (a stored [k, m], read transposed).
    const float *a_rows = ta ? a + begin : a + begin * lda;
    return dnnl_sgemm(opa, opb, end - begin, n, k, 1.0f, a_rows, lda, b, ldb, 0.0f, c + begin * n, n);
  };
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(g_threads, m / kMinRowsPerThread));
  if (parts == 1) return rows(0, m);
  std::vector<int> status(parts, 0);
  std::vector<std::thread> workers;
  for (int64_t p = 1; p < parts; ++p) {
    workers.emplace_back([&, p] { status[p] = rows(m * p / parts, m * (p + 1) / parts); });
  }
  status[0] = rows(0, m / parts);
  for (auto &worker : workers) worker.join();
  for (int s : status) {
    if (s != 0) return 3;
  }
  return 0;
}

}  // namespace

extern "C" {
void SetThreads(int threads) { g_threads = std::max(1, threads); }
int MatMulNN(int, void **p, int *d, int64_t **s, const char **t, void *, void *) { return Gemm(false, false, p, d, s, t); }
int MatMulNT(int, void **p, int *d, int64_t **s, const char **t, void *, void *) { return Gemm(false, true, p, d, s, t); }
int MatMulTN(int, void **p, int *d, int64_t **s, const char **t, void *, void *) { return Gemm(true, false, p, d, s, t); }
}
