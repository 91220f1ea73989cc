// Matrix products for MindSpore's Custom op (func_type "aot") on CPU, computed by oneDNN from the libdnnl that ships
// inside the MindSpore wheel, and the work next to them: attention's masked softmax, run on each head's scores while
// they are in cache, and the feed-forward network's GELU, run on each thread's block of the first product.
// That library is built for a caller-supplied thread pool and runs single-threaded here, so each product is split by
// rows (or columns) of the result, or by attention head, over albert::Threads() threads.
// Float32 products run as dnnl_sgemm. With SetBf16(1) the dense layers' products run in bfloat16 with float32
// accumulation: each float32 operand is rounded to bfloat16 once per call, over the threads (a dense layer's weights
// come already rounded: the graph makes their bfloat16 copy once per step, and packs a shared layer's for the
// primitive, see cpu_kernels.Dense and Bf16PackHeader), and the products
// run as oneDNN matmul primitives on the bfloat16 operands (dnnl_primitives.h), or as dnnl_gemm_bf16bf16f32 where
// the primitive API is missing and where it measured faster: on AMX for the long sums (kBf16BlasFromTerms), on AMD's
// AVX512-BF16 for the large weight gradients (kAmdBlasGradOutputs).
// On AMX the fused attention's products run in bfloat16 too, a batch row's heads in batched primitive calls per
// product (AttentionBf16, AttentionGradBf16; as many heads per call as keep their scores in cache: all 12 at 128
// positions, one at 512, where that took ALBERT-base's attention from 429 to 339 ms per train step at batch 4 on a
// Xeon with AMX), and query, key and value come from their layers in bfloat16 and take their gradients back in it (no
// rounding pass on either side): per pair they measured no faster than float32 sgemm at 128
// positions (through dnnl_gemm_bf16bf16f32 a 128 x 128 x 64 product ran at 0.55-0.85x sgemm's rate on a Xeon with
// AMX), batched they took the train step's attention from 116-120 to 98-101 ms (batch 8). Training does so on AMD's
// AVX512-BF16 too (BatchedBf16AttentionInTraining): on a Zen 5 EPYC (bfloat16 products at 1.9x sgemm's peak) from 53
// to 39-42 ms per step. Where bfloat16 runs no faster than float32 (the Xeon under
// ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16: its bfloat16 peak 160 GFLOP/s, sgemm's 279) batched they were slower
// than float32 per pair, 162-190 against 113-121 ms per train step, and attention keeps float32 sgemm per pair. So
// does attention with dropout on its probabilities (two calls around the dropout). Softmax and its gradient,
// LayerNorm and everything else stay float32.
// Serving a checkpoint in int8 (src.predict --precision int8) has its own dense kernels below (DenseInt8 and the fused
// feed-forward and output layers): weights quantized and packed at load (PackedHeader), inputs per row per call, int32
// sums by oneDNN; on AMX its attention runs a batch row's heads in batched bfloat16 primitives (AttentionBf16), not
// per pair (on Zen 5 they measured no faster: 2.8 against 2.2 ms per call at batch 1, 69-82 against 75-78 at batch
// 32). Serving in float32 or bfloat16 runs attention's products in float32 per pair.
// See src/model/cpu_kernels.py: it compiles this file, and the network falls back to MindSpore's MatMul without it.
#include <cpuid.h>
#include <immintrin.h>
#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <random>
#include <utility>

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

bool IsBf16(const char *dtype) { return std::strcmp(dtype, "bfloat16") == 0; }

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

// bfloat16 -> float32 (exact).
void FromBf16(const uint16_t *from, float *to, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t bits = static_cast<uint32_t>(from[i]) << 16;
    std::memcpy(to + i, &bits, sizeof bits);
  }
}

const int64_t kMinSlicePerThread = 64;        // rows or columns of a product per thread
const int64_t kMinConvertPerThread = 1 << 15;  // elements rounded to bfloat16 per thread
const int kOperandSlots = 7;                   // float32 operands of one call rounded to bfloat16, at most
// x w^T products with fewer rows than this are split by columns (see ForBlocks).
const int64_t kColumnSplitBelowRows = 512;
// On AMX, bfloat16 products of a dense layer whose k (terms summed into each output) is at least kBf16BlasFromTerms and
// at least kBf16BlasDepthPerColumn times the output columns of the thread's block run through the BLAS-style call, the
// rest through primitives: the weight gradient always, a forward of fewer than kColumnSplitBelowRows rows on a thread,
// and every product reading weights packed once per step (GemmBlock tries those first: on packed weights the primitive
// measured faster, see Bf16PackHeader). Measured per product with benchmarks/bench_products.py on a Xeon with AMX
// (oneDNN 3.10.1, 2 threads, 2026-11-27; benchmarks/results): through dnnl_gemm_bf16bf16f32, ALBERT-base's feed-forward
// output forward (k = 3072, n = 768, bias included) ran 1.08-1.34x as fast as through a primitive, the first
// feed-forward layer's input gradient (k = 3072, n = 768) 0.89-1.45x (above 1.1x in 10 of 13 runs), the masked-LM
// decoder's input gradient (k = 30000, n = 128) 1.06-1.28x; every product with k = 768 0.50-1.02x; the weight gradients
// with k >= 2048 mixed (0.84-1.63x), the forward at batch 1 (128 rows, split by columns) 0.66-1.39x, median 0.92x. On
// the same kind of VM on 2026-11-28 (steady matrix unit, operands aligned) the products alone measured the other way
// (the BLAS-style call 0.74-0.98x on the products this rule gives it) and the train step was mixed (the products' CPU
// time lower with the rule in 2 of 4 pairs at seq 128, higher in both at seq 512): kept until more runs decide. Not
// measured without AMX: there every bfloat16 forward and input gradient keeps the primitive (bench_products.py measures
// it on any CPU).
const int64_t kBf16BlasFromTerms = 2048;
const int64_t kBf16BlasDepthPerColumn = 4;
// On AMD's AVX512-BF16 (AmdBf16), a weight gradient whose block on a thread has at least kAmdBlasGradOutputs outputs,
// each a sum of at least kAmdBlasGradFromTerms terms, runs through the BLAS-style call, everything else through
// primitives. Measured per product with benchmarks/bench_products.py on a Zen 5 EPYC (oneDNN 3.10.1, 2 threads,
// 2026-11-27; benchmarks/results): ALBERT-base's feed-forward weight gradients (blocks of 1536 x 768 and 384 x 3072)
// ran 1.04-1.85x as fast through dnnl_gemm_bf16bf16f32 at 256 to 4096 tokens, the masked-LM decoder's (15000 x 128)
// 1.10-1.25x from 80 terms (0.84x at 40); the smaller weight gradients (384 x 768 and below) 0.70-1.11x; the forwards
// and input gradients 0.50-1.55x, above 1.05x in only 8 of 60 rows and never for one product in every run.
// On a Zen 4 EPYC (2026-12-07) the train step with this rule ran level with none (Intel's rules); from 2^18 outputs
// (the 768 x 768 weight gradients too, 1.25x faster alone there) it gained nothing in the step: kept at 2^20.
const int64_t kAmdBlasGradOutputs = 1 << 20;
const int64_t kAmdBlasGradFromTerms = 64;

// Packed weights copied onto a cache line (see AlignedPacked).
struct PackedCopy {
  std::vector<int8_t> storage;
  const int8_t *data;  // on a cache line of storage
};

// Packed weights copied onto a cache line, by their packing's serial number (NextPackingSerial), for tensors packed
// at load whose packed weights do not start on one (PackedHeader, Bf16PackHeader): MindSpore places a tensor's data
// on a 16-byte boundary (measured: 0, 16, 32 or 48 bytes past a line), and weights packed off a cache line ran at
// 0.59-0.71x of the weights as stored (bfloat16, AMX; see Aligned). A serial number is never reused within a process
// and a tensor's bytes are its header's, so a copy found is the tensor's. At most 256 copies (an ALBERT model shares
// one layer's weights: a few per model; an unshared 24-layer one has 147).
albert::dnnl::LruCache<uint64_t, PackedCopy> &AlignedPacked() {
  static auto *copies = new albert::dnnl::LruCache<uint64_t, PackedCopy>(256);
  return *copies;
}

// The copy of packing `serial`'s `bytes` packed weights at `data` (AlignedPacked), made on first use.
std::shared_ptr<const PackedCopy> AlignedCopy(uint64_t serial, const int8_t *data, int64_t bytes) {
  return AlignedPacked().Find(serial, [&] {
    auto copy = std::make_shared<PackedCopy>();
    int8_t *aligned = albert::dnnl::Aligned(&copy->storage, bytes);
    std::memcpy(aligned, data, bytes);
    copy->data = aligned;
    return std::shared_ptr<const PackedCopy>(copy);
  });
}

// A number for each packing of weights at load (serving's int8 and bfloat16 weights), never reused in a process.
uint64_t NextPackingSerial() {
  static std::atomic<uint64_t> packings(0);
  return ++packings;
}

// A product's operand: a row-major matrix (leading dimension ld) in float32, or in bfloat16 when the call's
// products run in bfloat16. A dense layer's weights packed once (per step or at load: Bf16PackHeader) also carry
// their packed forms: packed[1] for x w^T (op(b) = w^T), packed[0] for dy w (op(b) = w); null where there is none.
// `copy` holds a packed form copied onto a cache line (AlignedPacked) while the product reads it.
struct Matrix {
  const float *f32;
  const uint16_t *bf16;
  int64_t ld;
  const void *packed[2] = {nullptr, nullptr};
  std::shared_ptr<const PackedCopy> copy = nullptr;
};

// Tensor i of a call (2-D) as a product's operand. In bfloat16 (bf16) a float32 tensor is rounded once, over the
// threads, into buffer `slot` of the calling thread (MindSpore may run two kernels at once, each from its own
// thread); a bfloat16 tensor is used as it is.
uint16_t *Buffer(int slot, int64_t count) {
  thread_local std::vector<uint16_t> buffers[kOperandSlots];
  return albert::dnnl::Aligned(&buffers[slot], count);
}

Matrix Operand(void **params, int64_t **shapes, const char **dtypes, int i, bool bf16, int slot) {
  const int64_t ld = shapes[i][1];
  if (IsBf16(dtypes[i])) return Matrix{nullptr, static_cast<const uint16_t *>(params[i]), ld};
  const float *data = static_cast<const float *>(params[i]);
  if (!bf16) return Matrix{data, nullptr, ld};
  const int64_t count = shapes[i][0] * ld;
  uint16_t *rounded = Buffer(slot, count);
  albert::ParallelFor(count, kMinConvertPerThread, [&](int64_t, int64_t begin, int64_t end) {
    ALBERT_PROFILE("thread: operands to bf16");
    ToBf16(data + begin, rounded + begin, end - begin);
  });
  return Matrix{nullptr, rounded, ld};
}

// A dense layer's output gradient dy [rows, cols] (tensor i) as a product's operand, its column sums (the bias
// gradient) written to `sums` in the same pass over it: columns split over the threads, each column summed row by
// row in float32 (as ColumnSum in row_ops.cc does). A bfloat16 dy (bf16 calls only) is summed and read as it is.
Matrix OutputGrad(void **params, int64_t **shapes, const char **dtypes, int i, bool bf16, int slot, float *sums) {
  const int64_t rows = shapes[i][0], cols = shapes[i][1];
  const bool given = IsBf16(dtypes[i]);
  const float *dy = given ? nullptr : static_cast<const float *>(params[i]);
  const uint16_t *dy16 = given ? static_cast<const uint16_t *>(params[i]) : nullptr;
  uint16_t *rounded = bf16 && !given ? Buffer(slot, rows * cols) : nullptr;
  albert::ParallelFor(cols, 64, [&](int64_t, int64_t begin, int64_t end) {
    ALBERT_PROFILE("thread: output gradient sums");
    float *out = sums + begin;
    std::fill(out, out + (end - begin), 0.0f);
    thread_local std::vector<float> line;  // a row of a bfloat16 dy, widened
    if (given) line.resize(end - begin);
    for (int64_t r = 0; r < rows; ++r) {
      const float *row = dy ? dy + r * cols + begin : line.data();
      if (given) FromBf16(dy16 + r * cols + begin, line.data(), end - begin);
      for (int64_t c = 0; c < end - begin; ++c) out[c] += row[c];
      if (rounded) ToBf16(row, rounded + r * cols + begin, end - begin);
    }
  });
  if (given) return Matrix{nullptr, dy16, cols};
  return bf16 ? Matrix{nullptr, rounded, cols} : Matrix{dy, nullptr, cols};
}

// Whether a call's products run in bfloat16: under SetBf16(1), or when an operand comes in bfloat16 (or as
// weights packed in bfloat16: an int8 tensor, see Bf16PackHeader).
bool Bf16Call(const char **dtypes, std::initializer_list<int> operands) {
  for (const int i : operands) {
    if (IsBf16(dtypes[i]) || std::strcmp(dtypes[i], "int8") == 0) return true;
  }
  return Bf16();
}

// True when tensor i is float32, or bfloat16 where `bf16_allowed`.
bool Float(const char **dtypes, int i, bool bf16_allowed) {
  return std::strcmp(dtypes[i], "float32") == 0 || (bf16_allowed && IsBf16(dtypes[i]));
}

