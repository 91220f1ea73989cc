// oneDNN matmul primitives from the libdnnl inside the MindSpore wheel, for the dense layers' products: bfloat16
// operands with float32 results, or int8 operands with int32 results (serving's --precision int8).
//
// Why: on bfloat16 operands (the dense layers' weights converted once per step by the graph, activations once per
// call by the kernels) a matmul primitive packs them for the matrix unit itself (AMX on Intel, AVX512-BF16 elsewhere:
// oneDNN picks). Measured on a Xeon with AMX, one thread, 512-row slices of ALBERT-base's dense layers: 1.2-1.4x the
// rate of a primitive reading the float32 tensors in bfloat16 math (fpmath mode bf16, which converts both operands
// on every call and keeps small shapes in float32), and mostly faster than dnnl_gemm_bf16bf16f32 (dnnl_matmul.cc
// keeps that call where it measured faster: kBf16BlasFromTerms, kAmdBlasGradOutputs).
//
// The library ships no headers: the few C API entry points used are declared here (oneDNN 3.x C API, stable across
// 3.x) and looked up in the loaded library at run time, so that a libdnnl without them leaves the BLAS-style path
// in place, with the reason in the status line (DnnlDescribe). Primitives are created once per shape (a bounded
// cache keyed by everything they depend on) and run single-threaded on each thread's slice, as the BLAS-style calls
// do. Weights the products read many times (serving's int8 and bfloat16 weights, training's shared bfloat16 weights)
// can be packed once into the layout a primitive picks (Pack).
#ifndef ALBERT_KERNELS_DNNL_PRIMITIVES_H_
#define ALBERT_KERNELS_DNNL_PRIMITIVES_H_

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

extern "C" int dnnl_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

namespace albert {
namespace dnnl {

// The oneDNN 3.x C API types used here: handles are opaque pointers, enums ints, dims int64_t[12].
typedef void *Handle;
typedef int64_t Dims[12];
struct ExecArg {
  int arg;
  Handle memory;
};
struct Version {
  int major, minor, patch;
  const char *hash;
  unsigned cpu_runtime, gpu_runtime;
};

const int kCpuEngine = 1;           // dnnl_cpu
const int kBf16 = 2;                // dnnl_bf16
const int kF32 = 3;                 // dnnl_f32
const int kS32 = 4;                 // dnnl_s32
const int kS8 = 5;                  // dnnl_s8
const int kQueryImplInfo = 8;       // dnnl_query_impl_info_str
const int kQueryWeightsMd = 131;    // dnnl_query_weights_md
const int kQueryScratchpadMd = 136; // dnnl_query_scratchpad_md
const int kFormatAny = 1;           // dnnl_format_tag_any
const int kScratchpadUser = 1;      // dnnl_scratchpad_mode_user
const unsigned kInOrderStream = 1;  // dnnl_stream_in_order
const int kArgSrc = 1, kArgDst = 17, kArgWeights = 33, kArgBias = 41, kArgScratchpad = 80;
const int kArgFrom = 1, kArgTo = 17;  // a reorder's

// Entry points, looked up by name in the loaded libdnnl.
struct Api {
  int (*engine_create)(Handle *, int, size_t);
  int (*stream_create)(Handle *, Handle, unsigned);
  int (*memory_desc_create_with_strides)(Handle *, int, const int64_t *, int, const int64_t *);
  int (*memory_desc_destroy)(Handle);
  int (*attr_create)(Handle *);
  int (*attr_destroy)(Handle);
  int (*attr_set_post_ops)(Handle, Handle);
  int (*attr_set_scratchpad_mode)(Handle, int);
  int (*post_ops_create)(Handle *);
  int (*post_ops_destroy)(Handle);
  int (*post_ops_append_sum)(Handle, float, int32_t, int);
  int (*matmul_pd_create)(Handle *, Handle, Handle, Handle, Handle, Handle, Handle);
  int (*pd_query)(Handle, int, int, void *);
  Handle (*pd_query_md)(Handle, int, int);
  size_t (*memory_desc_get_size)(Handle);
  int (*pd_destroy)(Handle);
  int (*primitive_create)(Handle *, Handle);
  int (*primitive_destroy)(Handle);
  int (*primitive_execute)(Handle, Handle, int, const ExecArg *);
  int (*memory_create)(Handle *, Handle, Handle, void *);
  int (*memory_destroy)(Handle);
  int (*stream_wait)(Handle);
  const Version *(*version)();
  // For weights packed once (Pack): without them the products read the weights as stored.
  int (*memory_desc_create_with_tag)(Handle *, int, const int64_t *, int, int);
  int (*memory_desc_clone)(Handle *, Handle);
  int (*memory_desc_equal)(Handle, Handle);
  int (*reorder_pd_create)(Handle *, Handle, Handle, Handle, Handle, Handle);

