// Matrix products for MindSpore's Custom op (func_type "aot") on CPU, computed by oneDNN from the libdnnl that ships
// inside the MindSpore wheel, and attention's masked softmax, run on each head's scores while they are in cache.
// That library is built for a caller-supplied thread pool and runs single-threaded here, so each product is split by
// rows (or columns) of the result, or by attention head, over albert::Threads() threads.
// Float32 products run as dnnl_sgemm. With SetBf16(1) the dense layers' products run in bfloat16 with float32
// accumulation through oneDNN matmul primitives (dnnl_primitives.h: float32 tensors read as they are, converted while
// packed for AMX / AVX512-BF16), or, where the primitive API is missing or oneDNN would keep the shape in float32, as
// dnnl_gemm_bf16bf16f32 on operands this file rounds to bfloat16; attention's per-head products stay float32 sgemm (at 128 x 128 x 64 a bfloat16 product
// measured 0.55-0.85x sgemm's rate on a Xeon with AMX: packing costs more than it saves). Softmax, LayerNorm and
// everything else stay float32.
// See src/cpu_kernels.py: it compiles this file, and the network falls back to MindSpore's MatMul without it.
#include <immintrin.h>

#include <initializer_list>

#include "dnnl_primitives.h"
#include "parallel.h"
#include "profile.h"
#include "vector_math.h"

extern "C" int dnnl_gemm_bf16bf16f32(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                                     const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                                     float *c, int64_t ldc);

namespace {

bool &Bf16() {
  static bool on = false;
  return on;
}

// float32 -> bfloat16, rounded to nearest even (the CPU's own instruction where it has one).
void ToBf16(const float *from, uint16_t *to, int64_t count) {
  int64_t i = 0;
#ifdef __AVX512BF16__
  for (; i + 16 <= count; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(to + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(from + i)));
  }
#endif
  for (; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, from + i, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      to[i] = static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
    } else {
      to[i] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
  }
}

// The rows x cols block of a row-major matrix with leading dimension ld, packed as bfloat16 (leading dim cols).
const uint16_t *PackBf16(const float *from, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t> *buffer) {
  buffer->resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) ToBf16(from + r * ld, buffer->data() + r * cols, cols);
  return buffer->data();
}