// A random number of this process: packed weights carry their packer's (the layout is this CPU's and this
// library's, see PackedHeader and Bf16PackHeader).
uint64_t ProcessToken() {
  static const uint64_t token = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32 | device()) ^ static_cast<uint64_t>(getpid());
  }();
  return token;
}

// Training's bfloat16 weights packed once per step (cpu_kernels.bf16_packed, through PackBf16Weights): for a dense
// layer that several of the network's layers run (ALBERT's shared layers: each weight read by 12 forwards and 12
// input gradients per step at 12 layers), the graph makes, once per step, an int8 tensor holding this header and,
// from the first cache line at least 64 bytes in (`offset` bytes from the tensor's start), the weights w [n, k]
// rounded to bfloat16, then the same reordered into the layout oneDNN's primitive picks (albert::dnnl::Pack) for the
// forward x w^T and for the input gradient dy w, each on a cache line. A product reads a packed form where its
// thread's block has all the columns and oneDNN picks that layout for its rows (GemmBlock), else the rounded
// weights; so does every product of a tensor another process packed, or one not on a cache line here. Serving a
// checkpoint in bfloat16 packs its weights so once, at load (cpu_kernels.pack_bf16, through PackBf16ServingWeights):
// the forward's form only, and a serial number, by which a tensor that MindSpore placed off a cache line has its
// packed form copied onto one once (AlignedPacked).
struct Bf16PackHeader {
  char magic[8];
  uint64_t process;
  int64_t n, k;
  int64_t offset;                           // of the rounded weights, from the tensor's start
  int64_t forward_bytes, input_grad_bytes;  // the packed forms' sizes; 0 where a form is not there
  uint64_t serial;                          // packed at load: NextPackingSerial(); per step: 0
};
static_assert(sizeof(Bf16PackHeader) == 64, "the header takes one cache line");
const char kBf16PackMagic[8] = {'A', 'L', 'B', 'E', 'R', 'T', 'P', 'B'};

int64_t RoundUp64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

// The packed forms' sizes for weights [n, k] here: for x w^T (op(b) [k, n]) and for dy w (op(b) [n, k]); 0 where
// they cannot be packed.
int64_t ForwardPackBytes(int64_t n, int64_t k) {
  return static_cast<int64_t>(albert::dnnl::PackedSize(n, k, albert::dnnl::kBf16));
}
int64_t InputGradPackBytes(int64_t n, int64_t k) {
  return static_cast<int64_t>(albert::dnnl::PackedSize(k, n, albert::dnnl::kBf16, false));
}

// The size of a packed tensor (Bf16PackHeader) for weights [n, k] whose packed forms take `forward` and `input_grad`
// bytes (0 for a form it does not hold): the header, room to reach a cache line, the rounded weights, the forms.
int64_t Bf16PackTensorBytes(int64_t n, int64_t k, int64_t forward, int64_t input_grad) {
  return 2 * 64 + RoundUp64(2 * n * k) + RoundUp64(forward) + RoundUp64(input_grad);
}

// Fills `tensor` (Bf16PackTensorBytes(n, k, sizes[0], sizes[1]) bytes) for float32 weights w [n, k]: the header
// (`serial` in it), the weights rounded to bfloat16 from the first cache line 64 bytes in or more, then each form of
// nonzero size (sizes: the forward's, the input gradient's), the two packings on two threads at once. A form oneDNN
// cannot pack here is left out (its size 0 in the header), and the products read the rounded weights instead.
void FillBf16Pack(const float *w, int64_t n, int64_t k, const int64_t sizes[2], uint64_t serial, char *tensor) {
  Bf16PackHeader header{};
  header.offset = 64 + static_cast<int64_t>((64 - (reinterpret_cast<uintptr_t>(tensor) + 64) % 64) % 64);
  uint16_t *rounded = reinterpret_cast<uint16_t *>(tensor + header.offset);
  albert::ParallelFor(n * k, kMinConvertPerThread, [&](int64_t, int64_t begin, int64_t end) {
    ToBf16(w + begin, rounded + begin, end - begin);
  });
  char *forward = tensor + header.offset + RoundUp64(2 * n * k);
  char *input_grad = forward + RoundUp64(sizes[0]);
  bool packed[2] = {false, false};
  albert::ParallelFor(2, 1, [&](int64_t, int64_t begin, int64_t end) {
    ALBERT_PROFILE("thread: packing bf16 weights");
    for (int64_t form = begin; form < end; ++form) {
      const bool tb = form == 0;  // the forward's op(b) = w^T, the input gradient's w
      packed[form] = sizes[form] > 0 && albert::dnnl::Pack(rounded, tb ? n : k, tb ? k : n, tb, albert::dnnl::kBf16,
                                                           tb ? forward : input_grad);
    }
  });
  std::memcpy(header.magic, kBf16PackMagic, sizeof(kBf16PackMagic));
  header.process = ProcessToken();
  header.n = n;
  header.k = k;
  header.forward_bytes = packed[0] ? sizes[0] : 0;
  header.input_grad_bytes = packed[1] ? sizes[1] : 0;
  header.serial = serial;
  std::memcpy(tensor, &header, sizeof(header));
}

// Tensor i as a dense layer's weights [n, k] for the products (into *w): float32 or their bfloat16 copy, 2-D [n, k]
// (see Operand), or, for products in bfloat16 (bf16), an int8 tensor packed for weights [n, k] (Bf16PackHeader:
// per step both forms, at load the forward's). False when it is none of these.
bool WeightOperand(void **params, const int *ndims, int64_t **shapes, const char **dtypes, int i, int64_t n,
                   int64_t k, bool bf16, int slot, Matrix *w) {
  if (std::strcmp(dtypes[i], "int8") != 0) {
    if (ndims[i] != 2 || shapes[i][0] != n || shapes[i][1] != k || !Float(dtypes, i, true)) return false;
    *w = Operand(params, shapes, dtypes, i, bf16, slot);
    return true;
  }
  if (!bf16 || ndims[i] != 1 || shapes[i][0] < static_cast<int64_t>(sizeof(Bf16PackHeader))) return false;
  Bf16PackHeader header;
  std::memcpy(&header, params[i], sizeof(header));
  // This process's tensor holds the forms' sizes this CPU packs to; another's is only checked against its own size
  // (its rounded weights are read).
  const bool at_load = header.serial != 0, ours = header.process == ProcessToken();
  const int64_t forward = ForwardPackBytes(n, k), input_grad = at_load ? 0 : InputGradPackBytes(n, k);
  const bool sizes_fit = header.forward_bytes >= 0 && header.input_grad_bytes >= 0 &&
                         header.forward_bytes <= shapes[i][0] && header.input_grad_bytes <= shapes[i][0];
  const int64_t size = ours ? Bf16PackTensorBytes(n, k, forward, input_grad)
                     : sizes_fit ? Bf16PackTensorBytes(n, k, header.forward_bytes, header.input_grad_bytes) : -1;
  if (std::memcmp(header.magic, kBf16PackMagic, sizeof(kBf16PackMagic)) != 0 || header.n != n || header.k != k ||
      !sizes_fit || shapes[i][0] != size || header.offset < 64 ||
      header.offset >= 128 || (ours && header.forward_bytes != 0 && header.forward_bytes != forward) ||
      (ours && header.input_grad_bytes != 0 && header.input_grad_bytes != input_grad)) {
    return false;
  }
  const char *data = static_cast<const char *>(params[i]) + header.offset;
  *w = Matrix{nullptr, reinterpret_cast<const uint16_t *>(data), k};
  if (!ours) return true;
  const char *forward_form = data + RoundUp64(2 * n * k);
  if (reinterpret_cast<uintptr_t>(data) % 64 == 0) {
    if (header.forward_bytes > 0) w->packed[1] = forward_form;
    if (header.input_grad_bytes > 0) w->packed[0] = forward_form + RoundUp64(forward);
  } else if (at_load && header.forward_bytes > 0) {
    w->copy = AlignedCopy(header.serial, reinterpret_cast<const int8_t *>(forward_form), header.forward_bytes);
    w->packed[1] = w->copy->data;
  }
  return true;
}

// Rows [r0, r1) x columns [c0, c1) of c[m, n] = op(a) op(b) (+ bias[n] on every row) + beta c, beta 0 or 1,
// row-major; op(x) = x or x^T, op(a) is [m, k], op(b) is [k, n].
struct Block {
  int64_t r0, r1, c0, c1;
};

std::string PrimitiveImplementation(int type);

// Whether oneDNN's bfloat16 primitive runs on AMX here (decided once). The choices measured faster on AMX only
// apply there: kBf16BlasFromTerms' rule, and attention's products in batched bfloat16 primitives (AttentionBf16).
bool AmxBf16() {
  static const bool amx = PrimitiveImplementation(albert::dnnl::kBf16).find("amx") != std::string::npos;
  return amx;
}

// ALBERT_KERNELS_VENDOR ("amd" or "intel", checked by cpu_kernels.switch_problem; "" unset), read once as the rules
// it chooses are: to measure AMD's rules against none on one machine, and to run their paths on an Intel CPU with
// AVX512-BF16 (the tests, under ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16).
const std::string &VendorChosen() {
  static const std::string chosen = std::getenv("ALBERT_KERNELS_VENDOR") ? std::getenv("ALBERT_KERNELS_VENDOR") : "";
  return chosen;
}

// Whether the kernels take this CPU for AMD's: ALBERT_KERNELS_VENDOR where set, else CPUID's vendor string.
bool AmdCpu() {
  if (!VendorChosen().empty()) return strcasecmp(VendorChosen().c_str(), "amd") == 0;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::strcmp(vendor, "AuthenticAMD") == 0;
}

// Whether this is an AMD CPU whose bfloat16 primitive runs on AVX512-BF16 (Zen 4 and later: bfloat16 products at
// about twice sgemm's rate; decided once). The choices measured faster there (kAmdBlasGradOutputs' rule, batched
// attention in training) apply only there.
bool AmdBf16() {
  static const bool amd =
      AmdCpu() && PrimitiveImplementation(albert::dnnl::kBf16).find("avx512_core_bf16") != std::string::npos;
  return amd;
}

// Whether training in bfloat16 runs attention's products in batched bfloat16 primitives: where they measured faster
// than float32 per pair, on AMX and on AMD's AVX512-BF16 (an Intel CPU without AMX runs bfloat16 products at
// float32's rate or below).
bool BatchedBf16AttentionInTraining() { return AmxBf16() || AmdBf16(); }

// Whether GemmBlock's bfloat16 product of a block [rows, columns], each output a sum of k terms, runs through
// dnnl_gemm_bf16bf16f32 rather than a primitive, where that measured faster (kBf16BlasFromTerms on AMX,
// kAmdBlasGradOutputs on AMD); `ta` marks a weight gradient (dy^T x), `tb` a forward (x w^T).
bool Bf16BlasFaster(bool ta, bool tb, int64_t rows, int64_t columns, int64_t k) {
  if (ta) return rows * columns >= kAmdBlasGradOutputs && k >= kAmdBlasGradFromTerms && AmdBf16();
  return k >= kBf16BlasFromTerms && k >= kBf16BlasDepthPerColumn * columns && !(tb && rows < kColumnSplitBelowRows) &&
         AmxBf16();
}

int GemmBlock(bool ta, bool tb, const Block &block, int64_t n, int64_t k, const Matrix &a, const Matrix &b,
              const float *bias, float beta, float *c) {
  const int64_t rows = block.r1 - block.r0, columns = block.c1 - block.c0;
  // Row r of op(a) starts at r * lda (a stored [m, k]) or at r (a stored [k, m], read transposed); column j of
  // op(b) at j (b stored [k, n]) or at j * ldb (b stored [n, k], read transposed).
  const int64_t a_start = ta ? block.r0 : block.r0 * a.ld, b_start = tb ? block.c0 * b.ld : block.c0;
  float *c_block = c + block.r0 * n + block.c0;
  if (a.bf16 && !ta && b.packed[tb] && columns == n) {  // weights packed once (Bf16PackHeader)
    // Never with the sum post-op (beta 1): on AMX, oneDNN 3.10.1's primitive on packed weights adds c wrongly
    // for sums of 1280 terms and more (relative error 0.8-0.9 at 512 x 768 x 3072; 7 rows too, not 64 or 128;
    // right on the weights as stored, and without AMX). So the product goes to a buffer, added to c here.
    albert::dnnl::Shape shape{false, false, bias != nullptr, false, rows, n, k, a.ld, 0, n};
    shape.packed_b = true;
    if (albert::dnnl::Cache::Find(shape)->primitive) {  // else oneDNN picks another layout for this many rows
      ALBERT_PROFILE("thread: matmul primitive bf16, packed weights");
      thread_local std::vector<float> sum;
      float *out = beta != 0.0f ? albert::dnnl::Aligned(&sum, rows * n) : c_block;
      if (albert::dnnl::Run(shape, a.bf16 + a_start, b.packed[tb], bias, out)) {
        if (out != c_block) {
          for (int64_t i = 0; i < rows * n; ++i) c_block[i] += out[i];
        }
        return 0;
      }
    }
  }
  if (a.bf16 && !Bf16BlasFaster(ta, tb, rows, columns, k)) {
    ALBERT_PROFILE("thread: matmul primitive bf16");
    const albert::dnnl::Shape shape{ta, tb, bias != nullptr, beta != 0.0f, rows, columns, k, a.ld, b.ld, n};
    if (albert::dnnl::Run(shape, a.bf16 + a_start, b.bf16 + b_start, bias ? bias + block.c0 : nullptr, c_block)) {
      return 0;
    }
  }
  if (bias) {  // c = bias (+ c): the BLAS-style calls take no bias
    for (int64_t row = 0; row < rows; ++row) {
      float *c_row = c_block + row * n;
      if (beta == 0.0f) {
        std::memcpy(c_row, bias + block.c0, columns * sizeof(float));
      } else {
        for (int64_t j = 0; j < columns; ++j) c_row[j] = beta * c_row[j] + bias[block.c0 + j];
      }
    }
    beta = 1.0f;
  }
  const char op_a = ta ? 'T' : 'N', op_b = tb ? 'T' : 'N';
  if (a.bf16) {
    ALBERT_PROFILE("thread: gemm_bf16bf16f32");
    return dnnl_gemm_bf16bf16f32(op_a, op_b, rows, columns, k, 1.0f, a.bf16 + a_start, a.ld, b.bf16 + b_start, b.ld,
                                 beta, c_block, n);
  }
  ALBERT_PROFILE("thread: sgemm");
  return dnnl_sgemm(op_a, op_b, rows, columns, k, 1.0f, a.f32 + a_start, a.ld, b.f32 + b_start, b.ld, beta, c_block,
                    n);
}