  Handle engine = nullptr;
  std::string missing;  // why the primitives cannot be used ("" when they can)
  std::string no_packing;  // why weights cannot be packed once ("" when they can)
};

template <typename F>
bool Find(void *library, const char *name, F *slot, std::string *missing) {
  *slot = reinterpret_cast<F>(dlsym(library, name));
  if (*slot == nullptr && missing->empty()) *missing = std::string("libdnnl has no ") + name;
  return *slot != nullptr;
}

// The API of the libdnnl this library links against (found through dnnl_sgemm's address), loaded once.
inline const Api &GetApi() {
  static Api api = [] {
    Api found{};
    Dl_info info;
    void *library = nullptr;
    if (dladdr(reinterpret_cast<void *>(&dnnl_sgemm), &info) == 0 || info.dli_fname == nullptr ||
        (library = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) == nullptr) {
      found.missing = found.no_packing = "cannot locate the loaded libdnnl";
      return found;
    }
    std::string &m = found.missing;
    Find(library, "dnnl_engine_create", &found.engine_create, &m);
    Find(library, "dnnl_stream_create", &found.stream_create, &m);
    Find(library, "dnnl_memory_desc_create_with_strides", &found.memory_desc_create_with_strides, &m);
    Find(library, "dnnl_memory_desc_destroy", &found.memory_desc_destroy, &m);
    Find(library, "dnnl_primitive_attr_create", &found.attr_create, &m);
    Find(library, "dnnl_primitive_attr_destroy", &found.attr_destroy, &m);
    Find(library, "dnnl_primitive_attr_set_post_ops", &found.attr_set_post_ops, &m);
    Find(library, "dnnl_primitive_attr_set_scratchpad_mode", &found.attr_set_scratchpad_mode, &m);
    Find(library, "dnnl_post_ops_create", &found.post_ops_create, &m);
    Find(library, "dnnl_post_ops_destroy", &found.post_ops_destroy, &m);
    Find(library, "dnnl_post_ops_append_sum", &found.post_ops_append_sum, &m);
    Find(library, "dnnl_matmul_primitive_desc_create", &found.matmul_pd_create, &m);
    Find(library, "dnnl_primitive_desc_query", &found.pd_query, &m);
    Find(library, "dnnl_primitive_desc_query_md", &found.pd_query_md, &m);
    Find(library, "dnnl_memory_desc_get_size", &found.memory_desc_get_size, &m);
    Find(library, "dnnl_primitive_desc_destroy", &found.pd_destroy, &m);
    Find(library, "dnnl_primitive_create", &found.primitive_create, &m);
    Find(library, "dnnl_primitive_destroy", &found.primitive_destroy, &m);
    Find(library, "dnnl_primitive_execute", &found.primitive_execute, &m);
    Find(library, "dnnl_memory_create", &found.memory_create, &m);
    Find(library, "dnnl_memory_destroy", &found.memory_destroy, &m);
    Find(library, "dnnl_stream_wait", &found.stream_wait, &m);
    Find(library, "dnnl_version", &found.version, &m);
    std::string &p = found.no_packing;
    Find(library, "dnnl_memory_desc_create_with_tag", &found.memory_desc_create_with_tag, &p);
    Find(library, "dnnl_memory_desc_clone", &found.memory_desc_clone, &p);
    Find(library, "dnnl_memory_desc_equal", &found.memory_desc_equal, &p);
    Find(library, "dnnl_reorder_primitive_desc_create", &found.reorder_pd_create, &p);
    if (p.empty() && !m.empty()) p = m;
    if (m.empty() && found.engine_create(&found.engine, kCpuEngine, 0) != 0) m = "dnnl_engine_create failed";
    return found;
  }();
  return api;
}

// One product's shape and layout: c[m, n] (leading dimension ldc) = op(a) op(b) (+ bias[n] float32) (+ c when
// accumulate), op(a) [m, k] read transposed when ta, op(b) [k, n] when tb. a and b are bfloat16 and c float32
// (type kBf16), or a and b int8 and c int32 (type kS8: exact integer sums).
// With batch > 1, `batch` such products at once (no bias), matrix i of a, b and c starting i * batch_a, i * batch_b
// and i * batch_c elements after the first (attention's heads, side by side in a row of [S, H]).
// With packed_b, b is weights packed once (Pack) for products of kPackedRows rows (tb and ldb unused); never with
// accumulate: on AMX, oneDNN 3.10.1's primitive on packed weights adds c wrongly (GemmBlock in dnnl_matmul.cc adds
// through a buffer instead).
struct Shape {
  bool ta, tb, bias, accumulate;
  int64_t m, n, k, lda, ldb, ldc;
  int type = kBf16;
  int64_t batch = 1, batch_a = 0, batch_b = 0, batch_c = 0;
  bool packed_b = false;

