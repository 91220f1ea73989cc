// Fused element-wise and row-wise kernels for MindSpore's Custom op (func_type "aot") on CPU: LayerNorm, the tanh
// GELU and the masked-LM cross entropy over the vocabulary, each with its backward, dropout with counter-based masks,
// and for the train step the squared norm of a gradient (overflow check and clipping in one read) and its division
// by one number. MindSpore 2.10 runs these as chains of single-purpose CPU kernels
// (GELU's backward alone is ~15 passes over a [B*S, I] tensor) or, for LayerNormGrad and BiasAddGrad, at a small
// fraction of memory speed. Every function below reads its inputs once or twice and writes each output once; rows
// are split over albert::Threads() threads.
// Inputs come first in `params`, then outputs (MindSpore's AOT calling convention). See src/model/cpu_kernels.py.
#include <cmath>

#include "parallel.h"
#include "profile.h"
#include "vector_math.h"

namespace {

const int64_t kMinRowsPerThread = 16;
const int64_t kMinElementsPerThread = 1 << 14;

// MurmurHash3's 32-bit finalizer: every input bit flips each output bit with probability ~1/2.
inline uint32_t Mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

}  // namespace

extern "C" {

// x -> gelu(x), any shape.
int GeluTanh(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("GeluTanh");
  if (!albert::AllFloat32(2, dtypes)) return 2;
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  albert::ParallelFor(albert::Size(0, ndims, shapes), kMinElementsPerThread, [&](int64_t, int64_t begin,
                                                                                  int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = albert::Gelu(x[i]);
  });
  return 0;
}

// (x, dy) -> dx = dy * gelu'(x) (albert::GeluDerivative).
int GeluTanhGrad(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("GeluTanhGrad");
  if (!albert::AllFloat32(3, dtypes)) return 2;
  const float *x = static_cast<const float *>(params[0]);
  const float *dy = static_cast<const float *>(params[1]);
  float *dx = static_cast<float *>(params[2]);
  albert::ParallelFor(albert::Size(0, ndims, shapes), kMinElementsPerThread, [&](int64_t, int64_t begin,
                                                                                  int64_t end) {
    for (int64_t i = begin; i < end; ++i) dx[i] = dy[i] * albert::GeluDerivative(x[i]);
  });
  return 0;
}

// (x [M, C], gamma [C], beta [C], eps [1]) -> (y [M, C], mean [M], rstd [M]):
// y = (x - mean) * rstd * gamma + beta per row, rstd = 1 / sqrt(var + eps); mean and rstd are kept for the backward.
int LayerNorm(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("LayerNorm");
  if (ndims[0] != 2 || !albert::AllFloat32(7, dtypes)) return 2;
  const float *x = static_cast<const float *>(params[0]);
  const float *gamma = static_cast<const float *>(params[1]);
  const float *beta = static_cast<const float *>(params[2]);
  const float eps = *static_cast<const float *>(params[3]);
  float *y = static_cast<float *>(params[4]);
  float *mean_out = static_cast<float *>(params[5]);
  float *rstd_out = static_cast<float *>(params[6]);
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  albert::ParallelFor(rows, kMinRowsPerThread, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      albert::LayerNormRow(x + r * cols, gamma, beta, eps, cols, y + r * cols, mean_out + r, rstd_out + r);
    }
  });
  return 0;
}