// Rows [r0, r1) x columns [c0, c1) of from [m, n] into the same places of to (row-major, float32).
void CopyBlock(const float *from, const Block &block, int64_t n, float *to) {
  for (int64_t r = block.r0; r < block.r1; ++r) {
    std::memcpy(to + r * n + block.c0, from + r * n + block.c0, (block.c1 - block.c0) * sizeof(float));
  }
}

// One attention head's product, always float32 (see the top of the file).
int HeadProduct(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                const float *b, int64_t ldb, float *c, int64_t ldc) {
  ALBERT_PROFILE("thread: attention sgemm");
  return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
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

// True when tensors [first, first + count) are float32 vectors of n.
bool Vectors(const int *ndims, int64_t **shapes, const char **dtypes, int first, int count, int64_t n) {
  for (int i = first; i < first + count; ++i) {
    if (std::strcmp(dtypes[i], "float32") != 0 || ndims[i] != 1 || shapes[i][0] != n) return false;
  }
  return true;
}

// True when tensor i is a 2-D [rows, cols] tensor.
bool Is2D(const int *ndims, int64_t **shapes, int i, int64_t rows, int64_t cols) {
  return ndims[i] == 2 && shapes[i][0] == rows && shapes[i][1] == cols;
}

// True when tensor i is a 2-D [rows, cols] tensor of `dtype`.
bool Matrix2D(const int *ndims, int64_t **shapes, const char **dtypes, int i, const char *dtype, int64_t rows,
              int64_t cols) {
  return std::strcmp(dtypes[i], dtype) == 0 && Is2D(ndims, shapes, i, rows, cols);
}

// Where a product kernel finds its tensors: c = op(a) op(b) (+ bias). `weights`, when not -1, is a dense layer's
// float32 weights passed beside b, their bfloat16 copy or the same packed (Bf16PackHeader): only there to give the
// weights their gradient.
struct Layout {
  int a, b, bias, out, weights;
};

// c[m, n] = op(a) op(b) (+ bias[n] on every row), row-major; a and b float32 or bfloat16 (b also packed, beside
// the weights), bias and c float32.
int Gemm(bool ta, bool tb, const Layout &at, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  const int b_shape = at.weights >= 0 ? at.weights : at.b;  // b's shape is the weights'
  if (ndims[at.a] != 2 || ndims[b_shape] != 2 || ndims[at.out] != 2 || (at.bias >= 0 && ndims[at.bias] != 1) ||
      !Float(dtypes, at.a, true) || !Float(dtypes, at.out, false) ||
      (at.bias >= 0 && !Float(dtypes, at.bias, false)) || (at.weights >= 0 && !Float(dtypes, at.weights, false))) {
    return 1;
  }
  const bool bf16 = Bf16Call(dtypes, {at.a, at.b});
  Matrix b;
  if (!WeightOperand(params, ndims, shapes, dtypes, at.b, shapes[b_shape][0], shapes[b_shape][1], bf16, 1, &b)) {
    return 1;
  }
  const Matrix a = Operand(params, shapes, dtypes, at.a, bf16, 0);
  const float *bias = at.bias >= 0 ? static_cast<const float *>(params[at.bias]) : nullptr;
  float *c = static_cast<float *>(params[at.out]);
  const int64_t m = ta ? shapes[at.a][1] : shapes[at.a][0], k = ta ? shapes[at.a][0] : shapes[at.a][1];
  const int64_t n = tb ? shapes[b_shape][0] : shapes[b_shape][1];
  if ((tb ? shapes[b_shape][1] : shapes[b_shape][0]) != k) return 1;
  return ForBlocks(tb && !ta, m, n, [&](const Block &block) {
    return GemmBlock(ta, tb, block, n, k, a, b, bias, 0.0f, c);
  });
}

// The query, key and value layers of attention in one call, each thread's slice of all three in turn:
// (x [M, K], w0, w1, w2 [N, K], b0, b1, b2 [N]) -> y_i = x w_i^T + b_i [M, N]; with `copies`, the weights'
// bfloat16 copies (or the same packed) follow the weights: (x, w0, w1, w2, w0', w1', w2', b0, b1, b2) (see Layout).
// The outputs come in float32, or, in a call whose products run in bfloat16, all three in bfloat16: the form
// bfloat16 attention reads (AttentionBf16), rounded here from the thread's float32 block rather than by each reader.
int DenseThree(bool copies, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  const int weights = copies ? 4 : 1, biases = weights + 3, outputs = biases + 3;
  if (ndims[0] != 2 || ndims[1] != 2 || ndims[biases] != 1 || !SameShapes(ndims, shapes, 2, 2, 1) ||
      !SameShapes(ndims, shapes, biases + 1, 2, biases) || shapes[0][1] != shapes[1][1] ||
      shapes[biases][0] != shapes[1][0] || !Float(dtypes, 0, false)) {
    return 1;
  }
  for (int i = 1; i < outputs; ++i) {
    if ((i < weights || i >= weights + 3) && !Float(dtypes, i, false)) return 1;  // the weights: WeightOperand
  }
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  const bool bf16 = Bf16Call(dtypes, {weights, weights + 1, weights + 2});
  const bool rounded = IsBf16(dtypes[outputs]);
  for (int i = outputs; i < outputs + 3; ++i) {
    if (!Float(dtypes, i, bf16) || IsBf16(dtypes[i]) != rounded) return 1;
  }
  Matrix w[3];
  for (int i = 0; i < 3; ++i) {
    if (!WeightOperand(params, ndims, shapes, dtypes, weights + i, n, k, bf16, 1 + i, &w[i])) return 1;
  }
  const Matrix x = Operand(params, shapes, dtypes, 0, bf16, 0);
  return ForBlocks(true, m, n, [&](const Block &block) {
    const int64_t rows = block.r1 - block.r0, columns = block.c1 - block.c0;
    // bfloat16 outputs: the block's products into the thread's float32 scratch (x from the block's first row)
    thread_local std::vector<float> scratch;
    const Matrix x_rows = rounded ? Matrix{nullptr, x.bf16 + block.r0 * x.ld, x.ld} : x;
    const Block local = rounded ? Block{0, rows, block.c0, block.c1} : block;
    float *into = rounded ? albert::dnnl::Aligned(&scratch, rows * n) : nullptr;
    int status = 0;
    for (int i = 0; i < 3 && status == 0; ++i) {
      status = GemmBlock(false, true, local, n, k, x_rows, w[i], static_cast<const float *>(params[biases + i]),
                         0.0f, rounded ? into : static_cast<float *>(params[outputs + i]));
      for (int64_t r = 0; rounded && status == 0 && r < rows; ++r) {
        ToBf16(into + r * n + block.c0, static_cast<uint16_t *>(params[outputs + i]) + (block.r0 + r) * n + block.c0,
               columns);
      }
    }
    return status;
  });
}

// The gradients of dense layers y_i = x w_i^T (+ b_i) that share their input x [M, K], in one call: dy_i [M, N],
// x, w_i [N, K] (float32, or bfloat16 copies or packed: WeightOperand) -> dx = sum_i dy_i w_i [M, K], dw_i = dy_i^T x
// [N, K] and, with biases, db_i = column sums of dy_i [N]. Tensors: dy_0..dy_{n-1}, x, w_0..w_{n-1}, then the
// outputs dx, dw_*, db_*. Each dy_i is read once for its bias gradient and its bfloat16 form, x is rounded once for
// all n weight gradients.
int DenseGrads(int count, bool biases, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  const int x_at = count, w_at = count + 1, dx_at = 2 * count + 1, dw_at = dx_at + 1, db_at = dw_at + count;
  const int tensors = db_at + (biases ? count : 0);
  const bool bf16 = Bf16Call(dtypes, {w_at});
  for (int i = 0; i < tensors; ++i) {
    if (i >= w_at && i < dx_at) continue;  // the weights: WeightOperand
    // dy in bfloat16 where the products run in it (attention's gradients for DenseThree's bfloat16 outputs)
    if (!Float(dtypes, i, bf16 && i < x_at) || ndims[i] != (biases && i >= db_at ? 1 : 2)) return 1;
  }
  if (!SameShapes(ndims, shapes, 1, count - 1, 0) || shapes[x_at][0] != shapes[0][0]) return 1;
  const int64_t m = shapes[0][0], n = shapes[0][1], k = shapes[x_at][1];
  std::vector<Matrix> dy(count), w(count);
  for (int i = 0; i < count; ++i) {
    if (!WeightOperand(params, ndims, shapes, dtypes, w_at + i, n, k, bf16, count + 1 + i, &w[i])) return 1;
  }
  for (int i = 0; i < count; ++i) {
    float *sums = biases ? static_cast<float *>(params[db_at + i]) : nullptr;
    dy[i] = sums ? OutputGrad(params, shapes, dtypes, i, bf16, i, sums) : Operand(params, shapes, dtypes, i, bf16, i);
  }
  const Matrix x = Operand(params, shapes, dtypes, x_at, bf16, count);
  float *dx = static_cast<float *>(params[dx_at]);
  int status = ForBlocks(false, m, k, [&](const Block &block) {
    int result = 0;
    for (int i = 0; i < count && result == 0; ++i) {
      result = GemmBlock(false, false, block, k, n, dy[i], w[i], nullptr, i == 0 ? 0.0f : 1.0f, dx);
    }
    return result;
  });
  for (int i = 0; i < count && status == 0; ++i) {
    status = ForBlocks(false, n, k, [&](const Block &block) {
      return GemmBlock(true, false, block, k, m, dy[i], x, nullptr, 0.0f, static_cast<float *>(params[dw_at + i]));
    });
  }
  return status;
}

// A transformer block's feed-forward network with what its backward needs, in one call: (x [M, H], w1 [I, H],
// b1 [I], w2 [H, I], b2 [H]) -> (y = h w2^T + b2 [M, H], pre = x w1^T + b1 [M, I], h = gelu(pre) [M, I]), the tanh
// GELU; with `copies`, each weight's bfloat16 copy follows it: (x, w1, w1', b1, w2, w2', b2) (see Layout). Each
// thread puts its block of pre through GELU as soon as its product is done, and writes h in its output's dtype:
// bfloat16 with the copies (the form the second product and the backward's weight gradient read, rounded once here
// instead of by each), else float32. The same numbers as MatMulNTBias(Copy), GeluTanh and MatMulNTBias(Copy) in
// turn, without two passes over the [M, I] activations and two kernel calls. With `residual`, y = x + that (a post-LN
// block's sum before its LayerNorm): each thread copies its block of x into y and the second product adds onto it,
// instead of a separate pass over [M, H] (and the backward's sum of x's two gradients: DenseGeluDenseGradients).
int DenseGeluDense(bool copies, bool residual, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  const int w1_at = copies ? 2 : 1, b1_at = w1_at + 1, w2_at = copies ? 5 : 3, b2_at = w2_at + 1;
  const int y_at = b2_at + 1, pre_at = y_at + 1, h_at = y_at + 2;
  if (ndims[0] != 2 || ndims[1] != 2) return 1;
  const int64_t m = shapes[0][0], hidden = shapes[0][1], inner = shapes[1][0];
  const bool bf16 = Bf16Call(dtypes, {w1_at, w2_at, h_at});
  Matrix w1, w2;
  if (!Matrix2D(ndims, shapes, dtypes, 0, "float32", m, hidden) ||
      !WeightOperand(params, ndims, shapes, dtypes, w1_at, inner, hidden, bf16, 1, &w1) ||
      !Vectors(ndims, shapes, dtypes, b1_at, 1, inner) ||
      !WeightOperand(params, ndims, shapes, dtypes, w2_at, hidden, inner, bf16, 2, &w2) ||
      !Vectors(ndims, shapes, dtypes, b2_at, 1, hidden) ||
      !Matrix2D(ndims, shapes, dtypes, y_at, "float32", m, hidden) ||
      !Matrix2D(ndims, shapes, dtypes, pre_at, "float32", m, inner) || !Is2D(ndims, shapes, h_at, m, inner) ||
      !Float(dtypes, h_at, bf16) ||
      (copies && (!Matrix2D(ndims, shapes, dtypes, 1, "float32", inner, hidden) ||
                  !Matrix2D(ndims, shapes, dtypes, 4, "float32", hidden, inner)))) {
    return 1;
  }
  const Matrix x = Operand(params, shapes, dtypes, 0, bf16, 0);
  float *pre = static_cast<float *>(params[pre_at]);
  const bool h_bf16 = IsBf16(dtypes[h_at]);
  int status = ForBlocks(true, m, inner, [&](const Block &block) {
    const int result = GemmBlock(false, true, block, inner, hidden, x, w1, static_cast<const float *>(params[b1_at]),
                                 0.0f, pre);
    ALBERT_PROFILE("thread: feed-forward gelu");
    thread_local std::vector<float> row;
    row.resize(block.c1 - block.c0);
    for (int64_t r = block.r0; r < block.r1 && result == 0; ++r) {
      const float *from = pre + r * inner + block.c0;
      float *to = h_bf16 ? row.data() : static_cast<float *>(params[h_at]) + r * inner + block.c0;
      for (int64_t c = 0; c < block.c1 - block.c0; ++c) to[c] = albert::Gelu(from[c]);
      if (h_bf16) ToBf16(to, static_cast<uint16_t *>(params[h_at]) + r * inner + block.c0, block.c1 - block.c0);
    }
    return result;
  });
  if (status != 0) return status;
  const Matrix h = Operand(params, shapes, dtypes, h_at, bf16, 3);
  float *y = static_cast<float *>(params[y_at]);
  return ForBlocks(true, m, hidden, [&](const Block &block) {
    if (residual) CopyBlock(static_cast<const float *>(params[0]), block, hidden, y);
    return GemmBlock(false, true, block, hidden, inner, h, w2, static_cast<const float *>(params[b2_at]),
                     residual ? 1.0f : 0.0f, y);
  });
}

// DenseGeluDense's gradients: (dy [M, H], x [M, H], pre [M, I], h [M, I], w1 [I, H], w2 [H, I]) -> (dx [M, H],
// dw1 [I, H], db1 [I], dw2 [H, I], db2 [H]); h and the weights float32 or bfloat16 (the copies, or packed:
// WeightOperand). dpre = (dy w2) * gelu'(pre) is made, summed by columns for db1 and rounded for the products in one
// pass (as GeluTanhGrad and DenseGrad's read of its output gradient would in two), then the products as DenseGrad's.
// With `residual` (y = x + ...), dx = dy + dpre w1: each thread copies its block of dy into dx and the product adds.
int DenseGeluDenseGradients(bool residual, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (ndims[0] != 2 || ndims[2] != 2) return 1;
  const int64_t m = shapes[0][0], hidden = shapes[0][1], inner = shapes[2][1];
  const bool bf16 = Bf16Call(dtypes, {3, 4, 5});
  Matrix w1, w2;
  if (!Matrix2D(ndims, shapes, dtypes, 0, "float32", m, hidden) ||
      !Matrix2D(ndims, shapes, dtypes, 1, "float32", m, hidden) ||
      !Matrix2D(ndims, shapes, dtypes, 2, "float32", m, inner) ||
      !Is2D(ndims, shapes, 3, m, inner) || !Float(dtypes, 3, true) ||
      !WeightOperand(params, ndims, shapes, dtypes, 4, inner, hidden, bf16, 1, &w1) ||
      !WeightOperand(params, ndims, shapes, dtypes, 5, hidden, inner, bf16, 2, &w2) ||
      !Matrix2D(ndims, shapes, dtypes, 6, "float32", m, hidden) ||
      !Matrix2D(ndims, shapes, dtypes, 7, "float32", inner, hidden) || !Vectors(ndims, shapes, dtypes, 8, 1, inner) ||
      !Matrix2D(ndims, shapes, dtypes, 9, "float32", hidden, inner) || !Vectors(ndims, shapes, dtypes, 10, 1, hidden)) {
    return 1;
  }
  float *db1 = static_cast<float *>(params[8]);
  const Matrix dy = OutputGrad(params, shapes, dtypes, 0, bf16, 0, static_cast<float *>(params[10]));
  thread_local std::vector<float> scratch;  // dh (then dpre, for float32 products): the calling thread's, as Buffer's
  float *dpre = albert::dnnl::Aligned(&scratch, m * inner);
  int status = ForBlocks(false, m, inner, [&](const Block &block) {
    return GemmBlock(false, false, block, inner, hidden, dy, w2, nullptr, 0.0f, dpre);
  });
  if (status != 0) return status;
  const float *pre = static_cast<const float *>(params[2]);
  uint16_t *rounded = bf16 ? Buffer(4, m * inner) : nullptr;
  albert::ParallelFor(inner, 64, [&](int64_t, int64_t begin, int64_t end) {
    ALBERT_PROFILE("thread: feed-forward gelu gradient");
    float *sums = db1 + begin;
    std::fill(sums, sums + (end - begin), 0.0f);
    thread_local std::vector<float> line;  // bfloat16: a row of dpre, kept here until rounded (no float32 write-back)
    if (rounded) line.resize(end - begin);
    for (int64_t r = 0; r < m; ++r) {
      const float *dh = dpre + r * inner + begin, *at = pre + r * inner + begin;
      float *row = rounded ? line.data() : dpre + r * inner + begin;
      for (int64_t c = 0; c < end - begin; ++c) {
        row[c] = dh[c] * albert::GeluDerivative(at[c]);
        sums[c] += row[c];
      }
      if (rounded) ToBf16(row, rounded + r * inner + begin, end - begin);
    }
  });
  const Matrix dpre_operand = bf16 ? Matrix{nullptr, rounded, inner} : Matrix{dpre, nullptr, inner};
  const Matrix x = Operand(params, shapes, dtypes, 1, bf16, 5), h = Operand(params, shapes, dtypes, 3, bf16, 3);
  float *dx = static_cast<float *>(params[6]);
  status = ForBlocks(false, m, hidden, [&](const Block &block) {
    if (residual) CopyBlock(static_cast<const float *>(params[0]), block, hidden, dx);
    return GemmBlock(false, false, block, hidden, inner, dpre_operand, w1, nullptr, residual ? 1.0f : 0.0f, dx);
  });
  if (status == 0) {
    status = ForBlocks(false, inner, hidden, [&](const Block &block) {
      return GemmBlock(true, false, block, hidden, m, dpre_operand, x, nullptr, 0.0f, static_cast<float *>(params[7]));
    });
  }
  if (status == 0) {
    status = ForBlocks(false, hidden, inner, [&](const Block &block) {
      return GemmBlock(true, false, block, inner, m, dy, h, nullptr, 0.0f, static_cast<float *>(params[9]));
    });
  }
  return status;
}

// Serving's int8 products (src.predict --precision int8): y = x w^T (+ b) with w quantized (and packed: PackedHeader)
// once at load, int8 per output channel with float32 scales (cpu_kernels.quantize_int8), and x quantized on each call
// per row, symmetric: q = round(x * 127 / max|row|), scale max|row| / 127. The int8 product sums exactly in int32 (a
// oneDNN matmul primitive on AMX-INT8 or VNNI: cpu_kernels.int8_support refuses the others, see ExactInt8), and each
// row's sums become float32 through both scales while the thread's block is in cache. A row holding NaN or inf gets
// a NaN scale, so its outputs are NaN.

// Int8 weights w [n, k] with their scales [n], and the same packed (null when not: see PackedInt8), in the tensor
// or in `copy`.
struct Int8Weights {
  const int8_t *values = nullptr, *packed = nullptr;
  const float *scales = nullptr;
  std::shared_ptr<const PackedCopy> copy;
};

// Rows of a thread's block per call in the int8 kernels that keep a chunk in cache (its int32 sums, the
// feed-forward network's activations); the weights are packed for products of this many rows.
const int64_t kChunkRows = albert::dnnl::kPackedRows;

// Serving's int8 weights packed once at load (cpu_kernels.pack_int8, through PackInt8Weights): an int8 tensor
// holding this header, then w [n, k] in the layout oneDNN's primitive picks for it (albert::dnnl::Pack). The header
// names the weights' shape and the process that packed them (a random token: the layout is this CPU's and this
// library's). A tensor packed by another process, for weights of another shape, or of another size than this
// process packs such weights to, or a header of zeros (packing not available here), is not used: the products read
// w as stored. (Which weights of that shape it holds is the caller's to keep straight: cpu_kernels.Dense keeps each
// layer's pair together.)
struct PackedHeader {
  char magic[8];
  uint64_t process;
  uint64_t serial;      // which packing of this process (see AlignedPacked)
  int64_t n, k, bytes;  // bytes: the packed weights' size
  char unused[16];
};
static_assert(sizeof(PackedHeader) == 64, "the packed weights start on a cache line of the tensor");
const char kPackedMagic[8] = {'A', 'L', 'B', 'E', 'R', 'T', 'P', '8'};

// Tensor i (a packed-weights tensor) checked: false where it is not 1-D int8 (a wrong call), else w->packed set to
// its packed weights for w [n, k] on a cache line (in the tensor, or a copy: AlignedPacked), or to null when it
// holds none usable here (see PackedHeader).
bool PackedInt8(void **params, const int *ndims, int64_t **shapes, const char **dtypes, int i, int64_t n, int64_t k,
                Int8Weights *w) {
  if (ndims[i] != 1 || std::strcmp(dtypes[i], "int8") != 0) return false;
  w->packed = nullptr;
  const int64_t size = shapes[i][0];
  if (size < static_cast<int64_t>(sizeof(PackedHeader))) return true;
  PackedHeader header;
  std::memcpy(&header, params[i], sizeof(header));
  const int8_t *data = static_cast<const int8_t *>(params[i]) + sizeof(PackedHeader);
  if (std::memcmp(header.magic, kPackedMagic, sizeof(kPackedMagic)) != 0 || header.process != ProcessToken() ||
      header.n != n || header.k != k || header.bytes <= 0 ||
      header.bytes != static_cast<int64_t>(albert::dnnl::PackedSize(n, k, albert::dnnl::kS8)) ||
      size != static_cast<int64_t>(sizeof(PackedHeader)) + header.bytes) {
    return true;
  }
  if (reinterpret_cast<uintptr_t>(data) % 64 == 0) {
    w->packed = data;
  } else {
    w->copy = AlignedCopy(header.serial, data, header.bytes);
    w->packed = w->copy->data;
  }
  return true;
}

struct QuantizedRows {
  const int8_t *values;
  const float *scales;
};

// Row `row` [k] quantized into q, its scale returned (NaN when the row holds NaN or inf). The test for those is a
// comparison: the build's -fno-signed-zeros lets GCC fold x * 0 to 0 even for NaN.
float QuantizeRow(const float *row, int64_t k, int8_t *q) {
  const float kLargest = std::numeric_limits<float>::max();
  float largest = 0.0f;
  bool finite = true;
  int64_t i = 0;
#ifdef __AVX512F__
  __m512 most = _mm512_setzero_ps();
  __mmask16 unusual = 0;  // lanes that saw NaN or inf (|v| > FLT_MAX or unordered)
  for (; i + 16 <= k; i += 16) {
    const __m512 v = _mm512_abs_ps(_mm512_loadu_ps(row + i));
    most = _mm512_max_ps(most, v);
    unusual |= _mm512_cmp_ps_mask(v, _mm512_set1_ps(kLargest), _CMP_NLE_UQ);
  }
  largest = _mm512_reduce_max_ps(most);
  finite = unusual == 0;
#endif
  for (int64_t j = i; j < k; ++j) {
    const float v = std::fabs(row[j]);
    largest = std::max(largest, v);
    finite = finite && v <= kLargest;
  }
  if (!finite || largest == 0.0f) {
    std::memset(q, 0, static_cast<size_t>(std::max<int64_t>(k, 0)));
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inverse = 127.0f / largest;
  i = 0;
#ifdef __AVX512F__
  const __m512 times = _mm512_set1_ps(inverse);
  for (; i + 16 <= k; i += 16) {  // rounded to nearest even (the default rounding mode), |value| <= 127
    const __m512i value = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + i), times));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(q + i), _mm512_cvtsepi32_epi8(value));
  }