  std::tuple<bool, bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int64_t, int64_t,
             int64_t, int64_t, bool>
  Key() const {
    return std::make_tuple(ta, tb, bias, accumulate, m, n, k, lda, ldb, ldc, type, batch, batch_a, batch_b, batch_c,
                           packed_b);
  }
};

// Weights are packed (Pack) in the layout oneDNN picks for products of this many rows: the int8 kernels' chunk of
// rows (kChunkRows in dnnl_matmul.cc). Products of other row counts read them only where oneDNN picks the same
// layout for those (measured on AMX: every count from 7 rows up for ALBERT-base's layers).
const int64_t kPackedRows = 128;

// The first 64-byte boundary of a thread's buffer, grown to hold `count` elements from there: a product's operands
// and oneDNN's scratchpad (where the primitive packs the weights on each call) start on a cache line, not on the
// 16-byte boundary std::vector gives, where tile rows straddle two lines. Measured on a Xeon with AMX (2 threads,
// 2026-11-28; benchmarks/results): the bfloat16 primitives' CPU time per train step at batch 4, seq 512 went from
// 1655-1659 to 1501-1554 ms; weights packed for the primitive took 762.5 ms per step of products 16 bytes past a
// line, 388.6 on one (benchmarks/bench_products.py, two runs).
template <typename T>
T *Aligned(std::vector<T> *buffer, size_t count) {
  const size_t slack = 64 / sizeof(T);
  if (buffer->size() < count + slack) buffer->resize(count + slack);
  const uintptr_t address = reinterpret_cast<uintptr_t>(buffer->data());
  return reinterpret_cast<T *>((address + 63) & ~static_cast<uintptr_t>(63));
}

// A created primitive with the descriptors its memory objects need. Its scratch memory is the caller's (a buffer
// of each thread's): oneDNN's own would be shared by threads running the same primitive at once (measured: wrong
// results with two threads).
struct Matmul {
  Handle primitive = nullptr, description = nullptr;
  Handle a = nullptr, b = nullptr, bias = nullptr, c = nullptr;  // memory descriptors
  Handle scratchpad = nullptr;                                     // owned by `description`
  size_t scratchpad_size = 0;
  std::string implementation;
};

inline void Release(const Api &api, Matmul *matmul) {
  if (matmul->primitive) api.primitive_destroy(matmul->primitive);
  if (matmul->description) api.pd_destroy(matmul->description);
  for (Handle desc : {matmul->a, matmul->b, matmul->bias, matmul->c}) {
    if (desc) api.memory_desc_destroy(desc);
  }
}

// A row-major [rows, cols] view with leading dimension ld, or its transpose (read column-major) when transposed;
// with batch > 1, [batch, rows, cols], matrix i starting i * step elements after the first.
inline Handle Desc(const Api &api, int64_t rows, int64_t cols, int64_t ld, bool transposed, int type,
                   int64_t batch = 1, int64_t step = 0) {
  Dims dims = {batch, rows, cols}, strides = {step, transposed ? 1 : ld, transposed ? ld : 1};
  const int first = batch > 1 ? 0 : 1;  // 2-D without a batch
  Handle desc = nullptr;
  return api.memory_desc_create_with_strides(&desc, 3 - first, dims + first, type, strides + first) == 0 ? desc
                                                                                                          : nullptr;
}

// The name of the implementation oneDNN chose for a primitive description (it names the ISA).
inline std::string Implementation(const Api &api, Handle description) {
  const char *name = nullptr;
  return api.pd_query(description, kQueryImplInfo, 0, &name) == 0 && name ? name : "";
}

// The primitive description of c[rows, n] = a[rows, k] w^T for weights w [n, k] of `type` in the layout oneDNN
// picks for them ("any"), without bias or attributes; null when oneDNN has none (the caller destroys it).
inline Handle PackedDescription(const Api &api, int64_t rows, int64_t n, int64_t k, int type) {
  if (!api.missing.empty() || !api.no_packing.empty()) return nullptr;
  const Dims dims = {k, n};
  Handle a = Desc(api, rows, k, k, false, type), c = Desc(api, rows, n, n, false, type == kS8 ? kS32 : kF32);
  Handle b = nullptr, description = nullptr;
  if (a && c && api.memory_desc_create_with_tag(&b, 2, dims, type, kFormatAny) == 0 &&
      api.matmul_pd_create(&description, api.engine, a, b, nullptr, c, nullptr) != 0) {
    description = nullptr;
  }
  for (Handle desc : {a, b, c}) {
    if (desc) api.memory_desc_destroy(desc);
  }
  return description;
}

// True when `description`'s weights layout is the one Pack lays [n, k] weights of `type` out in.
inline bool PackedLayout(const Api &api, Handle description, int64_t n, int64_t k, int type) {
  Handle reference = PackedDescription(api, kPackedRows, n, k, type);
  const bool same = reference && api.memory_desc_equal(api.pd_query_md(description, kQueryWeightsMd, 0),
                                                       api.pd_query_md(reference, kQueryWeightsMd, 0)) == 1;
  if (reference) api.pd_destroy(reference);
  return same;
}

// Creates the primitive for `shape`; false when oneDNN has none for it (the caller keeps the BLAS-style call, or
// for packed weights the weights as stored).
inline bool Create(const Api &api, const Shape &shape, Matmul *matmul) {
  const Dims any_dims = {shape.k, shape.n};
  matmul->a = Desc(api, shape.m, shape.k, shape.lda, shape.ta, shape.type, shape.batch, shape.batch_a);
  if (!shape.packed_b) {
    matmul->b = Desc(api, shape.k, shape.n, shape.ldb, shape.tb, shape.type, shape.batch, shape.batch_b);
  } else if (shape.batch != 1 || !api.no_packing.empty() ||
             api.memory_desc_create_with_tag(&matmul->b, 2, any_dims, shape.type, kFormatAny) != 0) {
    matmul->b = nullptr;
  }
  matmul->c = Desc(api, shape.m, shape.n, shape.ldc, false, shape.type == kS8 ? kS32 : kF32, shape.batch,
                   shape.batch_c);
  if (shape.bias) matmul->bias = Desc(api, 1, shape.n, shape.n, false, kF32);
  Handle attr = nullptr, post_ops = nullptr;
  bool ok = matmul->a && matmul->b && matmul->c && (!shape.bias || matmul->bias) && api.attr_create(&attr) == 0 &&
            api.attr_set_scratchpad_mode(attr, kScratchpadUser) == 0;
  if (ok && shape.accumulate) {
    ok = api.post_ops_create(&post_ops) == 0 && api.post_ops_append_sum(post_ops, 1.0f, 0, kF32) == 0 &&
         api.attr_set_post_ops(attr, post_ops) == 0;
  }
  ok = ok && api.matmul_pd_create(&matmul->description, api.engine, matmul->a, matmul->b, matmul->bias, matmul->c,
                                  attr) == 0;
  if (ok && shape.packed_b) {  // the layout the packed weights are in, or none
    Handle chosen = nullptr;
    ok = PackedLayout(api, matmul->description, shape.n, shape.k, shape.type) &&
         api.memory_desc_clone(&chosen, api.pd_query_md(matmul->description, kQueryWeightsMd, 0)) == 0;
    api.memory_desc_destroy(matmul->b);
    matmul->b = chosen;
  }
  if (ok) {
    matmul->implementation = Implementation(api, matmul->description);
    matmul->scratchpad = api.pd_query_md(matmul->description, kQueryScratchpadMd, 0);
    matmul->scratchpad_size = matmul->scratchpad ? api.memory_desc_get_size(matmul->scratchpad) : 0;
    ok = api.primitive_create(&matmul->primitive, matmul->description) == 0;
  }
  if (post_ops) api.post_ops_destroy(post_ops);
  if (attr) api.attr_destroy(attr);
  if (!ok) {
    Release(api, matmul);
    *matmul = Matmul();  // released: safe to release again
  }
  return ok;
}

// A bounded map of shared values, the least recently used dropped beyond `capacity`. Values are shared: one
// dropped while a thread still uses it lives until that thread is done. Never destroyed where it is a static
// (threads may still use values at exit).
template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // The value for `key`, made by make() on first use.
  template <typename Make>
  std::shared_ptr<const Value> Find(const Key &key, Make make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = entries_.find(key);
    if (found != entries_.end()) {
      order_.splice(order_.end(), order_, found->second.position);
      return found->second.value;
    }
    std::shared_ptr<const Value> value = make();
    if (entries_.size() >= capacity_) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
    entries_.emplace(key, Entry{value, order_.insert(order_.end(), key)});
    return value;
  }