// dnnl_sgemm's contract (c = alpha op(a) op(b) + beta c, row-major), in float32 or, under SetBf16(1), in bfloat16
// with float32 accumulation: op(a) is m x k (stored k x m when ta), op(b) k x n (stored n x k when tb).
int Product(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
            const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (!Bf16()) {
    ALBERT_PROFILE("thread: sgemm");
    return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  thread_local std::vector<uint16_t> a_buffer, b_buffer;
  const bool at = ta == 'T', bt = tb == 'T';
  const uint16_t *a16, *b16;
  {
    ALBERT_PROFILE("thread: operands to bf16");
    a16 = PackBf16(a, at ? k : m, at ? m : k, lda, &a_buffer);
    b16 = PackBf16(b, bt ? n : k, bt ? k : n, ldb, &b_buffer);
  }
  ALBERT_PROFILE("thread: gemm_bf16bf16f32");
  return dnnl_gemm_bf16bf16f32(ta, tb, m, n, k, alpha, a16, at ? m : k, b16, bt ? k : n, beta, c, ldc);
}

// One attention head's product, always float32 (see the top of the file).
int HeadProduct(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                const float *b, int64_t ldb, float *c, int64_t ldc) {
  ALBERT_PROFILE("thread: attention sgemm");
  return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

const int64_t kMinSlicePerThread = 64;  // rows or columns of a product per thread
// x w^T products with fewer rows than this are split by columns (see ForBlocks).
const int64_t kColumnSplitBelowRows = 512;

// Rows [r0, r1) x columns [c0, c1) of c[m, n] = op(a) op(b) + beta c (+ bias[n] on every row instead of beta c),
// row-major; op(x) = x or x^T, op(a) is [m, k], op(b) is [k, n].
struct Block {
  int64_t r0, r1, c0, c1;
};

// GemmBlock's product through a cached oneDNN matmul primitive in bfloat16 math, bias and accumulation (beta 1)
// done by the primitive; false when there is none (dnnl_primitives.h), nothing written.
bool Primitive(bool ta, bool tb, const Block &block, int64_t n, int64_t k, const float *a, int64_t lda,
               const float *b, int64_t ldb, const float *bias, float beta, float *c) {
  const albert::dnnl::Shape shape{ta, tb, bias != nullptr, beta != 0.0f, true, block.r1 - block.r0,
                                  block.c1 - block.c0, k, lda, ldb, n};
  ALBERT_PROFILE("thread: matmul primitive bf16");
  return albert::dnnl::Run(shape, ta ? a + block.r0 : a + block.r0 * lda, tb ? b + block.c0 * ldb : b + block.c0,
                           bias ? bias + block.c0 : nullptr, c + block.r0 * n + block.c0);
}

int GemmBlock(bool ta, bool tb, const Block &block, int64_t n, int64_t k, const float *a, int64_t lda,
              const float *b, int64_t ldb, const float *bias, float beta, float *c) {
  if (Bf16() && Primitive(ta, tb, block, n, k, a, lda, b, ldb, bias, beta, c)) return 0;
  if (bias) {
    for (int64_t row = block.r0; row < block.r1; ++row) {
      std::memcpy(c + row * n + block.c0, bias + block.c0, (block.c1 - block.c0) * sizeof(float));
    }
    beta = 1.0f;
  }
  // Row r of op(a) starts at a + r * lda (a stored [m, k]) or at a + r (a stored [k, m], read transposed);
  // column j of op(b) at b + j (b stored [k, n]) or at b + j * ldb (b stored [n, k], read transposed).
  const float *a_rows = ta ? a + block.r0 : a + block.r0 * lda;
  const float *b_columns = tb ? b + block.c0 * ldb : b + block.c0;
  return Product(ta ? 'T' : 'N', tb ? 'T' : 'N', block.r1 - block.r0, block.c1 - block.c0, k, 1.0f, a_rows, lda,
                 b_columns, ldb, beta, c + block.r0 * n + block.c0, n);
}

// Runs fn(block) over slices of c[m, n] on the threads; fn returns dnnl_sgemm's status. Split by rows, except
// x w^T products (a dense layer's forward) of few rows: inference at batch 1 (128 rows) and the masked-LM decoder
// (160 rows at batch 8) ran 9-20% faster with each thread on part of w's rows and all of x than on half of x's few
// rows and all of w (Zen 4, 2 threads); with 1024 rows or more splitting by columns measured no faster in a train step.
template <typename Fn>
int ForBlocks(bool x_times_wt, int64_t m, int64_t n, Fn fn) {
  const bool by_columns = x_times_wt && m < kColumnSplitBelowRows;
  std::vector<int> status(albert::Threads(), 0);
  const int64_t parts = albert::ParallelFor(by_columns ? n : m, kMinSlicePerThread, [&](int64_t part, int64_t begin,
                                                                                       int64_t end) {
    status[part] = fn(by_columns ? Block{0, m, begin, end} : Block{begin, end, 0, n});
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (status[p] != 0) return 3;
  }
  return 0;
}

// c[m, n] = op(a) op(b) (+ bias[n] on every row), all row-major float32.
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
  return ForBlocks(tb && !ta, m, n, [&](const Block &block) {
    return GemmBlock(ta, tb, block, n, k, a, lda, b, ldb, bias, 0.0f, c);
  });
}

// True when tensors first .. first+count-1 have the shape of tensor `like`.
bool SameShapes(const int *ndims, int64_t **shapes, int first, int count, int like) {
  for (int i = first; i < first + count; ++i) {
    if (ndims[i] != ndims[like]) return false;
    for (int d = 0; d < ndims[i]; ++d) {
      if (shapes[i][d] != shapes[like][d]) return false;
    }
  }
  return true;
}

// The query, key and value layers of attention in one call, each thread's slice of all three in turn:
// (x [M, K], w0, w1, w2 [N, K], b0, b1, b2 [N]) -> y_i = x w_i^T + b_i [M, N].
int DenseThree(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (!albert::AllFloat32(10, dtypes) || ndims[0] != 2 || ndims[1] != 2 || ndims[4] != 1 ||
      !SameShapes(ndims, shapes, 2, 2, 1) || !SameShapes(ndims, shapes, 5, 2, 4) || shapes[0][1] != shapes[1][1] ||
      shapes[4][0] != shapes[1][0]) {
    return 1;
  }
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  const float *x = static_cast<const float *>(params[0]);
  return ForBlocks(true, m, n, [&](const Block &block) {
    int status = 0;
    for (int i = 0; i < 3 && status == 0; ++i) {
      status = GemmBlock(false, true, block, n, k, x, k, static_cast<const float *>(params[1 + i]), k,
                         static_cast<const float *>(params[4 + i]), 0.0f, static_cast<float *>(params[7 + i]));
    }
    return status;
  });
}

// Their input gradient, the three products summed in place: (dy0, dy1, dy2 [M, N], w0, w1, w2 [N, K])
// -> dx = sum_i dy_i w_i [M, K].
int DenseThreeInputGrad(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (!albert::AllFloat32(7, dtypes) || ndims[0] != 2 || ndims[3] != 2 || !SameShapes(ndims, shapes, 1, 2, 0) ||
      !SameShapes(ndims, shapes, 4, 2, 3) || shapes[0][1] != shapes[3][0]) {
    return 1;
  }
  const int64_t m = shapes[0][0], n = shapes[0][1], k = shapes[3][1];
  float *dx = static_cast<float *>(params[6]);
  return ForBlocks(false, m, k, [&](const Block &block) {
    int status = 0;
    for (int i = 0; i < 3 && status == 0; ++i) {
      status = GemmBlock(false, false, block, k, n, static_cast<const float *>(params[i]), n,
                         static_cast<const float *>(params[3 + i]), k, nullptr, i == 0 ? 0.0f : 1.0f, dx);
    }
    return status;
  });
}

// Multi-head attention on the [B, S, H] activations as they are: head n of batch row b is columns n*D .. n*D+D-1
// of that row's [S, H] block (leading dimension H), so no head is moved to [B, N, S, D] and back. The S x S
// matrices are [B, N, S, S]. Every (b, n) pair is one single-threaded sgemm (or two), and the pairs are split over
// the threads; a pair's S x S block is still in cache when its softmax (or softmax gradient) runs.
struct Heads {
  int64_t batch, seq, hidden, count, size;  // B, S, H, N, D = H / N

  int64_t Columns(int64_t pair) const { return pair / count * seq * hidden + pair % count * size; }
  int64_t Square(int64_t pair) const { return pair * seq * seq; }
};

// Checks the [B, S, H] operands (at the given positions) and the [B, N, S, S] one against each other.
bool ReadHeads(const int *ndims, int64_t **shapes, int square, std::initializer_list<int> rows, Heads *heads) {
  if (ndims[square] != 4) return false;
  const int64_t *s = shapes[square];
  *heads = Heads{s[0], s[2], 0, s[1], 0};
  for (const int i : rows) {
    if (ndims[i] != 3 || shapes[i][0] != s[0] || shapes[i][1] != s[2]) return false;
    heads->hidden = shapes[i][2];
  }
  if (s[3] != s[2] || heads->count < 1 || heads->hidden % heads->count != 0) return false;
  for (const int i : rows) {
    if (shapes[i][2] != heads->hidden) return false;
  }
  heads->size = heads->hidden / heads->count;
  return true;
}

// Runs fn(pair, scratch) for every (b, n) pair over the threads; fn returns dnnl_sgemm's status. `scratch` is S*S
// floats of the thread's own (when scratch_size is nonzero).
template <typename Fn>
int ForEachPair(const Heads &heads, int64_t scratch_size, Fn fn) {
  std::vector<int> status(albert::Threads(), 0);
  const int64_t parts = albert::ParallelFor(heads.batch * heads.count, 1, [&](int64_t part, int64_t begin,
                                                                             int64_t end) {
    std::vector<float> scratch(scratch_size);
    for (int64_t pair = begin; pair < end && status[part] == 0; ++pair) status[part] = fn(pair, scratch.data());
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (status[p] != 0) return 3;
  }
  return 0;
}

// (q, k [B, S, H], bias [B, 1, 1, S] or [B, N, S, S], scale [1]) -> probs [B, N, S, S]:
// softmax(scale q_bn k_bn^T + bias) along the last axis, the product and the softmax of a pair back to back.
int AttentionProbs(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  Heads heads;
  if (!albert::AllFloat32(5, dtypes) || !ReadHeads(ndims, shapes, 4, {0, 1}, &heads)) return 1;
  const int64_t seq = heads.seq, bias_size = albert::Size(2, ndims, shapes);
  const bool full_bias = bias_size == heads.batch * heads.count * seq * seq;
  if (!full_bias && bias_size != heads.batch * seq) return 1;
  const float *q = static_cast<const float *>(params[0]);
  const float *k = static_cast<const float *>(params[1]);
  const float *bias = static_cast<const float *>(params[2]);
  const float scale = *static_cast<const float *>(params[3]);
  float *probs = static_cast<float *>(params[4]);
  return ForEachPair(heads, 0, [&](int64_t pair, float *) {
    const int64_t columns = heads.Columns(pair);
    float *square = probs + heads.Square(pair);
    const int status = HeadProduct('N', 'T', seq, seq, heads.size, scale, q + columns, heads.hidden, k + columns,
                                   heads.hidden, square, seq);
    ALBERT_PROFILE("thread: attention softmax");
    for (int64_t row = 0; row < seq; ++row) {
      const float *bias_row = full_bias ? bias + heads.Square(pair) + row * seq : bias + pair / heads.count * seq;
      albert::SoftmaxRow(square + row * seq, bias_row, square + row * seq, seq);
    }
    return status;
  });
}

// (probs, dprobs [B, N, S, S], q, k [B, S, H], scale [1]) -> (dq, dk [B, S, H]), the backward of AttentionProbs:
// ds = probs (dprobs - rowsum(probs dprobs)) per pair in the thread's scratch, dq = scale ds k, dk = scale ds^T q.
int AttentionProbsGrad(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  Heads heads;
  if (!albert::AllFloat32(7, dtypes) || !ReadHeads(ndims, shapes, 0, {2, 3, 5, 6}, &heads) || ndims[1] != 4 ||
      albert::Size(1, ndims, shapes) != albert::Size(0, ndims, shapes)) {
    return 1;
  }
  const float *probs = static_cast<const float *>(params[0]);
  const float *dprobs = static_cast<const float *>(params[1]);
  const float *q = static_cast<const float *>(params[2]);
  const float *k = static_cast<const float *>(params[3]);
  const float scale = *static_cast<const float *>(params[4]);
  float *dq = static_cast<float *>(params[5]);
  float *dk = static_cast<float *>(params[6]);
  const int64_t seq = heads.seq, ld = heads.hidden;
  return ForEachPair(heads, seq * seq, [&](int64_t pair, float *ds) {
    const int64_t columns = heads.Columns(pair), square = heads.Square(pair);
    {
      ALBERT_PROFILE("thread: attention softmax grad");
      for (int64_t row = 0; row < seq; ++row) {
        albert::SoftmaxGradRow(probs + square + row * seq, dprobs + square + row * seq, ds + row * seq, seq);
      }
    }
    const int status = HeadProduct('N', 'N', seq, heads.size, seq, scale, ds, seq, k + columns, ld, dq + columns,
                                   ld);
    return status != 0 ? status : HeadProduct('T', 'N', seq, heads.size, seq, scale, ds, seq, q + columns, ld,
                                              dk + columns, ld);
  });
}

// The products of the context and of its gradients, out = scale * op(x) op(y) per pair:
//   kScores:   x, y [B, S, H]               -> [B, N, S, S]  x_bn y_bn^T   (dprobs = dcontext v^T)
//   kContext:  x [B, N, S, S], y [B, S, H] -> [B, S, H]     x_bn y_bn      (context = probs v)
//   kContextT: x [B, N, S, S], y [B, S, H] -> [B, S, H]     x_bn^T y_bn    (dv = probs^T dcontext)
enum class HeadProductKind { kScores, kContext, kContextT };

int HeadGemm(HeadProductKind kind, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  const bool scores = kind == HeadProductKind::kScores;
  Heads heads;
  if (!albert::AllFloat32(4, dtypes) ||
      !ReadHeads(ndims, shapes, scores ? 3 : 0, scores ? std::initializer_list<int>{0, 1}
                                                       : std::initializer_list<int>{1, 3}, &heads)) {
    return 1;
  }
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  const float scale = *static_cast<const float *>(params[2]);
  float *out = static_cast<float *>(params[3]);
  const int64_t seq = heads.seq, ld = heads.hidden;
  return ForEachPair(heads, 0, [&](int64_t pair, float *) {
    const int64_t columns = heads.Columns(pair), square = heads.Square(pair);
    if (scores) {
      return HeadProduct('N', 'T', seq, seq, heads.size, scale, x + columns, ld, y + columns, ld, out + square, seq);
    }
    return HeadProduct(kind == HeadProductKind::kContextT ? 'T' : 'N', 'N', seq, heads.size, seq, scale,
                       x + square, seq, y + columns, ld, out + columns, ld);
  });
}

}  // namespace

extern "C" {
void SetThreads(int threads) { albert::Threads() = std::max(1, threads); }
void SetBf16(int on) { Bf16() = on != 0; }
void SetProfile(int on) { albert::SetProfiling(on); }
// "oneDNN X.Y.Z; ..." naming the implementation oneDNN picks for a float32 and a bfloat16-math matmul primitive on
// this CPU (its ISA: e.g. brg_matmul:avx10_1_512_amx), or why the primitives are not used; into out (at most size
// bytes, NUL-terminated). Returns the length needed.
int DnnlDescribe(char *out, int size) {
  const albert::dnnl::Api &api = albert::dnnl::GetApi();
  std::string text;
  if (api.version) {
    const albert::dnnl::Version *v = api.version();
    text = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  } else {
    text = "oneDNN (version unknown)";
  }
  if (!api.missing.empty()) {
    text += "; bfloat16 products: dnnl_gemm_bf16bf16f32 (no matmul primitives: " + api.missing + ")";
  } else {
    std::string names[2];
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      albert::dnnl::Matmul probe;
      const albert::dnnl::Shape shape{false, true, false, false, bf16 == 1, 256, 256, 256, 256, 256, 256};
      names[bf16] = albert::dnnl::Create(api, shape, &probe) ? probe.implementation
                                                              : bf16 ? "none (dnnl_gemm_bf16bf16f32 instead)" : "none";
      albert::dnnl::Release(api, &probe);
    }
    text += "; matmul primitives: float32 " + names[0] + ", bfloat16 math " + names[1];
  }
  if (out && size > 0) {
    std::strncpy(out, text.c_str(), size - 1);
    out[size - 1] = '\0';
  }
  return static_cast<int>(text.size());
}
// Primitives held by the cache (bounded by albert::dnnl::Cache::kCapacity).
int PrimitiveCacheSize() { return static_cast<int>(albert::dnnl::Cache::Get().Size()); }
int ProfileReport(char *out, int size) { return albert::ProfileReport(out, size); }
int MatMulNN(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulNN");
  return Gemm(false, false, false, p, d, s, t);
}
int MatMulNT(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulNT");
  return Gemm(false, true, false, p, d, s, t);
}
int MatMulTN(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulTN");
  return Gemm(true, false, false, p, d, s, t);
}
// x [m, k], w [n, k], bias [n] -> x w^T + bias: nn.Dense in one call.
int MatMulNTBias(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulNTBias");
  return Gemm(false, true, true, p, d, s, t);
}
int HeadScores(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("HeadScores");
  return HeadGemm(HeadProductKind::kScores, p, d, s, t);
}
int HeadContext(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("HeadContext");
  return HeadGemm(HeadProductKind::kContext, p, d, s, t);
}
int HeadContextT(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("HeadContextT");
  return HeadGemm(HeadProductKind::kContextT, p, d, s, t);
}
int DenseQKV(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseQKV");
  return DenseThree(p, d, s, t);
}
int DenseQKVInputGrad(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseQKVInputGrad");
  return DenseThreeInputGrad(p, d, s, t);
}
int HeadProbs(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("HeadProbs");
  return AttentionProbs(p, d, s, t);
}
int HeadProbsGrad(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("HeadProbsGrad");
  return AttentionProbsGrad(p, d, s, t);
}
}