#endif
  for (; i < k; ++i) {
    q[i] = static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, std::nearbyint(row[i] * inverse))));
  }
  return largest / 127.0f;
}

QuantizedRows QuantizeRows(const float *x, int64_t rows, int64_t k) {
  thread_local std::vector<int8_t> values;
  thread_local std::vector<float> scales;
  if (static_cast<int64_t>(scales.size()) < rows) scales.resize(rows);
  int8_t *q = albert::dnnl::Aligned(&values, rows * k);
  float *s = scales.data();
  albert::ParallelFor(rows, 16, [&](int64_t, int64_t begin, int64_t end) {
    ALBERT_PROFILE("thread: activations to int8");
    for (int64_t r = begin; r < end; ++r) s[r] = QuantizeRow(x + r * k, k, q + r * k);
  });
  return QuantizedRows{q, s};
}

// Rows r0 .. r0 + rows - 1 and columns `block` of the int32 sums x w^T into sums [rows, columns]: on the packed
// weights where the block has all the columns and oneDNN reads that layout for this many rows, else on w as stored.
bool Int8Sums(const Block &block, int64_t r0, int64_t rows, int64_t k, const QuantizedRows &x, const Int8Weights &w,
              int64_t n, int32_t *sums) {
  const int64_t columns = block.c1 - block.c0;
  if (w.packed && block.c0 == 0 && columns == n) {
    albert::dnnl::Shape shape{false, false, false, false, rows, n, k, k, 0, n, albert::dnnl::kS8};
    shape.packed_b = true;
    if (albert::dnnl::Cache::Find(shape)->primitive) {  // else oneDNN picks another layout for this many rows
      ALBERT_PROFILE("thread: matmul primitive int8, packed weights");
      if (albert::dnnl::Run(shape, x.values + r0 * k, w.packed, nullptr, sums)) return true;
    }
  }
  ALBERT_PROFILE("thread: matmul primitive int8");
  const albert::dnnl::Shape shape{false, true, false, false, rows, columns, k, k, k, columns, albert::dnnl::kS8};
  return albert::dnnl::Run(shape, x.values + r0 * k, w.values + block.c0 * k, nullptr, sums);
}