// (x [M, C], dy [M, C], mean [M], rstd [M], gamma [C]) -> (dx [M, C], dgamma [C], dbeta [C]):
// with xhat = (x - mean) rstd and g = dy gamma, dx = rstd (g - mean(g) - xhat mean(g xhat)) per row;
// dgamma = sum over rows of dy xhat, dbeta = sum over rows of dy (per-thread partial sums, added at the end).
int LayerNormGrad(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("LayerNormGrad");
  if (ndims[0] != 2 || !albert::AllFloat32(8, dtypes)) return 2;
  const float *x = static_cast<const float *>(params[0]);
  const float *dy = static_cast<const float *>(params[1]);
  const float *mean = static_cast<const float *>(params[2]);
  const float *rstd = static_cast<const float *>(params[3]);
  const float *gamma = static_cast<const float *>(params[4]);
  float *dx = static_cast<float *>(params[5]);
  float *dgamma = static_cast<float *>(params[6]);
  float *dbeta = static_cast<float *>(params[7]);
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  std::vector<float> partial(2 * cols * albert::Threads(), 0.0f);
  const int64_t parts = albert::ParallelFor(rows, kMinRowsPerThread, [&](int64_t part, int64_t begin,
                                                                         int64_t end) {
    float *__restrict__ part_dgamma = partial.data() + 2 * cols * part;
    float *__restrict__ part_dbeta = part_dgamma + cols;
    std::vector<float> xhat_row(cols), g_row(cols);
    float *__restrict__ xhat = xhat_row.data();
    float *__restrict__ g = g_row.data();
    for (int64_t r = begin; r < end; ++r) {
      const float *__restrict__ xr = x + r * cols;
      const float *__restrict__ dyr = dy + r * cols;
      const float row_mean = mean[r], row_rstd = rstd[r];
      float g_sum = 0.0f, gx_sum = 0.0f;
      for (int64_t c = 0; c < cols; ++c) {
        xhat[c] = (xr[c] - row_mean) * row_rstd;
        g[c] = dyr[c] * gamma[c];
        g_sum += g[c];
        gx_sum += g[c] * xhat[c];
      }
      for (int64_t c = 0; c < cols; ++c) {
        part_dgamma[c] += dyr[c] * xhat[c];
        part_dbeta[c] += dyr[c];
      }
      const float g_mean = g_sum / cols, gx_mean = gx_sum / cols;
      float *__restrict__ dxr = dx + r * cols;
      for (int64_t c = 0; c < cols; ++c) dxr[c] = row_rstd * (g[c] - g_mean - xhat[c] * gx_mean);
    }
  });
  for (int64_t c = 0; c < cols; ++c) {
    float sum_gamma = 0.0f, sum_beta = 0.0f;
    for (int64_t p = 0; p < parts; ++p) {
      sum_gamma += partial[2 * cols * p + c];
      sum_beta += partial[2 * cols * p + cols + c];
    }
    dgamma[c] = sum_gamma;
    dbeta[c] = sum_beta;
  }
  return 0;
}

// (x [any shape], divisor [] or [1]) -> x / divisor (a true division: 1/divisor may be subnormal). MindSpore's CPU
// Div by a one-element tensor keeps about four times its output's size allocated for the whole run.
int DivideByScalar(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("DivideByScalar");
  if (!albert::AllFloat32(3, dtypes)) return 2;
  const float *x = static_cast<const float *>(params[0]);
  const float divisor = *static_cast<const float *>(params[1]);
  float *y = static_cast<float *>(params[2]);
  albert::ParallelFor(albert::Size(0, ndims, shapes), 4 * kMinElementsPerThread, [&](int64_t, int64_t begin,
                                                                                      int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = x[i] / divisor;
  });
  return 0;
}

// (x [any shape], scale [] or [1]) -> [1]: the sum of (x / scale)^2, accumulated in double (no overflow or
// underflow on the way; inf/nan in x, or a total beyond float32's range, gives a non-finite result).
int ScaledSquaredNorm(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("ScaledSquaredNorm");
  if (!albert::AllFloat32(3, dtypes)) return 2;
  const float *x = static_cast<const float *>(params[0]);
  const double inverse = 1.0 / *static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  std::vector<double> partial(albert::Threads(), 0.0);
  const int64_t parts = albert::ParallelFor(albert::Size(0, ndims, shapes), 4 * kMinElementsPerThread,
                                            [&](int64_t part, int64_t begin, int64_t end) {
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const double v = x[i] * inverse;
      sum += v * v;
    }
    partial[part] = sum;
  });
  double total = 0.0;
  for (int64_t p = 0; p < parts; ++p) total += partial[p];
  out[0] = static_cast<float>(total);
  return 0;
}

