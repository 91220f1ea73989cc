// Element-wise math shared by the CPU kernels (see src/model/cpu_kernels.py), written so that GCC vectorizes the loops
// that call it.
#ifndef ALBERT_KERNELS_VECTOR_MATH_H_
#define ALBERT_KERNELS_VECTOR_MATH_H_

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace albert {

// e^x for float32, written so that GCC vectorizes the loops that call it: 2^n by exponent bits, e^r for
// |r| <= ln2/2 by its Taylor polynomial to r^7 (relative error below 3e-8, under float32's rounding).
// Out-of-range x is clamped (e^-87.3 is still a normal float); NaN stays NaN.
inline float Exp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.7f ? 88.7f : x;
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // n in [-126, 128]: split the scale in two so that n = 128 and n = -126 stay representable.
  const int32_t half = static_cast<int32_t>(n) >> 1;
  int32_t bits_a = (half + 127) << 23, bits_b = (static_cast<int32_t>(n) - half + 127) << 23;
  float scale_a, scale_b;
  std::memcpy(&scale_a, &bits_a, sizeof(float));
  std::memcpy(&scale_b, &bits_b, sizeof(float));
  return p * scale_a * scale_b;
}

// Google's GELU, tanh form: x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) (= 0.5 x (1 + tanh(...))).
const float kGeluScale = 1.5957691216057308f;  // 2 * sqrt(2 / pi)
const float kGeluCubic = 0.044715f;

inline float Sigmoid(float z) { return 1.0f / (1.0f + Exp(-z)); }

inline float Gelu(float x) { return x * Sigmoid(kGeluScale * (x + kGeluCubic * x * x * x)); }

// GELU's derivative at x: s + x s (1 - s) k (1 + 3 c x^2), s = sigmoid(k (x + c x^3)).
inline float GeluDerivative(float x) {
  const float s = Sigmoid(kGeluScale * (x + kGeluCubic * x * x * x));
  return s + x * s * (1.0f - s) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

// max(a[c] + b[c]) over c < n (n >= 1; b may be null: max(a[c])), in AVX-512 where the CPU has it: GCC does not
// vectorize a float max reduction without -ffinite-math-only (the scalar loop was 70% of a softmax row's time). A
// NaN may or may not win; callers add the maximum to every element, so a row holding NaN ends NaN either way.
inline float RowMax(const float *a, const float *b, int64_t n) {
  float top = a[0] + (b ? b[0] : 0.0f);
  int64_t c = 1;
#ifdef __AVX512F__
  if (n >= 16) {
    __m512 most = _mm512_set1_ps(top);
    for (c = 0; c + 16 <= n; c += 16) {
      const __m512 v = _mm512_loadu_ps(a + c);
      most = _mm512_max_ps(most, b ? _mm512_add_ps(v, _mm512_loadu_ps(b + c)) : v);
    }
    top = _mm512_reduce_max_ps(most);
  }
#endif
  for (; c < n; ++c) {
    const float v = a[c] + (b ? b[c] : 0.0f);
    top = v > top ? v : top;
  }
  return top;
}

// p = softmax(s + bias) over one row of n; p may be s (in place).
inline void SoftmaxRow(const float *s, const float *bias, float *p, int64_t n) {
  const float top = RowMax(s, bias, n);
  float total = 0.0f;
  for (int64_t c = 0; c < n; ++c) {
    p[c] = Exp(s[c] + bias[c] - top);
    total += p[c];
  }
  const float inverse = 1.0f / total;
  for (int64_t c = 0; c < n; ++c) p[c] *= inverse;
}

// y = (x - mean) * rstd * gamma + beta over one row of n, rstd = 1 / sqrt(var + eps), the sums in double; y may be x.
// Returns (mean, rstd) through the pointers.
inline void LayerNormRow(const float *x, const float *gamma, const float *beta, float eps, int64_t n, float *y,
                         float *mean_out, float *rstd_out) {
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c) sum += x[c];
  const float mean = static_cast<float>(sum / n);
  double squares = 0.0;
  for (int64_t c = 0; c < n; ++c) squares += static_cast<double>(x[c] - mean) * (x[c] - mean);
  const float rstd = static_cast<float>(1.0 / std::sqrt(squares / n + eps));
  for (int64_t c = 0; c < n; ++c) y[c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
  *mean_out = mean;
  *rstd_out = rstd;
}

// ds = p * (dp - sum(dp * p)) over one row of n: the gradient of softmax's input from that of its output.
inline void SoftmaxGradRow(const float *p, const float *dp, float *ds, int64_t n) {
  float dot = 0.0f;
  for (int64_t c = 0; c < n; ++c) dot += dp[c] * p[c];
  for (int64_t c = 0; c < n; ++c) ds[c] = p[c] * (dp[c] - dot);
}

}  // namespace albert

#endif  // ALBERT_KERNELS_VECTOR_MATH_H_