// Rows and columns `block` of y [m, n] = x w^T (+ bias): x quantized rows [m, k], w [n, k] int8 with scales [n].
int Int8Block(const Block &block, int64_t n, int64_t k, const QuantizedRows &x, const Int8Weights &w,
              const float *bias, float *y) {
  const int64_t columns = block.c1 - block.c0;
  thread_local std::vector<int32_t> buffer;
  int32_t *sums = albert::dnnl::Aligned(&buffer, kChunkRows * columns);
  for (int64_t r0 = block.r0; r0 < block.r1; r0 += kChunkRows) {
    const int64_t rows = std::min(kChunkRows, block.r1 - r0);
    if (!Int8Sums(block, r0, rows, k, x, w, n, sums)) return 3;
    ALBERT_PROFILE("thread: int8 sums to float32");
    for (int64_t r = 0; r < rows; ++r) {
      const float row_scale = x.scales[r0 + r];
      const int32_t *from = sums + r * columns;
      const float *scales = w.scales + block.c0;
      float *to = y + (r0 + r) * n + block.c0;
      if (bias) {
        const float *b = bias + block.c0;
        for (int64_t c = 0; c < columns; ++c) to[c] = static_cast<float>(from[c]) * (row_scale * scales[c]) + b[c];
      } else {
        for (int64_t c = 0; c < columns; ++c) to[c] = static_cast<float>(from[c]) * (row_scale * scales[c]);
      }
    }
  }
  return 0;
}

// Tensors w_at (int8 [n, k]), p_at (the same packed, see PackedInt8) and s_at (float32 scales [n]) as int8
// weights; false when they are not such tensors.
bool ReadInt8Weights(void **params, const int *ndims, int64_t **shapes, const char **dtypes, int w_at, int p_at,
                     int s_at, int64_t n, int64_t k, Int8Weights *w) {
  w->values = static_cast<const int8_t *>(params[w_at]);
  w->scales = static_cast<const float *>(params[s_at]);
  return Matrix2D(ndims, shapes, dtypes, w_at, "int8", n, k) && Vectors(ndims, shapes, dtypes, s_at, 1, n) &&
         PackedInt8(params, ndims, shapes, dtypes, p_at, n, k, w);
}

// `count` dense layers sharing their input, in int8: (x [M, K] float32, w_0..w_{count-1} [N, K] int8, p_0.. (w
// packed), s_0.. [N] float32 (w's scales), with `biases` b_0.. [N] float32) -> y_0.. [M, N] float32; x quantized
// once.
int DenseInt8(int count, bool biases, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  const int w_at = 1, p_at = 1 + count, s_at = p_at + count, b_at = s_at + count, y_at = b_at + (biases ? count : 0);
  if (ndims[0] != 2 || ndims[w_at] != 2) return 1;
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[w_at][0];
  if (!Matrix2D(ndims, shapes, dtypes, 0, "float32", m, k) || !Vectors(ndims, shapes, dtypes, b_at, y_at - b_at, n)) {
    return 1;
  }
  std::vector<Int8Weights> weights(count);
  for (int i = 0; i < count; ++i) {
    if (!ReadInt8Weights(params, ndims, shapes, dtypes, w_at + i, p_at + i, s_at + i, n, k, &weights[i]) ||
        !Matrix2D(ndims, shapes, dtypes, y_at + i, "float32", m, n)) {
      return 1;
    }
  }
  const QuantizedRows x = QuantizeRows(static_cast<const float *>(params[0]), m, k);
  return ForBlocks(true, m, n, [&](const Block &block) {
    int status = 0;
    for (int i = 0; i < count && status == 0; ++i) {
      status = Int8Block(block, n, k, x, weights[i], biases ? static_cast<const float *>(params[b_at + i]) : nullptr,
                         static_cast<float *>(params[y_at + i]));
    }
    return status;
  });
}

// Rows [0, rows) of y [., n] = LayerNorm(y + residual) in place, a row at a time: the residual add and LayerNorm
// after a product, while its rows are in cache.
void ResidualNormRows(float *y, const float *residual, const float *gamma, const float *beta, float eps, int64_t rows,
                      int64_t n) {
  ALBERT_PROFILE("thread: residual and LayerNorm");
  for (int64_t r = 0; r < rows; ++r) {
    float *row = y + r * n, mean, rstd;
    const float *add = residual + r * n;
    for (int64_t c = 0; c < n; ++c) row[c] += add[c];
    albert::LayerNormRow(row, gamma, beta, eps, n, row, &mean, &rstd);
  }
}