// (logits [M, V], labels [M] int32) -> (nll [M], logsumexp [M]): nll = logsumexp(row) - row[label], the
// cross entropy of each row, in one read of the row (plus one while it is in cache). A label outside [0, V) gives
// nll 0 and no gradient, as the one-hot product of the portable path does.
int CrossEntropy(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("CrossEntropy");
  if (ndims[0] != 2 || std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "int32") != 0) return 2;
  const float *logits = static_cast<const float *>(params[0]);
  const int32_t *labels = static_cast<const int32_t *>(params[1]);
  float *nll = static_cast<float *>(params[2]);
  float *lse = static_cast<float *>(params[3]);
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  albert::ParallelFor(rows, 1, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *row = logits + r * cols;
      const float top = albert::RowMax(row, nullptr, cols);
      float total = 0.0f;
      for (int64_t c = 0; c < cols; ++c) total += albert::Exp(row[c] - top);
      lse[r] = top + std::log(total);
      const int32_t label = labels[r];
      nll[r] = label >= 0 && label < cols ? lse[r] - row[label] : 0.0f;
    }
  });
  return 0;
}

// (logits [M, V], labels [M], logsumexp [M], dnll [M]) -> dlogits = (softmax(row) - onehot(label)) * dnll per row.
int CrossEntropyGrad(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("CrossEntropyGrad");
  if (ndims[0] != 2 || std::strcmp(dtypes[1], "int32") != 0) return 2;
  const float *logits = static_cast<const float *>(params[0]);
  const int32_t *labels = static_cast<const int32_t *>(params[1]);
  const float *lse = static_cast<const float *>(params[2]);
  const float *dnll = static_cast<const float *>(params[3]);
  float *dlogits = static_cast<float *>(params[4]);
  const int64_t rows = shapes[0][0], cols = shapes[0][1];
  albert::ParallelFor(rows, 1, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *row = logits + r * cols;
      float *out = dlogits + r * cols;
      const int32_t label = labels[r];
      if (label < 0 || label >= cols) {
        std::fill(out, out + cols, 0.0f);
        continue;
      }
      const float shift = lse[r], scale = dnll[r];
      for (int64_t c = 0; c < cols; ++c) out[c] = albert::Exp(row[c] - shift) * scale;
      out[label] -= scale;
    }
  });
  return 0;
}

// (x [any shape] float32, calls [1] int32, place [2] int32 = (place key, threshold), scale [1]) -> y: dropout whose
// mask is a function of (place key, calls, element index) alone, the same on any thread split, in any process, and
// after a resume (the call counter is the run's). Element i is kept when
//   Mix32((i * 0x9E3779B9) ^ Mix32(place_key + calls * 0x9E3779B9)) >> 8  >=  threshold  (= round(p * 2^24)),
// and then y = x * scale (scale = 1 / (1 - p)), else 0; all arithmetic modulo 2^32. The backward is this kernel on
// the output's gradient: the same mask, recomputed instead of kept. src/model/albert.py (keyed_dropout) computes the
// same with MindSpore's operations.
int KeyedDropout(int, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  ALBERT_PROFILE("KeyedDropout");
  if (std::strcmp(dtypes[0], "float32") != 0 || std::strcmp(dtypes[1], "int32") != 0 ||
      std::strcmp(dtypes[2], "int32") != 0 || std::strcmp(dtypes[3], "float32") != 0) {
    return 2;
  }
  const float *x = static_cast<const float *>(params[0]);
  const uint32_t calls = static_cast<uint32_t>(*static_cast<const int32_t *>(params[1]));
  const int32_t *place = static_cast<const int32_t *>(params[2]);
  const float scale = *static_cast<const float *>(params[3]);
  float *y = static_cast<float *>(params[4]);
  const uint32_t key = Mix32(static_cast<uint32_t>(place[0]) + calls * 0x9E3779B9u);
  const uint32_t threshold = static_cast<uint32_t>(place[1]);
  albert::ParallelFor(albert::Size(0, ndims, shapes), kMinElementsPerThread, [&](int64_t, int64_t begin,
                                                                                  int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t h = Mix32((static_cast<uint32_t>(i) * 0x9E3779B9u) ^ key);
      y[i] = (h >> 8) >= threshold ? x[i] * scale : 0.0f;
    }
  });
  return 0;
}

}  // extern "C"