  size_t Size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  struct Entry {
    std::shared_ptr<const Value> value;
    typename std::list<Key>::iterator position;
  };

  const size_t capacity_;
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
  std::list<Key> order_;
};

// Primitives by shape, at most kCapacity (a run's products have a few dozen shapes; serving with changing batch
// sizes must not grow without bound). A shape oneDNN has no primitive for is remembered too (its `primitive` null).
class Cache {
 public:
  static const size_t kCapacity = 256;

  static LruCache<decltype(Shape().Key()), Matmul> &Get() {
    static auto *cache = new LruCache<decltype(Shape().Key()), Matmul>(kCapacity);
    return *cache;
  }

  // The primitive for `shape`, created on first use.
  static std::shared_ptr<const Matmul> Find(const Shape &shape) {
    return Get().Find(shape.Key(), [&shape] {
      std::shared_ptr<Matmul> matmul(new Matmul(), [](Matmul *done) {
        Release(GetApi(), done);
        delete done;
      });
      Create(GetApi(), shape, matmul.get());  // on failure it stays empty: no primitive for the shape
      return std::shared_ptr<const Matmul>(matmul);
    });
  }
};

// This thread's oneDNN stream (in order), made on first use; null when it cannot be.
inline Handle ThreadStream(const Api &api) {
  thread_local Handle stream = nullptr;
  if (stream == nullptr && api.stream_create(&stream, api.engine, kInOrderStream) != 0) stream = nullptr;
  return stream;
}

// This thread's scratch memory for a primitive or a reorder (each runs with the caller's: see Matmul), `size` bytes on
// a cache line.
inline char *ThreadScratch(size_t size) {
  thread_local std::vector<char> scratch;
  return Aligned(&scratch, size);
}

// A reorder of a product's operand b into the layout oneDNN's primitive picks for it (PackedDescription): op(b)
// [k, n] from b stored [n, k] row-major, read transposed (tb: weights w in x w^T), or stored [k, n] (tb false: w in
// dy w, a dense layer's input gradient). `bytes` is the packed size; 0 (no primitive) where b cannot be packed.
// Its scratch memory is the caller's, as a Matmul's.
struct Packer {
  Handle primitive = nullptr, description = nullptr;
  Handle plain = nullptr, packed = nullptr;  // memory descriptors (`packed` owned by `matmul`)
  Handle matmul = nullptr;                   // the product's primitive description, for its weights layout
  Handle scratchpad = nullptr;               // owned by `description`
  size_t scratchpad_size = 0, bytes = 0;
};

inline void Release(const Api &api, Packer *packer) {
  if (packer->primitive) api.primitive_destroy(packer->primitive);
  if (packer->description) api.pd_destroy(packer->description);
  if (packer->plain) api.memory_desc_destroy(packer->plain);
  if (packer->matmul) api.pd_destroy(packer->matmul);
}

// The reorder for op(b) [k, n] of `type` (see Packer), created once per shape: at most 256 (a model's dense layers
// have a few shapes, each packed both ways in bfloat16 training).
inline std::shared_ptr<const Packer> FindPacker(int64_t n, int64_t k, bool tb, int type) {
  static auto *cache = new LruCache<std::tuple<int64_t, int64_t, bool, int>, Packer>(256);
  return cache->Find(std::make_tuple(n, k, tb, type), [=] {
    const Api &api = GetApi();
    std::shared_ptr<Packer> packer(new Packer(), [](Packer *done) {
      Release(GetApi(), done);
      delete done;
    });
    packer->matmul = PackedDescription(api, kPackedRows, n, k, type);
    Handle attr = nullptr;
    if (packer->matmul && api.attr_create(&attr) == 0) {
      packer->packed = api.pd_query_md(packer->matmul, kQueryWeightsMd, 0);
      packer->plain = Desc(api, k, n, tb ? k : n, tb, type);
      if (packer->plain && api.attr_set_scratchpad_mode(attr, kScratchpadUser) == 0 &&
          api.reorder_pd_create(&packer->description, packer->plain, api.engine, packer->packed, api.engine,
                                attr) == 0 &&
          api.primitive_create(&packer->primitive, packer->description) == 0) {
        packer->scratchpad = api.pd_query_md(packer->description, kQueryScratchpadMd, 0);
        packer->scratchpad_size = packer->scratchpad ? api.memory_desc_get_size(packer->scratchpad) : 0;
        packer->bytes = api.memory_desc_get_size(packer->packed);
      } else {
        packer->primitive = nullptr;
      }
    }
    if (attr) api.attr_destroy(attr);
    return std::shared_ptr<const Packer>(packer);
  });
}

// The bytes op(b) [k, n] of `type` takes packed (Pack; b stored [n, k] when tb, else [k, n]); 0 when it cannot be.
inline size_t PackedSize(int64_t n, int64_t k, int type, bool tb = true) { return FindPacker(n, k, tb, type)->bytes; }

// Operand b of products c = a op(b), op(b) [k, n] of `type` (b stored [n, k] when tb, else [k, n]; row-major, no
// padding), reordered into `out` (PackedSize(n, k) bytes, on a cache line) in the layout oneDNN's primitive picks
// for it, once: a primitive reading b as stored packs it into its scratchpad on every call instead. Serving packs
// its int8 and bfloat16 weights so at load, bfloat16 training a shared layer's weights once per step (both ways: for
// the forward and for the input gradient). Measured on a Xeon with AMX (oneDNN 3.10.1, 2 threads, 2026-11-28;
// benchmarks/results): serving ALBERT-base in int8 at batch 32, seq 128, the int8 primitives took 330.3 instead of
// 456.6 ms of CPU time per call. False when it cannot be done (out untouched or partly written).
inline bool Pack(const void *b, int64_t n, int64_t k, bool tb, int type, void *out) {
  const Api &api = GetApi();
  const std::shared_ptr<const Packer> packer = FindPacker(n, k, tb, type);
  Handle stream = ThreadStream(api);
  if (packer->primitive == nullptr || stream == nullptr) return false;
  char *scratchpad = ThreadScratch(packer->scratchpad_size);
  Handle from = nullptr, to = nullptr, pad = nullptr;
  bool ok = api.memory_create(&from, packer->plain, api.engine, const_cast<void *>(b)) == 0 &&
            api.memory_create(&to, packer->packed, api.engine, out) == 0 &&
            (!packer->scratchpad || api.memory_create(&pad, packer->scratchpad, api.engine, scratchpad) == 0);
  if (ok) {
    const ExecArg exec[3] = {{kArgFrom, from}, {kArgTo, to}, {kArgScratchpad, pad}};
    ok = api.primitive_execute(packer->primitive, stream, pad ? 3 : 2, exec) == 0 && api.stream_wait(stream) == 0;
  }
  for (Handle memory : {from, to, pad}) {
    if (memory) api.memory_destroy(memory);
  }
  return ok;
}

// Runs the product of `shape` through its primitive on this thread; false (nothing written) when the primitives
// are not available or oneDNN has none for the shape, so the caller runs the BLAS-style call instead.
inline bool Run(const Shape &shape, const void *a, const void *b, const float *bias, void *c) {
  const Api &api = GetApi();
  if (!api.missing.empty()) return false;
  const std::shared_ptr<const Matmul> matmul = Cache::Find(shape);
  Handle stream = ThreadStream(api);
  if (matmul->primitive == nullptr || stream == nullptr) return false;
  char *scratchpad = ThreadScratch(matmul->scratchpad_size);
  Handle memory[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  bool ok = api.memory_create(&memory[0], matmul->a, api.engine, const_cast<void *>(a)) == 0 &&
            api.memory_create(&memory[1], matmul->b, api.engine, const_cast<void *>(b)) == 0 &&
            api.memory_create(&memory[2], matmul->c, api.engine, c) == 0 &&
            (!matmul->scratchpad || api.memory_create(&memory[3], matmul->scratchpad, api.engine, scratchpad) == 0) &&
            (!shape.bias || api.memory_create(&memory[4], matmul->bias, api.engine, const_cast<float *>(bias)) == 0);
  if (ok) {
    ExecArg exec[5] = {{kArgSrc, memory[0]}, {kArgWeights, memory[1]}, {kArgDst, memory[2]}};
    int args = 3;
    if (memory[3]) exec[args++] = {kArgScratchpad, memory[3]};
    if (memory[4]) exec[args++] = {kArgBias, memory[4]};
    ok = api.primitive_execute(matmul->primitive, stream, args, exec) == 0 && api.stream_wait(stream) == 0;
  }
  for (Handle handle : memory) {
    if (handle) api.memory_destroy(handle);
  }
  return ok;
}

}  // namespace dnnl
}  // namespace albert

#endif  // ALBERT_KERNELS_DNNL_PRIMITIVES_H_