// Runs fn(r0, rows) over chunks of at most kChunkRows rows of [0, m), each thread on its own rows; fn returns a
// status (0: done).
template <typename Fn>
int ForRowChunks(int64_t m, Fn fn) {
  std::vector<int> status(albert::Threads(), 0);
  const int64_t parts = albert::ParallelFor(m, 1, [&](int64_t part, int64_t begin, int64_t end) {
    for (int64_t r0 = begin; r0 < end && status[part] == 0; r0 += kChunkRows) {
      status[part] = fn(r0, std::min(kChunkRows, end - r0));
    }
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (status[p] != 0) return 3;
  }
  return 0;
}

// Attention's output layer served in int8 with the residual and LayerNorm after it (post-LN blocks):
// (x [M, K], w [N, K] int8, p (w packed), s [N], b [N], residual [M, N], gamma [N], beta [N], eps [1]) -> y [M, N] =
// LayerNorm(residual + x w^T + b), each chunk of rows normalized while in cache.
int DenseResidualNorm(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (ndims[0] != 2 || ndims[1] != 2) return 1;
  const int64_t m = shapes[0][0], k = shapes[0][1], n = shapes[1][0];
  Int8Weights w;
  if (!Matrix2D(ndims, shapes, dtypes, 0, "float32", m, k) ||
      !ReadInt8Weights(params, ndims, shapes, dtypes, 1, 2, 3, n, k, &w) || !Vectors(ndims, shapes, dtypes, 4, 1, n) ||
      !Matrix2D(ndims, shapes, dtypes, 5, "float32", m, n) || !Vectors(ndims, shapes, dtypes, 6, 2, n) ||
      !Vectors(ndims, shapes, dtypes, 8, 1, 1) || !Matrix2D(ndims, shapes, dtypes, 9, "float32", m, n)) {
    return 1;
  }
  const float *bias = static_cast<const float *>(params[4]), *residual = static_cast<const float *>(params[5]);
  const float *gamma = static_cast<const float *>(params[6]), *beta = static_cast<const float *>(params[7]);
  const float eps = *static_cast<const float *>(params[8]);
  float *y = static_cast<float *>(params[9]);
  const QuantizedRows x = QuantizeRows(static_cast<const float *>(params[0]), m, k);
  return ForRowChunks(m, [&](int64_t r0, int64_t rows) {
    const int status = Int8Block(Block{r0, r0 + rows, 0, n}, n, k, x, w, bias, y);
    if (status == 0) ResidualNormRows(y + r0 * n, residual + r0 * n, gamma, beta, eps, rows, n);
    return status;
  });
}

// A transformer block's feed-forward network served in int8, each thread's rows in chunks that stay in cache:
// (x [M, H] float32, w1 [I, H] int8, p1 (w1 packed), s1 [I], b1 [I], w2 [H, I] int8, p2, s2 [H], b2 [H]) -> y =
// gelu(x w1^T + b1) w2^T + b2 [M, H] (the tanh GELU), the same as DenseInt8, GeluTanh and DenseInt8 in turn, but the
// [M, I] activations never leave the thread: each chunk's intermediate rows are made, put through GELU, quantized
// and multiplied while in cache (on ALBERT-base at batch 32 the three passes over that 50 MB tensor were a fifth of
// the serving time).
// With `norm`, three more inputs (gamma, beta [H], eps [1]) make y = LayerNorm(x + that), a post-LN block's end.
int FeedForward(bool norm, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (ndims[0] != 2 || ndims[1] != 2) return 1;
  const int64_t m = shapes[0][0], hidden = shapes[0][1], inner = shapes[1][0];
  const int out = norm ? 12 : 9;
  Int8Weights w1, w2;
  if (!Matrix2D(ndims, shapes, dtypes, 0, "float32", m, hidden) ||
      !ReadInt8Weights(params, ndims, shapes, dtypes, 1, 2, 3, inner, hidden, &w1) ||
      !Vectors(ndims, shapes, dtypes, 4, 1, inner) ||
      !ReadInt8Weights(params, ndims, shapes, dtypes, 5, 6, 7, hidden, inner, &w2) ||
      !Vectors(ndims, shapes, dtypes, 8, 1, hidden) ||
      (norm && (!Vectors(ndims, shapes, dtypes, 9, 2, hidden) || !Vectors(ndims, shapes, dtypes, 11, 1, 1))) ||
      !Matrix2D(ndims, shapes, dtypes, out, "float32", m, hidden)) {
    return 1;
  }
  const float *input = static_cast<const float *>(params[0]);
  const float *b1 = static_cast<const float *>(params[4]), *b2 = static_cast<const float *>(params[8]);
  float *y = static_cast<float *>(params[out]);
  const QuantizedRows x = QuantizeRows(input, m, hidden);
  return ForRowChunks(m, [&](int64_t r0, int64_t rows) {
    thread_local std::vector<int32_t> first;
    thread_local std::vector<float> activations, scales;
    thread_local std::vector<int8_t> quantized;
    int32_t *sums = albert::dnnl::Aligned(&first, kChunkRows * inner);
    float *row = albert::dnnl::Aligned(&activations, inner);
    int8_t *h8 = albert::dnnl::Aligned(&quantized, kChunkRows * inner);
    scales.resize(kChunkRows);
    const QuantizedRows chunk{x.values + r0 * hidden, x.scales + r0};
    if (!Int8Sums(Block{0, rows, 0, inner}, 0, rows, hidden, chunk, w1, inner, sums)) return 3;
    {
      // Each row of the first product's sums made float32 (both scales, the bias), put through GELU and quantized
      // while it is in L1: no float32 [rows, I] block written and read again.
      ALBERT_PROFILE("thread: feed-forward sums, gelu and int8");
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t *from = sums + r * inner;
        const float row_scale = chunk.scales[r];
        for (int64_t c = 0; c < inner; ++c) {
          row[c] = albert::Gelu(static_cast<float>(from[c]) * (row_scale * w1.scales[c]) + b1[c]);
        }
        scales[r] = QuantizeRow(row, inner, h8 + r * inner);
      }
    }
    const int status = Int8Block(Block{0, rows, 0, hidden}, hidden, inner, QuantizedRows{h8, scales.data()}, w2, b2,
                                 y + r0 * hidden);
    if (status == 0 && norm) {
      ResidualNormRows(y + r0 * hidden, input + r0 * hidden, static_cast<const float *>(params[9]),
                       static_cast<const float *>(params[10]), *static_cast<const float *>(params[11]), rows, hidden);
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

// Checks the [B, S, H] operands (at the given positions) against each other and against the [B, N, S, S] one at
// `square`, or, where there is none (square -1), against `count` heads. Where there is a square the operands may
// also come as [B * S, H] (DenseThree's outputs as they are: MindSpore's CPU Reshape takes no bfloat16).
bool ReadHeads(const int *ndims, int64_t **shapes, int square, std::initializer_list<int> rows, Heads *heads,
               int64_t count = 0) {
  const int first = *rows.begin();
  const int64_t *s = square >= 0 ? shapes[square] : nullptr;
  const bool flat = s && ndims[first] == 2;
  if ((ndims[first] != 3 && !flat) || (s && (ndims[square] != 4 || s[3] != s[2]))) return false;
  *heads = flat ? Heads{s[0], s[2], shapes[first][1], s[1], 0}
                : Heads{shapes[first][0], shapes[first][1], shapes[first][2], s ? s[1] : count, 0};
  if (s && (s[0] != heads->batch || s[2] != heads->seq)) return false;
  for (const int i : rows) {
    const bool same = flat ? ndims[i] == 2 && shapes[i][0] == heads->batch * heads->seq
                           : ndims[i] == 3 && shapes[i][0] == heads->batch && shapes[i][1] == heads->seq;
    if (!same || shapes[i][ndims[i] - 1] != heads->hidden) return false;
  }
  if (heads->count < 1 || heads->hidden % heads->count != 0) return false;
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

// The additive mask of the scores: [B, 1, 1, S] (one row per batch row) or [B, N, S, S] (one per pair and row).
struct Mask {
  const float *bias;
  bool full;

  const float *Row(const Heads &heads, int64_t pair, int64_t row) const {
    return full ? bias + heads.Square(pair) + row * heads.seq : bias + pair / heads.count * heads.seq;
  }
};

bool ReadMask(void **params, int *ndims, int64_t **shapes, int i, const Heads &heads, Mask *mask) {
  const int64_t size = albert::Size(i, ndims, shapes), seq = heads.seq;
  *mask = Mask{static_cast<const float *>(params[i]), size == heads.batch * heads.count * seq * seq};
  return mask->full || size == heads.batch * seq;
}

// A pair's probabilities into square [S, S]: softmax(scale q_bn k_bn^T + mask), the product and the softmax back to
// back.
int PairProbs(const Heads &heads, int64_t pair, const float *q, const float *k, const Mask &mask, float scale,
              float *square) {
  const int64_t seq = heads.seq, columns = heads.Columns(pair);
  const int status = HeadProduct('N', 'T', seq, seq, heads.size, scale, q + columns, heads.hidden, k + columns,
                                 heads.hidden, square, seq);
  ALBERT_PROFILE("thread: attention softmax");
  for (int64_t row = 0; row < seq; ++row) {
    albert::SoftmaxRow(square + row * seq, mask.Row(heads, pair, row), square + row * seq, seq);
  }
  return status;
}

// A pair's query and key gradients from its probabilities and their gradient dprobs [S, S]: ds = probs (dprobs -
// rowsum(probs dprobs)) into ds (which may be dprobs), dq = scale ds k, dk = scale ds^T q.
int PairProbsGrad(const Heads &heads, int64_t pair, const float *probs, const float *dprobs, const float *q,
                  const float *k, float scale, float *ds, float *dq, float *dk) {
  const int64_t seq = heads.seq, columns = heads.Columns(pair), ld = heads.hidden;
  {
    ALBERT_PROFILE("thread: attention softmax grad");
    for (int64_t row = 0; row < seq; ++row) {
      albert::SoftmaxGradRow(probs + row * seq, dprobs + row * seq, ds + row * seq, seq);
    }
  }
  const int status = HeadProduct('N', 'N', seq, heads.size, seq, scale, ds, seq, k + columns, ld, dq + columns, ld);
  return status != 0 ? status : HeadProduct('T', 'N', seq, heads.size, seq, scale, ds, seq, q + columns, ld,
                                            dk + columns, ld);
}

// (q, k [B, S, H], bias [B, 1, 1, S] or [B, N, S, S], scale [1]) -> probs [B, N, S, S]:
// softmax(scale q_bn k_bn^T + bias) along the last axis, per pair (for dropout on the probabilities in between;
// without it, Attention below does the whole of attention).
int AttentionProbs(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  Heads heads;
  Mask mask;
  if (!albert::AllFloat32(5, dtypes) || !ReadHeads(ndims, shapes, 4, {0, 1}, &heads) ||
      !ReadMask(params, ndims, shapes, 2, heads, &mask)) {
    return 1;
  }
  const float *q = static_cast<const float *>(params[0]);
  const float *k = static_cast<const float *>(params[1]);
  const float scale = *static_cast<const float *>(params[3]);
  float *probs = static_cast<float *>(params[4]);
  return ForEachPair(heads, 0, [&](int64_t pair, float *) {
    return PairProbs(heads, pair, q, k, mask, scale, probs + heads.Square(pair));
  });
}

// (probs, dprobs [B, N, S, S], q, k [B, S, H], scale [1]) -> (dq, dk [B, S, H]), the backward of AttentionProbs,
// ds in the thread's scratch.
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
  return ForEachPair(heads, heads.seq * heads.seq, [&](int64_t pair, float *ds) {
    const int64_t square = heads.Square(pair);
    return PairProbsGrad(heads, pair, probs + square, dprobs + square, q, k, scale, ds, dq, dk);
  });
}

// The whole of attention per pair while its S x S block is in cache: (q, k, v [B, S, H], bias, scale [1]) ->
// context [B, S, H] = softmax(scale q_bn k_bn^T + bias) v_bn per head. With `keep_probs` the probabilities
// [B, N, S, S] are a second output, for the backward; otherwise (inference) a sixth input, heads [1] int32, gives N
// and each pair's probabilities live in the thread's scratch.
int Attention(bool keep_probs, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  Heads heads;
  Mask mask;
  const bool typed = keep_probs ? albert::AllFloat32(7, dtypes)
                                : albert::AllFloat32(5, dtypes) && std::strcmp(dtypes[5], "int32") == 0 &&
                                      std::strcmp(dtypes[6], "float32") == 0 && albert::Size(5, ndims, shapes) == 1;
  const int64_t count = keep_probs ? 0 : *static_cast<const int32_t *>(params[5]);
  if (!typed || !ReadHeads(ndims, shapes, keep_probs ? 6 : -1, {0, 1, 2, 5 + !keep_probs}, &heads, count) ||
      !ReadMask(params, ndims, shapes, 3, heads, &mask)) {
    return 1;
  }
  const float *q = static_cast<const float *>(params[0]);
  const float *k = static_cast<const float *>(params[1]);
  const float *v = static_cast<const float *>(params[2]);
  const float scale = *static_cast<const float *>(params[4]);
  float *context = static_cast<float *>(params[5 + !keep_probs]);
  float *probs = keep_probs ? static_cast<float *>(params[6]) : nullptr;
  const int64_t seq = heads.seq, ld = heads.hidden;
  return ForEachPair(heads, keep_probs ? 0 : seq * seq, [&](int64_t pair, float *scratch) {
    const int64_t columns = heads.Columns(pair);
    float *square = keep_probs ? probs + heads.Square(pair) : scratch;
    const int status = PairProbs(heads, pair, q, k, mask, scale, square);
    return status != 0 ? status : HeadProduct('N', 'N', seq, heads.size, seq, 1.0f, square, seq, v + columns, ld,
                                              context + columns, ld);
  });
}

// Heads per batched attention call: the most (a divisor of the head count) whose float32 scores fit in
// kGroupScoresBytes, so that the softmax (and its gradient) reads them from the core's L2 cache rather than memory:
// all 12 heads at seq 128, one at a time at seq 512 (a batch row's 12 heads' scores there are 12.6 MB).
const int64_t kGroupScoresBytes = 1 << 20;

int64_t HeadGroup(int64_t heads, int64_t seq) {
  for (int64_t group = heads; group > 1; --group) {
    if (heads % group == 0 && group * seq * seq * static_cast<int64_t>(sizeof(float)) <= kGroupScoresBytes) {
      return group;
    }
  }
  return 1;
}

// Runs the float32 kernel `fn` on a call whose tensors may come in bfloat16 (DenseThree's bfloat16 outputs, where
// bfloat16 attention was to read them): those inputs widened into float32 copies, those outputs (from
// `first_output` on) computed in float32 and rounded back. The float32 fallbacks of AttentionBf16 and
// AttentionGradBf16.
template <typename Fn>
int AsFloat32(void **params, int *ndims, int64_t **shapes, const char **dtypes, int tensors, int first_output, Fn fn) {
  std::vector<void *> p(params, params + tensors);
  std::vector<const char *> t(dtypes, dtypes + tensors);
  std::vector<std::vector<float>> copies(tensors);
  for (int i = 0; i < tensors; ++i) {
    if (!IsBf16(dtypes[i])) continue;
    copies[i].resize(albert::Size(i, ndims, shapes));
    if (i < first_output) FromBf16(static_cast<const uint16_t *>(params[i]), copies[i].data(), copies[i].size());
    p[i] = copies[i].data();
    t[i] = "float32";
  }
  const int status = fn(p.data(), t.data());
  for (int i = first_output; i < tensors && status == 0; ++i) {
    if (IsBf16(dtypes[i])) ToBf16(copies[i].data(), static_cast<uint16_t *>(params[i]), copies[i].size());
  }
  return status;
}

// Whether tensors first .. first+count-1 are all bfloat16.
bool AllBf16(const char **dtypes, int first, int count) {
  for (int i = first; i < first + count; ++i) {
    if (!IsBf16(dtypes[i])) return false;
  }
  return true;
}

// The dtypes training's attention takes (q, k, v, bias, scale -> context, probs): q, k and v all float32 or all
// bfloat16, the probabilities float32 or bfloat16, the rest float32.
bool AttentionTypes(const char **dtypes) {
  return (AllBf16(dtypes, 0, 3) || albert::AllFloat32(3, dtypes)) && albert::AllFloat32(3, dtypes + 3) &&
         Float(dtypes, 6, true);
}

// Attention (keep_probs) in float32 on the dtypes AttentionBf16 takes (AttentionTypes).
int AttentionFloat32(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (!AttentionTypes(dtypes)) return 1;
  return AsFloat32(params, ndims, shapes, dtypes, 7, 5, [&](void **p, const char **t) {
    return Attention(true, p, ndims, shapes, t);
  });
}

// Attention with its products in bfloat16, a group of a batch row's heads (HeadGroup) per matmul primitive call:
// the same inputs and outputs as Attention(keep_probs, ...). Serving in int8 runs it (inference), and so does
// training in bfloat16 (SetBf16(1): keep_probs, the probabilities written for the backward, AttentionGradBf16, in
// float32 or, as the network keeps them, in bfloat16). q (times the scale), k and v are rounded to bfloat16 once, or,
// in training, come in bfloat16
// (DenseThree's outputs; the scale then goes on the float32 scores); per group of G heads of a batch row, scores
// [G, S, S] = q_n k_n^T in one batched call (the heads read in place in [S, H]), softmax with the mask in float32
// while they are in cache, the probabilities rounded to bfloat16, context_n = p_n v_n in one more call written in
// place into [S, H]. Per-pair float32 sgemm ran these 128 x 128 x 64 products at about 100 GFLOP/s on a Xeon with
// AMX. Where oneDNN has no such primitive, the float32 path runs instead.
int AttentionBf16(bool keep_probs, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  Heads heads;
  Mask mask;
  const bool given = keep_probs && AllBf16(dtypes, 0, 3);  // q, k, v in bfloat16
  const bool kept16 = keep_probs && IsBf16(dtypes[6]);      // the probabilities kept in bfloat16
  const bool typed = keep_probs ? AttentionTypes(dtypes)
                                : albert::AllFloat32(5, dtypes) && std::strcmp(dtypes[5], "int32") == 0 &&
                                      std::strcmp(dtypes[6], "float32") == 0 && albert::Size(5, ndims, shapes) == 1;
  const int64_t count = typed && !keep_probs ? *static_cast<const int32_t *>(params[5]) : 0;
  if (!typed || !ReadHeads(ndims, shapes, keep_probs ? 6 : -1, {0, 1, 2, 5 + !keep_probs}, &heads, count) ||
      !ReadMask(params, ndims, shapes, 3, heads, &mask)) {
    return 1;
  }
  const int64_t batch = heads.batch, seq = heads.seq, hidden = heads.hidden, n = heads.count, d = heads.size;
  const int64_t size = batch * seq * hidden;
  const float scale = *static_cast<const float *>(params[4]);
  const uint16_t *q16 = static_cast<const uint16_t *>(params[0]), *k16 = static_cast<const uint16_t *>(params[1]);
  const uint16_t *v16 = static_cast<const uint16_t *>(params[2]);
  if (!given) {
    const float *q = static_cast<const float *>(params[0]);
    uint16_t *q_rounded = Buffer(0, size), *k_rounded = Buffer(1, size), *v_rounded = Buffer(2, size);
    albert::ParallelFor(size, kMinConvertPerThread, [&](int64_t, int64_t begin, int64_t end) {
      ALBERT_PROFILE("thread: attention operands to bf16");
      float scaled[256];
      for (int64_t i = begin; i < end; i += 256) {
        const int64_t chunk = std::min<int64_t>(256, end - i);
        for (int64_t j = 0; j < chunk; ++j) scaled[j] = q[i + j] * scale;
        ToBf16(scaled, q_rounded + i, chunk);
      }
      ToBf16(static_cast<const float *>(params[1]) + begin, k_rounded + begin, end - begin);
      ToBf16(static_cast<const float *>(params[2]) + begin, v_rounded + begin, end - begin);
    });
    q16 = q_rounded, k16 = k_rounded, v16 = v_rounded;
  }
  float *context = static_cast<float *>(params[5 + !keep_probs]);
  float *kept = keep_probs && !kept16 ? static_cast<float *>(params[6]) : nullptr;
  uint16_t *kept_bf16 = kept16 ? static_cast<uint16_t *>(params[6]) : nullptr;
  const int64_t group = HeadGroup(n, seq), square = seq * seq;
  const albert::dnnl::Shape scores_shape{false, true, false, false, seq, seq, d, hidden, hidden, seq,
                                         albert::dnnl::kBf16, group, d, d, square};
  const albert::dnnl::Shape context_shape{false, false, false, false, seq, d, seq, seq, hidden, hidden,
                                          albert::dnnl::kBf16, group, square, d, d};
  std::vector<int> failed(albert::Threads(), 0);
  const int64_t parts = albert::ParallelFor(batch, 1, [&](int64_t part, int64_t begin, int64_t end) {
    thread_local std::vector<float> own_scores;
    thread_local std::vector<uint16_t> probs;
    float *own = kept ? nullptr : albert::dnnl::Aligned(&own_scores, group * square);
    uint16_t *own16 = kept_bf16 ? nullptr : albert::dnnl::Aligned(&probs, group * square);
    for (int64_t b = begin; b < end && !failed[part]; ++b) {
      for (int64_t h0 = 0; h0 < n && !failed[part]; h0 += group) {
        const int64_t row = b * seq * hidden + h0 * d;  // the group's first head in the row's [S, H]
        float *scores = kept ? kept + (b * n + h0) * square : own;
        uint16_t *probs16 = kept_bf16 ? kept_bf16 + (b * n + h0) * square : own16;
        {
          ALBERT_PROFILE("thread: attention primitives bf16");
          failed[part] = !albert::dnnl::Run(scores_shape, q16 + row, k16 + row, nullptr, scores);
        }
        if (failed[part]) break;
        {
          ALBERT_PROFILE("thread: attention softmax");
          for (int64_t h = 0; h < group; ++h) {
            for (int64_t r = 0; r < seq; ++r) {
              float *line = scores + (h * seq + r) * seq;
              for (int64_t c = 0; given && c < seq; ++c) line[c] *= scale;
              albert::SoftmaxRow(line, mask.Row(heads, b * n + h0 + h, r), line, seq);
              ToBf16(line, probs16 + (h * seq + r) * seq, seq);
            }
          }
        }
        ALBERT_PROFILE("thread: attention primitives bf16");
        failed[part] = !albert::dnnl::Run(context_shape, probs16, v16 + row, nullptr, context + row);
      }
    }
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (failed[p]) return keep_probs ? AttentionFloat32(params, ndims, shapes, dtypes)
                                     : Attention(false, params, ndims, shapes, dtypes);
  }
  return 0;
}

// Its backward, per pair in cache: (probs [B, N, S, S], dcontext, q, k, v [B, S, H], scale [1]) -> (dq, dk, dv
// [B, S, H]): dprobs = dcontext_bn v_bn^T (the thread's scratch), dv = probs^T dcontext, then dq and dk from the
// softmax's gradient as AttentionProbsGrad.
int AttentionGrad(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  Heads heads;
  if (!albert::AllFloat32(9, dtypes) || !ReadHeads(ndims, shapes, 0, {1, 2, 3, 4, 6, 7, 8}, &heads)) return 1;
  const float *probs = static_cast<const float *>(params[0]);
  const float *dcontext = static_cast<const float *>(params[1]);
  const float *q = static_cast<const float *>(params[2]);
  const float *k = static_cast<const float *>(params[3]);
  const float *v = static_cast<const float *>(params[4]);
  const float scale = *static_cast<const float *>(params[5]);
  float *dq = static_cast<float *>(params[6]);
  float *dk = static_cast<float *>(params[7]);
  float *dv = static_cast<float *>(params[8]);
  const int64_t seq = heads.seq, ld = heads.hidden;
  return ForEachPair(heads, seq * seq, [&](int64_t pair, float *dprobs) {
    const int64_t columns = heads.Columns(pair);
    const float *square = probs + heads.Square(pair);
    int status = HeadProduct('N', 'T', seq, seq, heads.size, 1.0f, dcontext + columns, ld, v + columns, ld, dprobs,
                             seq);
    if (status == 0) {
      status = HeadProduct('T', 'N', seq, heads.size, seq, 1.0f, square, seq, dcontext + columns, ld, dv + columns,
                           ld);
    }
    return status != 0 ? status : PairProbsGrad(heads, pair, square, dprobs, q, k, scale, dprobs, dq, dk);
  });
}

// The dtypes its backward takes (probs, dcontext, q, k, v, scale -> dq, dk, dv): q, k, v, dq, dk and dv all float32
// or all bfloat16, the probabilities float32 or bfloat16, the rest float32.
bool AttentionGradTypes(const char **dtypes) {
  return ((AllBf16(dtypes, 2, 3) && AllBf16(dtypes, 6, 3)) ||
          (albert::AllFloat32(3, dtypes + 2) && albert::AllFloat32(3, dtypes + 6))) &&
         Float(dtypes, 0, true) && albert::AllFloat32(1, dtypes + 1) && albert::AllFloat32(1, dtypes + 5);
}

// The backward in float32 on the dtypes AttentionGradBf16 takes (AttentionGradTypes).
int AttentionGradFloat32(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (!AttentionGradTypes(dtypes)) return 1;
  return AsFloat32(params, ndims, shapes, dtypes, 9, 6, [&](void **p, const char **t) {
    return AttentionGrad(p, ndims, shapes, t);
  });
}

// AttentionGrad with its products in bfloat16 (training under SetBf16(1), after AttentionBf16), each batch row's
// heads in four batched primitive calls: dprobs = dcontext v^T and dv = probs^T dcontext, then, in float32, ds =
// scale probs (dprobs - rowsum(probs dprobs)), rounded, and dq = ds k, dk = ds^T q. The row's dcontext is rounded by
// the thread that takes the row, and so are the probabilities unless kept in bfloat16 (the softmax's gradient then
// widens them a row at a time), and q, k and v unless they come in bfloat16 (DenseThree's outputs): then dq, dk and
// dv go out in bfloat16 too, rounded from the thread's float32 rows (the form DenseGrads reads them in). Where oneDNN
// has no such primitive, AttentionGrad runs instead.
int AttentionGradBf16(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  Heads heads;
  const bool given = AllBf16(dtypes, 2, 3) && AllBf16(dtypes, 6, 3);  // q, k, v and dq, dk, dv in bfloat16
  const bool kept16 = IsBf16(dtypes[0]);                               // the probabilities kept in bfloat16
  if (!AttentionGradTypes(dtypes) || !ReadHeads(ndims, shapes, 0, {1, 2, 3, 4, 6, 7, 8}, &heads)) return 1;
  const int64_t seq = heads.seq, hidden = heads.hidden, n = heads.count, d = heads.size;
  const float *probs = kept16 ? nullptr : static_cast<const float *>(params[0]);
  const uint16_t *probs16 = kept16 ? static_cast<const uint16_t *>(params[0]) : nullptr;
  const float scale = *static_cast<const float *>(params[5]);
  const int64_t group = HeadGroup(n, seq), square = seq * seq;
  // x_n y_n^T into [G, S, S]; x_n^T y_n and x_n y_n into the heads' columns of [S, H] (x [G, S, S]), for a group
  // of G heads (HeadGroup).
  const albert::dnnl::Shape outer{false, true, false, false, seq, seq, d, hidden, hidden, seq, albert::dnnl::kBf16,
                                  group, d, d, square};
  const albert::dnnl::Shape transposed{true, false, false, false, seq, d, seq, seq, hidden, hidden,
                                       albert::dnnl::kBf16, group, square, d, d};
  const albert::dnnl::Shape plain{false, false, false, false, seq, d, seq, seq, hidden, hidden, albert::dnnl::kBf16,
                                  group, square, d, d};
  std::vector<int> failed(albert::Threads(), 0);
  const int64_t parts = albert::ParallelFor(heads.batch, 1, [&](int64_t part, int64_t begin, int64_t end) {
    thread_local std::vector<uint16_t> rows16, square16;
    thread_local std::vector<float> dprobs, grads, line;
    uint16_t *dcontext16 = albert::dnnl::Aligned(&rows16, 4 * seq * hidden), *rounded = dcontext16 + seq * hidden;
    // The group's probabilities rounded (unless kept so), then ds rounded.
    uint16_t *ds16 = albert::dnnl::Aligned(&square16, group * square);
    float *ds_all = albert::dnnl::Aligned(&dprobs, group * square);
    float *widened = kept16 ? albert::dnnl::Aligned(&line, seq) : nullptr;  // a row of probabilities kept in bf16
    // The row's dq, dk, dv in float32 before rounding (bfloat16 outputs), else the outputs' rows themselves.
    float *own = given ? albert::dnnl::Aligned(&grads, 3 * seq * hidden) : nullptr;
    for (int64_t b = begin; b < end && !failed[part]; ++b) {
      const int64_t row = b * seq * hidden;
      const uint16_t *qkv16[3];  // the row's q, k, v in bfloat16
      float *out[3];             // where the products write the row's dq, dk, dv
      for (int i = 0; i < 3; ++i) {
        qkv16[i] = given ? static_cast<const uint16_t *>(params[2 + i]) + row : rounded + i * seq * hidden;
        out[i] = given ? own + i * seq * hidden : static_cast<float *>(params[6 + i]) + row;
      }
      {
        ALBERT_PROFILE("thread: attention operands to bf16");
        for (int i = 0; i < (given ? 1 : 4); ++i) {
          ToBf16(static_cast<const float *>(params[i + 1]) + row, dcontext16 + i * seq * hidden,
                 seq * hidden);
        }
      }
      for (int64_t h0 = 0; h0 < n && !failed[part]; h0 += group) {
        const int64_t at = h0 * d;  // the group's first column in [S, H]
        const float *p = kept16 ? nullptr : probs + (b * n + h0) * square;
        const uint16_t *p16 = kept16 ? probs16 + (b * n + h0) * square : ds16;
        if (!kept16) {
          ALBERT_PROFILE("thread: attention operands to bf16");
          ToBf16(p, ds16, group * square);
        }
        {
          ALBERT_PROFILE("thread: attention primitives bf16");
          failed[part] = !albert::dnnl::Run(outer, dcontext16 + at, qkv16[2] + at, nullptr, ds_all) ||
                         !albert::dnnl::Run(transposed, p16, dcontext16 + at, nullptr, out[2] + at);
        }
        if (failed[part]) break;
        {
          ALBERT_PROFILE("thread: attention softmax grad");
          for (int64_t r = 0; r < group * seq; ++r) {
            float *ds = ds_all + r * seq;
            if (kept16) FromBf16(p16 + r * seq, widened, seq);
            albert::SoftmaxGradRow(kept16 ? widened : p + r * seq, ds, ds, seq);
            for (int64_t c = 0; c < seq; ++c) ds[c] *= scale;
            ToBf16(ds, ds16 + r * seq, seq);
          }
        }
        ALBERT_PROFILE("thread: attention primitives bf16");
        failed[part] = !albert::dnnl::Run(plain, ds16, qkv16[1] + at, nullptr, out[0] + at) ||
                       !albert::dnnl::Run(transposed, ds16, qkv16[0] + at, nullptr, out[1] + at);
      }
      for (int i = 0; given && !failed[part] && i < 3; ++i) {
        ToBf16(out[i], static_cast<uint16_t *>(params[6 + i]) + row, seq * hidden);
      }
    }
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (failed[p]) return AttentionGradFloat32(params, ndims, shapes, dtypes);
  }
  return 0;
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

// The implementation oneDNN picks for a matmul primitive of `type` (albert::dnnl::kBf16 or kS8) on this CPU (its
// name says the ISA: e.g. brg_matmul:avx10_1_512_amx), "" when there is none or no primitive API.
std::string PrimitiveImplementation(int type) {
  const albert::dnnl::Api &api = albert::dnnl::GetApi();
  if (!api.missing.empty()) return "";
  albert::dnnl::Matmul probe;
  albert::dnnl::Shape shape{false, true, false, false, 256, 256, 256, 256, 256, 256, type};
  const std::string name = albert::dnnl::Create(api, shape, &probe) ? probe.implementation : "";
  albert::dnnl::Release(api, &probe);
  return name;
}

// True for an int8 implementation with exact int32 sums: AMX-INT8 or VNNI. Without them oneDNN's int8 kernels add
// pairs of u8 x s8 products in 16 bits (vpmaddubsw), which saturate for full-range operands (measured: wrong sums
// under ONEDNN_MAX_CPU_ISA=AVX2); oneDNN's documentation advises 7-bit weights there.
bool ExactInt8(const std::string &implementation) {
  return implementation.find("vnni") != std::string::npos || implementation.find("amx") != std::string::npos;
}

// True for a bfloat16 implementation on native bfloat16 dot products: AVX512-BF16, AVX10 or AMX. Below them (an ISA
// capped by ONEDNN_MAX_CPU_ISA) oneDNN emulates bfloat16, slower than float32.
bool NativeBf16(const std::string &implementation) {
  return implementation.find("avx512_core_bf16") != std::string::npos ||
         implementation.find("avx10") != std::string::npos || implementation.find("amx") != std::string::npos;
}

// How the products of `type` read weights that can be packed once (`done`: where and when they are, e.g. serving's
// int8 weights at load): packed, or as stored and why.
std::string Packing(int type, const std::string &done) {
  const std::string &why = albert::dnnl::GetApi().no_packing;
  if (!why.empty()) return ", weights as stored (" + why + ")";
  const int64_t probe = 256;
  return albert::dnnl::PackedSize(probe, probe, type) > 0 ? ", " + done : ", weights as stored (no packed layout)";
}

int CopyOut(const std::string &text, char *out, int size) {
  if (out && size > 0) {
    std::strncpy(out, text.c_str(), size - 1);
    out[size - 1] = '\0';
  }
  return static_cast<int>(text.size());
}
}  // namespace

extern "C" {
void SetThreads(int threads) { albert::Threads() = std::max(1, threads); }
void SetBf16(int on) { Bf16() = on != 0; }
void SetProfile(int on) { albert::SetProfiling(on); }
// "oneDNN X.Y.Z (float32: ...; bfloat16: ...; int8: ...)": how each precision's dense products run here (the
// primitive implementations name the ISA), or why the primitives are not used; into out (at most size bytes,
// NUL-terminated). Returns the length needed.
int DnnlDescribe(char *out, int size) {
  const albert::dnnl::Api &api = albert::dnnl::GetApi();
  std::string text;
  if (api.version) {
    const albert::dnnl::Version *v = api.version();
    text = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  } else {
    text = "oneDNN (version unknown)";
  }
  text += " (float32: dnnl_sgemm; bfloat16: ";
  if (!api.missing.empty()) {
    text += "dnnl_gemm_bf16bf16f32 (no matmul primitives: " + api.missing + "); int8: none)";
    return CopyOut(text, out, size);
  }
  const std::string bf16 = PrimitiveImplementation(albert::dnnl::kBf16);
  const std::string int8 = PrimitiveImplementation(albert::dnnl::kS8);
  text += bf16.empty()         ? "dnnl_gemm_bf16bf16f32 (oneDNN has no bfloat16 matmul primitive)"
          : NativeBf16(bf16) ? "matmul primitive " + bf16
                             : "matmul primitive " + bf16 + " (emulated: no native bfloat16 dot products)";
  if (!bf16.empty() && AmxBf16()) text += ", dnnl_gemm_bf16bf16f32 for long sums";
  if (!bf16.empty() && AmdBf16()) text += ", dnnl_gemm_bf16bf16f32 for large weight gradients";
  if (!bf16.empty()) text += Packing(albert::dnnl::kBf16, "shared weights packed once per step, served ones at load");
  if (!bf16.empty() && BatchedBf16AttentionInTraining()) {
    text += AmxBf16() ? ", batched attention: training and int8 serving" : ", batched attention: training";
  }
  if (!VendorChosen().empty()) text += ", rules for ALBERT_KERNELS_VENDOR=" + VendorChosen();
  text += "; int8: " + (int8.empty()      ? std::string("none (oneDNN has no int8 matmul primitive)")
                       : ExactInt8(int8)
                           ? "matmul primitive " + int8 + Packing(albert::dnnl::kS8, "weights packed at load")
                                         : "none (oneDNN's int8 matmul here, " + int8 + ", has neither VNNI nor AMX: "
                                           "its 16-bit sums saturate)");
  return CopyOut(text + ")", out, size);
}
// The int8 matmul primitive's implementation (see PrimitiveImplementation) into out; "" when there is none with
// exact sums (ExactInt8).
int Int8Implementation(char *out, int size) {
  const std::string int8 = PrimitiveImplementation(albert::dnnl::kS8);
  return CopyOut(ExactInt8(int8) ? int8 : "", out, size);
}
// The bfloat16 matmul primitive's implementation into out; "" when there is none on native bfloat16 (NativeBf16).
// Without the primitive API (an older libdnnl) the products are the BLAS-style call's, which names no ISA: said so.
int Bf16Implementation(char *out, int size) {
  if (!albert::dnnl::GetApi().missing.empty()) return CopyOut("dnnl_gemm_bf16bf16f32", out, size);
  const std::string bf16 = PrimitiveImplementation(albert::dnnl::kBf16);
  return CopyOut(NativeBf16(bf16) ? bf16 : "", out, size);
}
// 1 where training in bfloat16 runs attention's products in bfloat16 (AttentionBf16): the query, key and value
// layers then hand them over in bfloat16 (cpu_kernels.bf16_attention).
int BatchedBf16Attention() { return BatchedBf16AttentionInTraining() ? 1 : 0; }
// Primitives held by the cache (bounded by albert::dnnl::Cache::kCapacity).
int PrimitiveCacheSize() { return static_cast<int>(albert::dnnl::Cache::Get().Size()); }
// Packed weights held on a cache line by AlignedPacked (at most 256).
int PackedCopies() { return static_cast<int>(AlignedPacked().Size()); }
int ProfileReport(char *out, int size) { return albert::ProfileReport(out, size); }
int MatMulNT(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulNT");
  return Gemm(false, true, Layout{0, 1, -1, 2, -1}, p, d, s, t);
}
// x [m, k], w [n, k], bias [n] -> x w^T + bias: nn.Dense in one call.
int MatMulNTBias(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulNTBias");
  return Gemm(false, true, Layout{0, 1, 2, 3, -1}, p, d, s, t);
}
// x [m, k], w [n, k] float32, w' [n, k] bfloat16 (w rounded), bias [n] -> x w'^T + bias: nn.Dense in one call with
// the weights' bfloat16 copy the graph made once per step (w is there for its gradient only).
int MatMulNTBiasCopy(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulNTBiasCopy");
  return Gemm(false, true, Layout{0, 2, 3, 4, 1}, p, d, s, t);
}
// The same without a bias: (x, w, w') -> x w'^T.
int MatMulNTCopy(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulNTCopy");
  return Gemm(false, true, Layout{0, 2, -1, 3, 1}, p, d, s, t);
}
// (dy, x, w) -> (dx, dw, db): a dense layer's gradients (x w^T + b), w float32 or its bfloat16 copy.
int DenseGrad(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseGrad");
  return DenseGrads(1, true, p, d, s, t);
}
// (dy, x, w) -> (dx, dw): the same without a bias.
int DenseGradNoBias(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseGradNoBias");
  return DenseGrads(1, false, p, d, s, t);
}
// (dq, dk, dv, x, wq, wk, wv) -> (dx, dwq, dwk, dwv, dbq, dbk, dbv): the query, key and value layers' gradients.
int DenseQKVGrad(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseQKVGrad");
  return DenseGrads(3, true, p, d, s, t);
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
  return DenseThree(false, p, d, s, t);
}
int DenseQKVCopy(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseQKVCopy");
  return DenseThree(true, p, d, s, t);
}
// (x, w1, b1, w2, b2) -> (y, pre, h): a block's feed-forward network, keeping what its backward needs
// (DenseGeluDense).
int DenseGeluDenseFloat(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseGeluDense");
  return DenseGeluDense(false, false, p, d, s, t);
}
// (x, w1, w1', b1, w2, w2', b2) -> (y, pre, h): the same reading the weights' bfloat16 copies, h in bfloat16.
int DenseGeluDenseCopy(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseGeluDenseCopy");
  return DenseGeluDense(true, false, p, d, s, t);
}
// (dy, x, pre, h, w1, w2) -> (dx, dw1, db1, dw2, db2): their gradients.
int DenseGeluDenseGrad(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseGeluDenseGrad");
  return DenseGeluDenseGradients(false, p, d, s, t);
}
// The same three with y = x + the network's output (DenseGeluDense's `residual`).
int DenseGeluDenseResidualFloat(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseGeluDenseResidual");
  return DenseGeluDense(false, true, p, d, s, t);
}
int DenseGeluDenseResidualCopy(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseGeluDenseResidualCopy");
  return DenseGeluDense(true, true, p, d, s, t);
}
int DenseGeluDenseResidualGrad(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseGeluDenseResidualGrad");
  return DenseGeluDenseGradients(true, p, d, s, t);
}
// Bytes of the tensor PackInt8Weights fills for int8 weights [n, k] (see PackedHeader): the header alone where they
// cannot be packed here.
int64_t PackedInt8Bytes(int64_t n, int64_t k) {
  return static_cast<int64_t>(sizeof(PackedHeader) + albert::dnnl::PackedSize(n, k, albert::dnnl::kS8));
}
// Fills out (PackedInt8Bytes(n, k) bytes) from int8 weights w [n, k]: the header and the packed weights, 1 returned;
// or, where they cannot be packed, a header of zeros, 0 returned.
int PackInt8Weights(const int8_t *w, int64_t n, int64_t k, int8_t *out) {
  const size_t bytes = albert::dnnl::PackedSize(n, k, albert::dnnl::kS8);
  PackedHeader header{};
  if (bytes > 0 && albert::dnnl::Pack(w, n, k, true, albert::dnnl::kS8, out + sizeof(PackedHeader))) {
    std::memcpy(header.magic, kPackedMagic, sizeof(kPackedMagic));
    header.process = ProcessToken();
    header.serial = NextPackingSerial();
    header.n = n;
    header.k = k;
    header.bytes = static_cast<int64_t>(bytes);
  }
  std::memcpy(out, &header, sizeof(header));
  return header.bytes > 0 ? 1 : 0;
}
// Serving's int8 dense layers (see DenseInt8): (x, w int8, p (w packed), scales) -> x w^T; (x, w, p, scales, b) ->
// x w^T + b; (x, wq, wk, wv, pq, pk, pv, sq, sk, sv, bq, bk, bv) -> (q, k, v).
int MatMulInt8(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulInt8");
  return DenseInt8(1, false, p, d, s, t);
}
int MatMulInt8Bias(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("MatMulInt8Bias");
  return DenseInt8(1, true, p, d, s, t);
}
int DenseQKVInt8(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseQKVInt8");
  return DenseInt8(3, true, p, d, s, t);
}
// (x, w1, p1, s1, b1, w2, p2, s2, b2) -> gelu(x w1^T + b1) w2^T + b2: a block's feed-forward network in int8
// (FeedForward).
int FeedForwardInt8(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("FeedForwardInt8");
  return FeedForward(false, p, d, s, t);
}
// (x, w1, p1, s1, b1, w2, p2, s2, b2, gamma, beta, eps) -> LayerNorm(x + gelu(x w1^T + b1) w2^T + b2).
int FeedForwardNormInt8(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("FeedForwardNormInt8");
  return FeedForward(true, p, d, s, t);
}
// (x, w, p, s, b, residual, gamma, beta, eps) -> LayerNorm(residual + x w^T + b) (DenseResidualNorm).
int DenseResidualNormInt8(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("DenseResidualNormInt8");
  return DenseResidualNorm(p, d, s, t);
}
// x float32 (any shape) -> x rounded to bfloat16: a dense layer's weights, once per step (cpu_kernels.bf16_copy).
int RoundToBf16(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("RoundToBf16");
  if (std::strcmp(t[0], "float32") != 0 || !IsBf16(t[1])) return 2;
  const float *from = static_cast<const float *>(p[0]);
  uint16_t *to = static_cast<uint16_t *>(p[1]);
  albert::ParallelFor(albert::Size(0, d, s), kMinConvertPerThread, [&](int64_t, int64_t begin, int64_t end) {
    ToBf16(from + begin, to + begin, end - begin);
  });
  return 0;
}
// Bytes of the tensor PackBf16Weights fills for weights [n, k] (see Bf16PackHeader).
int64_t Bf16PackBytes(int64_t n, int64_t k) {
  return Bf16PackTensorBytes(n, k, ForwardPackBytes(n, k), InputGradPackBytes(n, k));
}
// w float32 [n, k] -> int8 [Bf16PackBytes(n, k)]: w rounded to bfloat16 and packed both ways, once per step
// (cpu_kernels.bf16_packed; Bf16PackHeader).
int PackBf16Weights(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("PackBf16Weights");
  if (std::strcmp(t[0], "float32") != 0 || d[0] != 2 || std::strcmp(t[1], "int8") != 0 || d[1] != 1) return 1;
  const int64_t n = s[0][0], k = s[0][1];
  const int64_t sizes[2] = {ForwardPackBytes(n, k), InputGradPackBytes(n, k)};
  if (s[1][0] != Bf16PackTensorBytes(n, k, sizes[0], sizes[1])) return 1;
  FillBf16Pack(static_cast<const float *>(p[0]), n, k, sizes, 0, static_cast<char *>(p[1]));
  return 0;
}
// Bytes of the tensor PackBf16ServingWeights fills for weights [n, k].
int64_t Bf16ServingPackBytes(int64_t n, int64_t k) { return Bf16PackTensorBytes(n, k, ForwardPackBytes(n, k), 0); }
// Fills out (Bf16ServingPackBytes(n, k) bytes) from float32 weights w [n, k]: serving's bfloat16 weights rounded
// and packed for the forward once, at load (cpu_kernels.pack_bf16; Bf16PackHeader), with a serial number.
void PackBf16ServingWeights(const float *w, int64_t n, int64_t k, int8_t *out) {
  const int64_t sizes[2] = {ForwardPackBytes(n, k), 0};
  FillBf16Pack(w, n, k, sizes, NextPackingSerial(), reinterpret_cast<char *>(out));
}
// Under SetBf16(1) (training in bfloat16) attention's products run in bfloat16 too (AttentionBf16) where that
// measured faster (BatchedBf16AttentionInTraining).
int FusedAttention(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("FusedAttention");
  return Bf16() && BatchedBf16AttentionInTraining() ? AttentionBf16(true, p, d, s, t) : AttentionFloat32(p, d, s, t);
}
int FusedAttentionInference(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("FusedAttentionInference");
  return Attention(false, p, d, s, t);
}
// FusedAttentionInference's inputs and output, its products in bfloat16 (AttentionBf16) on AMX: int8 serving's
// attention.
int FusedAttentionInferenceBf16(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("FusedAttentionInferenceBf16");
  return AmxBf16() ? AttentionBf16(false, p, d, s, t) : Attention(false, p, d, s, t);
}
int FusedAttentionGrad(int, void **p, int *d, int64_t **s, const char **t, void *, void *) {
  ALBERT_PROFILE("FusedAttentionGrad");
  if (Bf16() && BatchedBf16AttentionInTraining()) return AttentionGradBf16(p, d, s, t);
  return AttentionGradFloat32(p, d, s, t);
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
