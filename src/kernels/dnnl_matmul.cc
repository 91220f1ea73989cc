// Matrix products for MindSpore's Custom op (func_type "aot") on CPU, computed by oneDNN's sgemm from the libdnnl
// that ships inside the MindSpore wheel. That library is built for a caller-supplied thread pool and runs
// single-threaded here, so each product is split by rows of the result over albert::Threads() threads.
// See src/cpu_kernels.py: it compiles this file, and the network falls back to MindSpore's MatMul without it.
#include "parallel.h"

extern "C" int dnnl_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

namespace {

const int64_t kMinRowsPerThread = 64;

// c[m, n] = op(a) op(b) (+ bias[n] on every row), all row-major float32; op(x) = x or x^T.
int Gemm(bool ta, bool tb, bool with_bias, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  const int count = with_bias ? 4 : 3, out = count - 1;
  if (ndims[0] != 2 || ndims[1] != 2 || ndims[out] != 2 || (with_bias && ndims[2] != 1)) return 1;
  if (!albert::AllFloat32(count, dtypes)) return 2;
  const float *a = static_cast<const float *>(params[0]);
  const float *b = static_cast<const float *>(params[1]);
  const float *bias = with_bias ? static_cast<const float *>(params[2]) : nullptr;
  float *c = static_cast<float *>(params[out]);
  const int64_t m = ta ? shapes[0][1] : shapes[0][0], k = ta ? shapes[0][0] : shapes[0][1];
  const int64_t n = tb ? shapes[1][0] : shapes[1][1], lda = shapes[0][1], ldb = shapes[1][1];
  const char opa = ta ? 'T' : 'N', opb = tb ? 'T' : 'N';
  std::vector<int> status(albert::Threads(), 0);
  const int64_t parts = albert::ParallelFor(m, kMinRowsPerThread, [&](int64_t part, int64_t begin, int64_t end) {
    if (bias) {
      for (int64_t row = begin; row < end; ++row) std::memcpy(c + row * n, bias, n * sizeof(float));
    }
    // Row r of op(a) starts at a + r * lda (a stored [m, k]) or at a + r (a stored [k, m], read transposed).
    const float *a_rows = ta ? a + begin : a + begin * lda;
    status[part] = dnnl_sgemm(opa, opb, end - begin, n, k, 1.0f, a_rows, lda, b, ldb, bias ? 1.0f : 0.0f,
                              c + begin * n, n);
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (status[p] != 0) return 3;
  }
  return 0;
}

// The attention products of every (batch row, head) pair, reading and writing the heads where they lie in the
// [B, S, H] activations (head n is columns n*D .. n*D+D-1, leading dimension H) instead of moving them to
// [B, N, S, D] first; S x S matrices are [B, N, S, S]. out = scale * op(x) op(y) per pair, with
//   kScores:       x, y [B, S, H]          -> [B, N, S, S]   x_bn y_bn^T
//   kContext:      x [B, N, S, S], y [B, S, H] -> [B, S, H]  x_bn y_bn
//   kContextT:     x [B, N, S, S], y [B, S, H] -> [B, S, H]  x_bn^T y_bn
// The pairs are split over the threads; each pair is one single-threaded sgemm. N is read from the [B, N, S, S]
// operand's shape; scale is a one-element tensor.
enum class HeadProduct { kScores, kContext, kContextT };

int HeadGemm(HeadProduct kind, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (!albert::AllFloat32(4, dtypes) || ndims[0] < 3 || ndims[1] != 3 || ndims[3] < 3) return 1;
  const bool scores = kind == HeadProduct::kScores;
  const int64_t *square = scores ? shapes[3] : shapes[0];  // [B, N, S, S]
  const int64_t *rows = shapes[1];                         // [B, S, H]
  const int64_t batch = rows[0], seq = rows[1], hidden = rows[2], heads = square[1];
  if ((scores ? ndims[3] : ndims[0]) != 4 || square[0] != batch || square[2] != seq || square[3] != seq ||
      heads < 1 || hidden % heads != 0) {
    return 1;
  }
  const int64_t *other = scores ? shapes[0] : shapes[3];  // the second [B, S, H] tensor of the call
  if (other[0] != batch || other[1] != seq || other[2] != hidden) return 1;
  const int64_t head = hidden / heads, square_size = seq * seq;
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  const float scale = *static_cast<const float *>(params[2]);
  float *out = static_cast<float *>(params[3]);
  std::vector<int> status(albert::Threads(), 0);
  const int64_t parts = albert::ParallelFor(batch * heads, 1, [&](int64_t part, int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end && status[part] == 0; ++pair) {
      const int64_t b = pair / heads, n = pair % heads;
      const int64_t columns = b * seq * hidden + n * head;  // head n of row b in a [B, S, H] tensor
      const float *y_bn = y + columns;
      if (scores) {
        status[part] = dnnl_sgemm('N', 'T', seq, seq, head, scale, x + columns, hidden, y_bn, hidden, 0.0f,
                                  out + pair * square_size, seq);
      } else {
        const bool transposed = kind == HeadProduct::kContextT;
        status[part] = dnnl_sgemm(transposed ? 'T' : 'N', 'N', seq, head, seq, scale, x + pair * square_size, seq,
                                  y_bn, hidden, 0.0f, out + columns, hidden);
      }
    }
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (status[p] != 0) return 3;
  }
  return 0;
}

}  // namespace

extern "C" {
void SetThreads(int threads) { albert::Threads() = std::max(1, threads); }
int MatMulNN(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  return Gemm(false, false, false, p, d, s, t);
}
int MatMulNT(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  return Gemm(false, true, false, p, d, s, t);
}
int MatMulTN(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  return Gemm(true, false, false, p, d, s, t);
}
// x [m, k], w [n, k], bias [n] -> x w^T + bias: nn.Dense in one call.
int MatMulNTBias(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  return Gemm(false, true, true, p, d, s, t);
}
int HeadScores(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  return HeadGemm(HeadProduct::kScores, p, d, s, t);
}
int HeadContext(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  return HeadGemm(HeadProduct::kContext, p, d, s, t);
}
int HeadContextT(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  return HeadGemm(HeadProduct::kContextT, p, d, s, t);
}
}
