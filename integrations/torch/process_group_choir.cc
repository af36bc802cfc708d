// ProcessGroupChoir, ChoirWork and TorchStore: see process_group_choir.h.
//
// This is one of the two translation units that include torch headers (the
// other is the pybind11 module); each costs about 40 s to compile.
#include "process_group_choir.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/exception.h>

#include "choir/types.h"

namespace choir::torch_backend {
namespace {

// ---------------------------------------------------------------------------
// Errors

// The exception every choir error becomes: its what() is "E401 Name: ...",
// which pybind11 turns into a Python RuntimeError with that message.
std::exception_ptr ToException(const Status& status) {
  return std::make_exception_ptr(std::runtime_error(status.ToString()));
}

bool ContainsNoCase(std::string_view text, std::string_view word) {
  auto it = std::search(text.begin(), text.end(), word.begin(), word.end(),
                        [](char a, char b) { return std::tolower(a) == std::tolower(b); });
  return it != text.end();
}

// The Status for the exception being handled, thrown by a c10d::Store call.
Status StoreError(const std::string& what) {
  std::string message;
  bool timeout = false;
  try {
    throw;
  } catch (const c10d::TimeoutError& e) {
    message = e.what();
    timeout = true;
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  timeout = timeout || ContainsNoCase(message, "timeout") || ContainsNoCase(message, "timed out");
  return Status(timeout ? Code::kStoreTimeout : Code::kStoreUnreachable,
                "torch store: " + what + ": " + message);
}

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string Text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// ---------------------------------------------------------------------------
// Tensors and types

std::string Describe(const at::Tensor& t) {
  std::string shape;
  for (int64_t d : t.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  return std::string(c10::toString(t.scalar_type())) + "[" + shape + "]";
}

Status CheckTensor(const at::Tensor& t, const std::string& what) {
  if (!t.defined()) return InvalidArgument(what + " is an undefined tensor");
  if (!t.device().is_cpu()) {
    return Status(Code::kNotSupported, what + " is on device " + t.device().str() +
                                           "; the choir backend handles CPU tensors only");
  }
  if (t.layout() != at::kStrided) {
    return Status(Code::kNotSupported, what + " is not a dense (strided) tensor; sparse tensors "
                                              "are not supported");
  }
  return Status::Ok();
}

// The choir type holding `type` exactly; bool travels as 0/1 bytes.
std::optional<DataType> ChoirType(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUint8;
    case at::kBool: return DataType::kUint8;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    default: return std::nullopt;
  }
}

// How choir sees a tensor's data in operations that only move it: its own
// type when choir has one (keeping the dtype in choir's mismatch check),
// bytes otherwise.
struct Elements {
  DataType dtype;
  size_t unit;  // choir elements per tensor element
};

Elements MoveType(at::ScalarType type) {
  if (auto t = ChoirType(type)) return {*t, 1};
  return {DataType::kUint8, c10::elementSize(type)};
}

size_t Count(const at::Tensor& t, const Elements& e) { return static_cast<size_t>(t.numel()) * e.unit; }

// An output the result cannot be written into: some of its elements share
// memory (an expand()ed or other stride-0 view), so each would receive a
// value and torch refuses the copy. Checked before communicating: found only
// when the result is copied back, it would fail a collective that succeeded
// everywhere else.
Status CheckWritable(const at::Tensor& t, const std::string& what) {
  if (at::has_internal_overlap(t) != at::MemOverlap::Yes) return Status::Ok();
  return InvalidArgument(what + " " + Describe(t) + " has elements that share memory (an expand()ed or other "
                                                     "stride-0 view), so the result cannot be written into it; "
                                                     "clone() it and pass the clone");
}

// ---------------------------------------------------------------------------
// Staging buffers
//
// Copies of non-contiguous tensors, concatenations of lists and receive
// buffers are allocated by torch before anything is sent. torch refuses an
// allocation it cannot make with a c10::Error ("DefaultCPUAllocator: can't
// allocate memory"); the helpers below turn that into StagingFailed carrying
// E503 OutOfMemory, which every operation catches and fails with like a bad
// argument (FailArgument aborts the communicator, so peers fail at once
// instead of waiting for this rank until the timeout).

class StagingFailed : public std::exception {
 public:
  explicit StagingFailed(Status status) : status_(std::move(status)), text_(status_.ToString()) {}
  const char* what() const noexcept override { return text_.c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
  std::string text_;
};

// numel * itemsize, saturating instead of wrapping (an expand()ed tensor can
// claim any number of elements).
uint64_t BytesOf(int64_t numel, size_t itemsize) {
  uint64_t bytes = 0;
  if (numel < 0 || __builtin_mul_overflow(static_cast<uint64_t>(numel), itemsize, &bytes)) return UINT64_MAX;
  return bytes;
}

// a * b for element counts; INT64_MAX (an allocation torch refuses) instead of wrapping.
int64_t TimesOrMax(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

// Runs `make`, which allocates the staging buffer of `bytes` for `what` in
// operation `op`; torch's refusal becomes StagingFailed (E503).
template <typename F>
at::Tensor Staged(const char* op, const std::string& what, uint64_t bytes, F&& make) {
  // Staging copies need no autograd history (inputs may require grad).
  at::NoGradGuard no_grad;
  std::string why;
  try {
    return make();
  } catch (const std::bad_alloc&) {
    why = "std::bad_alloc";
  } catch (const c10::Error& e) {
    why = e.what_without_backtrace();
  }
  const std::string size = bytes == UINT64_MAX ? "more than 2^64" : std::to_string(bytes);
  throw StagingFailed(Status(Code::kOutOfMemory,
                             std::string(op) + " needs " + size + " bytes for a staging copy of " + what +
                                 ", which torch could not allocate (" + why +
                                 "); contiguous tensors are used in place without a copy: pass contiguous "
                                 "or smaller tensors, or free memory"));
}

// A contiguous tensor holding t's data: t itself when it already is.
at::Tensor Dense(const at::Tensor& t, const char* op, const std::string& what) {
  if (t.is_contiguous()) return t;
  return Staged(op, what + " " + Describe(t), BytesOf(t.numel(), t.element_size()), [&] { return t.contiguous(); });
}

// An uninitialized 1-D tensor of `numel` elements like `options`.
at::Tensor Empty(int64_t numel, const at::TensorOptions& options, const char* op, const std::string& what) {
  return Staged(op, what, BytesOf(numel, c10::elementSize(c10::typeMetaToScalarType(options.dtype()))),
                [&] { return at::empty({numel}, options); });
}

// The first tensor's data pointer when the tensors are contiguous and lie back
// to back in memory in list order (the chunks of one contiguous tensor, as
// FSDP and many users pass them), so that choir can use the memory directly;
// nullptr otherwise.
void* BackToBack(const std::vector<at::Tensor>& ts) {
  if (ts.empty()) return nullptr;
  char* next = static_cast<char*>(ts[0].data_ptr());
  if (next == nullptr) return nullptr;
  for (const at::Tensor& t : ts) {
    if (!t.is_contiguous() || static_cast<char*>(t.data_ptr()) != next) return nullptr;
    next += t.nbytes();
  }
  return ts[0].data_ptr();
}

// One contiguous 1-D tensor holding the tensors' elements in list order (all
// tensors share one dtype).
at::Tensor Concat(const std::vector<at::Tensor>& ts, const char* op, const std::string& what) {
  int64_t numel = 0;
  for (const at::Tensor& t : ts) numel = t.numel() > INT64_MAX - numel ? INT64_MAX : numel + t.numel();
  const size_t itemsize = ts.empty() ? 1 : ts[0].element_size();
  return Staged(op, "the " + std::to_string(ts.size()) + " tensors of " + what + " (concatenated)",
                BytesOf(numel, itemsize), [&] {
                  std::vector<at::Tensor> flat;
                  flat.reserve(ts.size());
                  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
                  return at::cat(flat);
                });
}

// Copies consecutive pieces of `flat` (1-D, contiguous) into `ts`, starting at element `offset`.
void Split(const at::Tensor& flat, int64_t offset, const std::vector<at::Tensor>& ts) {
  for (const at::Tensor& t : ts) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// Tensors of mixed dtypes packed into one byte buffer; each piece starts at a
// multiple of 16 so that it can be viewed as its own dtype.
struct ByteLayout {
  std::vector<int64_t> offsets;
  int64_t total = 0;
};

int64_t Align16(int64_t n) { return (n + 15) / 16 * 16; }

ByteLayout LayoutOf(const std::vector<at::Tensor>& ts) {
  ByteLayout layout;
  for (const at::Tensor& t : ts) {
    layout.offsets.push_back(layout.total);
    layout.total = Align16(layout.total + static_cast<int64_t>(t.nbytes()));
  }
  return layout;
}

// The piece of byte tensor `bytes` at `offset`, viewed with the dtype and shape of `like`.
at::Tensor ByteView(const at::Tensor& bytes, int64_t offset, const at::Tensor& like) {
  return bytes.narrow(0, offset, static_cast<int64_t>(like.nbytes()))
      .view(like.scalar_type())
      .view(like.sizes());
}

// What a c10d reduction becomes in choir for one dtype.
struct Reduction {
  DataType dtype;
  ReduceOp op;
  // PREMUL_SUM: every rank's input is scaled by this factor before the sum.
  std::optional<double> factor;
  at::Tensor factor_tensor;
};

const char* RedOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

Result<Reduction> MapReduction(const c10d::ReduceOp& rop, at::ScalarType type) {
  const auto unsupported = [&](const std::string& why) {
    return Status(Code::kUnsupportedOp, std::string("ReduceOp.") + RedOpName(rop.op_) + " on " +
                                            c10::toString(type) + " tensors: " + why);
  };
  std::optional<DataType> dtype = ChoirType(type);
  if (!dtype) return unsupported("choir reduces float32/64, float16, bfloat16, int8, uint8, int32, int64 and bool");
  Reduction r{*dtype, ReduceOp::kSum, std::nullopt, at::Tensor()};
  if (type == at::kBool) {
    // Logical semantics on 0/1 bytes.
    switch (rop.op_) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
      case c10d::ReduceOp::BOR: r.op = ReduceOp::kBor; return r;
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
      case c10d::ReduceOp::BAND: r.op = ReduceOp::kBand; return r;
      case c10d::ReduceOp::BXOR: r.op = ReduceOp::kBxor; return r;
      default: return unsupported("bool supports SUM/MAX/BOR (logical or), PRODUCT/MIN/BAND (and), BXOR");
    }
  }
  switch (rop.op_) {
    case c10d::ReduceOp::SUM: r.op = ReduceOp::kSum; break;
    case c10d::ReduceOp::AVG: r.op = ReduceOp::kAvg; break;
    case c10d::ReduceOp::PRODUCT: r.op = ReduceOp::kProd; break;
    case c10d::ReduceOp::MIN: r.op = ReduceOp::kMin; break;
    case c10d::ReduceOp::MAX: r.op = ReduceOp::kMax; break;
    case c10d::ReduceOp::BAND: r.op = ReduceOp::kBand; break;
    case c10d::ReduceOp::BOR: r.op = ReduceOp::kBor; break;
    case c10d::ReduceOp::BXOR: r.op = ReduceOp::kBxor; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (!IsFloatingPoint(r.dtype)) return unsupported("PREMUL_SUM needs a floating-point dtype");
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
      if (s == nullptr) {
        return unsupported("the factor is missing (build the op with dist._make_nccl_premul_sum)");
      }
      if (!s->tensor_factors.empty()) {
        if (s->tensor_factors[0].numel() != 1) return unsupported("the factor tensor must hold one element");
        r.factor_tensor = s->tensor_factors[0].to(at::kCPU, type).reshape({});
      } else {
        r.factor = s->double_factor;
      }
      r.op = ReduceOp::kSum;
      break;
    }
    default: return unsupported("unknown reduce op");
  }
  if (Status s = CheckReduceSupported(r.dtype, r.op); !s.ok()) return unsupported(s.message());
  return r;
}

bool PreMultiplies(const Reduction& r) { return r.factor.has_value() || r.factor_tensor.defined(); }

// Scales `flat` (a staging buffer of ours) in place for PREMUL_SUM.
void PreMultiply(const Reduction& r, const at::Tensor& flat) {
  if (r.factor) flat.mul_(*r.factor);
  if (r.factor_tensor.defined()) flat.mul_(r.factor_tensor);
}

// The buffer a reduction reads: t itself, or a contiguous (and for
// PREMUL_SUM scaled) copy of it.
at::Tensor ReductionInput(const at::Tensor& t, const Reduction& r, const char* op, const std::string& what) {
  if (!PreMultiplies(r)) return Dense(t, op, what);
  at::Tensor copy = Staged(op, what + " " + Describe(t) + " (scaled for PREMUL_SUM)",
                           BytesOf(t.numel(), t.element_size()), [&] { return t.clone(at::MemoryFormat::Contiguous); });
  PreMultiply(r, copy);
  return copy;
}

// Copies `staged` back to `t` after success when they are different tensors
// (Completion::Run runs it without autograd recording: `t` may be a
// parameter or a view of one, as gloo allows).
std::function<void()> CopyBack(const at::Tensor& t, const at::Tensor& staged) {
  if (staged.is_same(t)) return nullptr;
  return [t, staged] { t.copy_(staged); };
}

// Counts per peer (in choir elements) of an alltoall_base side: `splits` rows
// of t's first dimension each, or equal shares when `splits` is empty.
Result<std::vector<size_t>> SplitCounts(const at::Tensor& t, const std::vector<int64_t>& splits,
                                        int size, const Elements& e, const std::string& what) {
  if (t.dim() == 0) return InvalidArgument(what + " is a 0-dim tensor; alltoall splits its first dimension");
  const int64_t rows = t.size(0);
  const int64_t row = rows == 0 ? 0 : t.numel() / rows;
  std::vector<size_t> counts(static_cast<size_t>(size));
  if (splits.empty()) {
    if (rows % size != 0) {
      return Status(Code::kBufferTooSmall, what + " " + Describe(t) + ": the first dimension " +
                                               std::to_string(rows) + " does not divide by the " +
                                               std::to_string(size) + " ranks (pass split sizes)");
    }
    for (size_t& c : counts) c = static_cast<size_t>(rows / size * row) * e.unit;
    return counts;
  }
  if (splits.size() != static_cast<size_t>(size)) {
    return Status(Code::kBufferTooSmall, what + " split sizes have " + std::to_string(splits.size()) +
                                             " entries for " + std::to_string(size) + " ranks");
  }
  // Each split is checked against the rows before anything is added or
  // multiplied: huge splits must not wrap around to a sum that looks right
  // (3 x 6148914691236517207 is 2^64 + 5) and make choir copy past the tensor.
  const std::string fix = "; each split must be 0.." + std::to_string(rows) + " and together they must add up to " +
                          std::to_string(rows);
  int64_t sum = 0;
  for (size_t j = 0; j < splits.size(); ++j) {
    const std::string name = what + " split size [" + std::to_string(j) + "] = " + std::to_string(splits[j]);
    if (splits[j] < 0) return InvalidArgument(name + " is negative" + fix);
    if (splits[j] > rows) {
      return Status(Code::kBufferTooSmall, name + " is more than the " + std::to_string(rows) + " rows of " +
                                               Describe(t) + fix);
    }
    if (splits[j] > rows - sum) {
      return Status(Code::kBufferTooSmall, name + " brings the split sizes so far to more than the " +
                                               std::to_string(rows) + " rows of " + Describe(t) + fix);
    }
    sum += splits[j];
    uint64_t elems = 0;  // at most t's elements (splits[j] <= rows), times the unit
    if (__builtin_mul_overflow(static_cast<uint64_t>(splits[j] * row), static_cast<uint64_t>(e.unit), &elems)) {
      return InvalidArgument(name + " rows of " + Describe(t) + " are more than 2^64 bytes");
    }
    counts[j] = static_cast<size_t>(elems);
  }
  if (sum != rows) {
    return Status(Code::kBufferTooSmall, what + " split sizes add up to " + std::to_string(sum) +
                                             " but " + Describe(t) + " has " + std::to_string(rows) +
                                             " rows");
  }
  return counts;
}

// Checks that `ts` holds `n` tensors like `like` (same dtype and element count).
Status CheckList(const std::vector<at::Tensor>& ts, size_t n, const at::Tensor& like,
                 const std::string& what) {
  if (ts.size() != n) {
    return Status(Code::kBufferTooSmall, what + " has " + std::to_string(ts.size()) +
                                             " tensors; expected " + std::to_string(n));
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string name = what + "[" + std::to_string(i) + "]";
    CHOIR_RETURN_IF_ERROR(CheckTensor(ts[i], name));
    if (ts[i].scalar_type() != like.scalar_type() || ts[i].numel() != like.numel()) {
      return InvalidArgument(name + " is " + Describe(ts[i]) + " but must match " + Describe(like) +
                             " (same dtype and number of elements)");
    }
  }
  return Status::Ok();
}

// CheckWritable for each tensor of an output list.
Status CheckWritableList(const std::vector<at::Tensor>& ts, const std::string& what) {
  for (size_t i = 0; i < ts.size(); ++i) {
    CHOIR_RETURN_IF_ERROR(CheckWritable(ts[i], what + "[" + std::to_string(i) + "]"));
  }
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------
// TorchStore

TorchStore::TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  // None from Python arrives as a null pointer, which every method would follow.
  if (!store_) {
    throw std::runtime_error(InvalidArgument("store is None; pass the c10d Store the ranks rendezvous through "
                                             "(the TCPStore or PrefixStore torch.distributed hands a backend)")
                                 .ToString());
  }
}

Status TorchStore::Set(const std::string& key, const std::string& value) {
  try {
    store_->set(key, Bytes(value));
    return Status::Ok();
  } catch (...) {
    return StoreError("set '" + key + "'");
  }
}

Result<std::string> TorchStore::Get(const std::string& key) {
  try {
    // c10d's get() waits for a missing key; choir's Get must not.
    if (!store_->check({key})) return Status(Code::kKeyNotFound, "key '" + key + "' is not in the torch store");
    return Text(store_->get(key));
  } catch (...) {
    return StoreError("get '" + key + "'");
  }
}

Result<int64_t> TorchStore::Add(const std::string& key, int64_t delta) {
  try {
    return store_->add(key, delta);
  } catch (...) {
    return StoreError("add '" + key + "'");
  }
}

Result<std::string> TorchStore::CompareSet(const std::string& key, const std::string& expected,
                                           const std::string& desired) {
  try {
    // c10d answers `expected` for a missing key when `expected` is not empty;
    // choir's contract is "" (still missing).
    if (!expected.empty() && !store_->check({key})) return std::string();
    return Text(store_->compareSet(key, Bytes(expected), Bytes(desired)));
  } catch (...) {
    return StoreError("compareSet '" + key + "'");
  }
}

Result<bool> TorchStore::Delete(const std::string& key) {
  try {
    return store_->deleteKey(key);
  } catch (...) {
    return StoreError("deleteKey '" + key + "'");
  }
}

Status TorchStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    // c10d reads a zero timeout as "forever"; a "never" deadline of choir
    // arrives as 2^63 ns, which HashStore and FileStore would overflow.
    store_->wait(keys, std::clamp(timeout, std::chrono::milliseconds(1), kMaxTimeout));
    return Status::Ok();
  } catch (...) {
    std::string list;
    for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
    return StoreError("wait for [" + list + "] (" + std::to_string(timeout.count()) + " ms)");
  }
}

Result<bool> TorchStore::Check(const std::vector<std::string>& keys) {
  try {
    return store_->check(keys);
  } catch (...) {
    return StoreError("check");
  }
}

// ---------------------------------------------------------------------------
// ChoirWork

ChoirWork::ChoirWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), outputs_(std::move(outputs)) {}

bool ChoirWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  // Whoever polls does not run the operations: let the progress thread take
  // them at once (choir::Work::Start).
  for (const choir::Work& w : issued_) w.Start();
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool ChoirWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr ChoirWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int ChoirWork::sourceRank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return source_rank_;
}

std::vector<at::Tensor> ChoirWork::result() { return outputs_; }

bool ChoirWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    for (const choir::Work& w : issued_) (void)w.Wait();  // outcomes arrive through Finish()
  } else {
    for (const choir::Work& w : issued_) w.Start();  // this thread will not run them
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, std::min(timeout, kMaxTimeout), [&] { return completed_; })) {
    throw std::runtime_error(
        Status(Code::kCollectiveTimeout,
               "rank " + std::to_string(rank_) + ": " + c10d::opTypeToString(opType_) +
                   " still running after Work.wait(timeout=" + std::to_string(timeout.count()) +
                   " ms); it continues under the process group's timeout")
            .ToString());
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

namespace {
void CompleteFuture(c10::ivalue::Future& future, const std::exception_ptr& error,
                    const std::vector<at::Tensor>& outputs) {
  if (error) {
    future.setError(error);
  } else {
    future.markCompleted(c10::IValue(outputs));
  }
}
}  // namespace

c10::intrusive_ptr<c10::ivalue::Future> ChoirWork::getFuture() {
  // Whoever waits on the future (DDP's reducer) does not run the operations.
  for (const choir::Work& w : issued_) w.Start();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!future_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    // Finish() already ran without a future to complete: complete it here.
    // Nobody can have attached a callback yet, so nothing runs under the lock.
    if (completed_) CompleteFuture(*future_, exception_, outputs_);
  }
  return future_;
}

void ChoirWork::Finish(const Status& status, int source_rank) {
  std::exception_ptr error = status.ok() ? nullptr : ToException(status);
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    exception_ = error;
    source_rank_ = source_rank;
    completed_ = true;
    future = future_;
  }
  cv_.notify_all();
  // Outside the lock: completing the future runs its callbacks (DDP's).
  if (future) CompleteFuture(*future, error, outputs_);
}

// ---------------------------------------------------------------------------
// ProcessGroupChoir

struct ProcessGroupChoir::Call {
  Call(c10d::OpType t, std::vector<at::Tensor> out) : type(t), outputs(std::move(out)) {}

  c10d::OpType type;
  std::vector<at::Tensor> outputs;  // what Work.result() and the future return
  // The choir operations, issued in order as one sequence.
  std::vector<std::function<Work(Communicator&)>> ops;
  // Tensors choir reads or writes: alive until the operations finish, even if
  // the caller drops its references (fire-and-forget async ops).
  std::vector<at::Tensor> keep;
  // Copies results out of staging buffers after success (may be empty).
  std::vector<std::function<void()>> finish;
  bool report_source = false;  // recv: report the sender (WorkInfo::source_rank)

  void Keep(const at::Tensor& t) { keep.push_back(t); }
  void Then(std::function<void()> f) {
    if (f) finish.push_back(std::move(f));
  }
};

ProcessGroupChoir::ProcessGroupChoir(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, std::chrono::milliseconds timeout,
                                     BlockingRegion blocking)
    : c10d::ProcessGroup(rank, size), blocking_(std::move(blocking)) {
  auto torch_store = std::make_shared<TorchStore>(store);  // throws E100 for None
  if (timeout.count() <= 0) {
    throw std::runtime_error(InvalidArgument("timeout is " + std::to_string(timeout.count()) +
                                             " ms; the deadline of rendezvous and of every operation must be at "
                                             "least 1 ms (torch's default is timedelta(minutes=30))")
                                 .ToString());
  }
  CommOptions options;
  options.timeout = std::min(timeout, kMaxTimeout);  // see kMaxTimeout
  auto comm = Communicator::Create(std::move(torch_store), rank, size, options);
  if (!comm.ok()) throw std::runtime_error(comm.status().ToString());
  comm_ = std::move(comm).value();
  init();
}

// Destroying the communicator waits for queued operations to finish; their
// completion callbacks may need what this thread holds (see BlockingRegion).
ProcessGroupChoir::~ProcessGroupChoir() {
  const auto drain = [this] { comm_.reset(); };
  if (blocking_) {
    blocking_(drain);
  } else {
    drain();
  }
}

void ProcessGroupChoir::FailArgument(const Status& status) {
  const std::string text = status.WithContext("rank " + std::to_string(rank_)).ToString();
  comm_->Abort(text);
  throw std::runtime_error(text);
}

CallOptions ProcessGroupChoir::ToCallOptions(std::chrono::milliseconds timeout) {
  CallOptions options;
  if (timeout.count() > 0) options.timeout = timeout;  // kUnsetTimeout (-1): the group's default
  return options;
}

namespace {

// What to do about a point-to-point operation that timed out (E400; also
// the sticky error later operations fail with). Sends and receives progress
// independently of the order they were issued in (a pending one does not
// hold the group), so a timeout means the peer never issued the match, or
// issued it with another tag or group, or waits itself for something this
// rank does only after the wait that timed out.
Status WithReceiveHint(const Status& s) {
  if (s.code() != Code::kCollectiveTimeout) return s;
  const std::string& m = s.message();
  const bool recv = m.find(": recv from rank") != std::string::npos;
  const bool send = m.find(": send to rank") != std::string::npos;
  if ((!recv && !send) || m.find("(integrations/torch/README.md") != std::string::npos) return s;
  return Status(s.code(),
                m + (recv ? ". No message with this tag came from that rank before the deadline: check that the "
                            "peer issues the matching send (same group and tag) and does not itself wait for "
                            "something this rank does only after this wait"
                          : ". The peer did not take the message before the deadline (a send larger than the "
                            "transport buffers, 2 MiB between ranks of a host by default, finishes only when the "
                            "peer receives it): check that the peer issues the matching recv (same group and "
                            "tag)") +
                    " (integrations/torch/README.md, Point-to-point)");
}

// Completes a ChoirWork when every choir operation of its call has finished.
struct Completion {
  c10::intrusive_ptr<ChoirWork> work;
  std::vector<at::Tensor> keep;
  std::vector<std::function<void()>> finish;
  std::atomic<size_t> left{0};
  std::mutex mu;
  Status first_error;  // guarded by mu

  void Done(const Status& status, int source_rank) {
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) first_error = status;
    }
    if (left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    Status result;
    {
      std::lock_guard<std::mutex> lock(mu);
      result = first_error;
    }
    Run(result, source_rank);
  }

  void Run(Status result, int source_rank) {
    if (result.ok()) {
      try {
        // The outputs may be parameters or views of them (requires_grad):
        // writing a collective's result is not an operation to differentiate,
        // and autograd would refuse the in-place copy (gloo allows it too).
        at::NoGradGuard no_grad;
        for (auto& f : finish) f();
      } catch (const c10::Error& e) {
        result = Status(Code::kInternal, std::string("copying the result to the output tensors: ") +
                                             e.what_without_backtrace());
      } catch (const std::exception& e) {
        result = Status(Code::kInternal, std::string("copying the result to the output tensors: ") + e.what());
      }
    }
    finish.clear();
    keep.clear();
    work->Finish(WithReceiveHint(result), source_rank);
  }
};

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::Issue(Call& call) {
  auto work = c10::make_intrusive<ChoirWork>(rank_, call.type, std::move(call.outputs));
  std::vector<Work> works;
  works.reserve(call.ops.size());
  {
    std::lock_guard<std::mutex> lock(issue_mu_);
    for (auto& op : call.ops) works.push_back(op(*comm_));
  }
  auto completion = std::make_shared<Completion>();
  completion->work = work;
  completion->keep = std::move(call.keep);
  completion->finish = std::move(call.finish);
  if (works.empty()) {
    completion->Run(Status::Ok(), -1);
    return work;
  }
  completion->left.store(works.size());
  for (const Work& w : works) {
    // The callback holds a copy of `w` to read the sender of a recv and the
    // algorithm used; the copy goes away with the callback.
    w.Then([completion, w, last = last_algorithm_](const Status& s) {
      const WorkInfo info = w.info();
      if (s.ok() && !info.algorithm.empty()) {
        std::lock_guard<std::mutex> lock(last->mu);
        last->name = info.algorithm;
      }
      completion->Done(s, info.source_rank);
    });
  }
  work->SetIssued(std::move(works));
  return work;
}

std::string ProcessGroupChoir::LastAlgorithm() const {
  std::lock_guard<std::mutex> lock(last_algorithm_->mu);
  return last_algorithm_->name;
}

// Every operation below is a function-try-block: a staging buffer torch
// cannot allocate (StagingFailed, E503) fails the call the way a bad argument
// does, before anything was sent.

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) try {
  if (tensors.size() != 1 || opts.rootTensor != 0) {
    FailArgument(InvalidArgument("broadcast takes exactly one CPU tensor (got " +
                                 std::to_string(tensors.size()) + ")"));
  }
  const at::Tensor& t = tensors[0];
  if (Status s = CheckTensor(t, "broadcast tensor"); !s.ok()) FailArgument(s);
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ != root) {
    if (Status s = CheckWritable(t, "broadcast tensor"); !s.ok()) FailArgument(s);
  }
  Call call(c10d::OpType::BROADCAST, tensors);
  at::Tensor buf = Dense(t, "broadcast", "the tensor");
  const Elements e = MoveType(t.scalar_type());
  void* p = buf.data_ptr();
  const size_t n = Count(buf, e);
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Broadcast(p, p, n, e.dtype, root, co); });
  call.Keep(buf);
  if (rank_ != root) call.Then(CopyBack(t, buf));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) try {
  if (tensors.size() != 1) {
    FailArgument(InvalidArgument("allreduce takes exactly one CPU tensor (got " +
                                 std::to_string(tensors.size()) + ")"));
  }
  const at::Tensor& t = tensors[0];
  if (Status s = CheckTensor(t, "allreduce tensor"); !s.ok()) FailArgument(s);
  if (Status s = CheckWritable(t, "allreduce tensor"); !s.ok()) FailArgument(s);
  auto red = MapReduction(opts.reduceOp, t.scalar_type());
  if (!red.ok()) FailArgument(red.status());
  Call call(c10d::OpType::ALLREDUCE, tensors);
  at::Tensor buf = ReductionInput(t, *red, "allreduce", "the tensor");
  void* p = buf.data_ptr();
  const size_t n = static_cast<size_t>(buf.numel());
  const DataType dtype = red->dtype;
  const ReduceOp op = red->op;
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Allreduce(p, p, n, dtype, op, co); });
  call.Keep(buf);
  call.Then(CopyBack(t, buf));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) try {
  // One allreduce per dtype, over the concatenation of that dtype's tensors
  // (in order of first appearance, the same on every rank).
  std::vector<at::ScalarType> types;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = "allreduce_coalesced tensor " + std::to_string(i);
    if (Status s = CheckTensor(tensors[i], name); !s.ok()) FailArgument(s);
    if (Status s = CheckWritable(tensors[i], name); !s.ok()) FailArgument(s);
    if (std::find(types.begin(), types.end(), tensors[i].scalar_type()) == types.end()) {
      types.push_back(tensors[i].scalar_type());
    }
  }
  Call call(c10d::OpType::ALLREDUCE_COALESCED, tensors);
  const CallOptions co = ToCallOptions(opts.timeout);
  for (at::ScalarType type : types) {
    auto red = MapReduction(opts.reduceOp, type);
    if (!red.ok()) FailArgument(red.status());
    std::vector<at::Tensor> group;
    for (const at::Tensor& t : tensors) {
      if (t.scalar_type() == type) group.push_back(t);
    }
    at::Tensor flat = Concat(group, "allreduce_coalesced", std::string(c10::toString(type)) + " tensors");
    PreMultiply(*red, flat);
    void* p = flat.data_ptr();
    const size_t n = static_cast<size_t>(flat.numel());
    const DataType dtype = red->dtype;
    const ReduceOp op = red->op;
    call.ops.push_back([=](Communicator& c) { return c.Allreduce(p, p, n, dtype, op, co); });
    call.Keep(flat);
    call.Then([flat, group] { Split(flat, 0, group); });
  }
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) try {
  if (tensors.size() != 1 || opts.rootTensor != 0) {
    FailArgument(InvalidArgument("reduce takes exactly one CPU tensor (got " +
                                 std::to_string(tensors.size()) + ")"));
  }
  const at::Tensor& t = tensors[0];
  if (Status s = CheckTensor(t, "reduce tensor"); !s.ok()) FailArgument(s);
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ == root) {
    if (Status s = CheckWritable(t, "reduce tensor"); !s.ok()) FailArgument(s);
  }
  auto red = MapReduction(opts.reduceOp, t.scalar_type());
  if (!red.ok()) FailArgument(red.status());
  Call call(c10d::OpType::REDUCE, tensors);
  at::Tensor buf = ReductionInput(t, *red, "reduce", "the tensor");
  void* p = buf.data_ptr();
  void* recv = rank_ == root ? p : nullptr;  // in place at the root
  const size_t n = static_cast<size_t>(buf.numel());
  const DataType dtype = red->dtype;
  const ReduceOp op = red->op;
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Reduce(p, recv, n, dtype, op, root, co); });
  call.Keep(buf);
  if (rank_ == root) call.Then(CopyBack(t, buf));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) try {
  if (inputs.size() != 1 || outputs.size() != 1) {
    FailArgument(InvalidArgument("allgather takes one input tensor and one list of outputs"));
  }
  const at::Tensor& in = inputs[0];
  if (Status s = CheckTensor(in, "allgather input"); !s.ok()) FailArgument(s);
  const std::vector<at::Tensor>& outs = outputs[0];
  if (Status s = CheckList(outs, static_cast<size_t>(size_), in, "allgather output list"); !s.ok()) {
    FailArgument(s);
  }
  if (Status s = CheckWritableList(outs, "allgather output list"); !s.ok()) FailArgument(s);
  Call call(c10d::OpType::ALLGATHER, outs);
  at::Tensor src = Dense(in, "allgather", "the input");
  const Elements e = MoveType(in.scalar_type());
  void* recv = BackToBack(outs);
  if (recv == nullptr || in.numel() == 0) {
    at::Tensor flat = Empty(TimesOrMax(size_, in.numel()), in.options(), "allgather",
                            "the " + std::to_string(size_) + " outputs (received together)");
    recv = flat.data_ptr();
    call.Keep(flat);
    call.Then([flat, outs] { Split(flat, 0, outs); });
  } else {
    for (const at::Tensor& o : outs) call.Keep(o);
  }
  const void* send = src.data_ptr();
  const size_t n = Count(src, e);
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Allgather(send, recv, n, e.dtype, co); });
  call.Keep(src);
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) try {
  if (Status s = CheckTensor(input, "_allgather_base input"); !s.ok()) FailArgument(s);
  if (Status s = CheckTensor(output, "_allgather_base output"); !s.ok()) FailArgument(s);
  if (output.scalar_type() != input.scalar_type() || output.numel() != TimesOrMax(size_, input.numel())) {
    FailArgument(InvalidArgument("_allgather_base output " + Describe(output) + " must have the dtype of input " +
                                 Describe(input) + " and " + std::to_string(size_) + " times its elements"));
  }
  if (Status s = CheckWritable(output, "_allgather_base output"); !s.ok()) FailArgument(s);
  Call call(c10d::OpType::_ALLGATHER_BASE, {output});
  at::Tensor src = Dense(input, "_allgather_base", "the input");
  at::Tensor dst = Dense(output, "_allgather_base", "the output");
  const Elements e = MoveType(input.scalar_type());
  const void* send = src.data_ptr();
  void* recv = dst.data_ptr();
  const size_t n = Count(src, e);
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Allgather(send, recv, n, e.dtype, co); });
  call.Keep(src);
  call.Keep(dst);
  call.Then(CopyBack(output, dst));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) try {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (Status s = CheckTensor(inputs[i], "allgather_coalesced input " + std::to_string(i)); !s.ok()) {
      FailArgument(s);
    }
  }
  if (output_lists.size() != static_cast<size_t>(size_)) {
    FailArgument(Status(Code::kBufferTooSmall, "allgather_coalesced has " + std::to_string(output_lists.size()) +
                                                   " output lists for " + std::to_string(size_) + " ranks"));
  }
  for (size_t r = 0; r < output_lists.size(); ++r) {
    if (output_lists[r].size() != inputs.size()) {
      FailArgument(Status(Code::kBufferTooSmall, "allgather_coalesced output list " + std::to_string(r) +
                                                     " has " + std::to_string(output_lists[r].size()) +
                                                     " tensors for " + std::to_string(inputs.size()) + " inputs"));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (Status s = CheckList({output_lists[r][i]}, 1, inputs[i],
                               "allgather_coalesced output list " + std::to_string(r) + " tensor " +
                                   std::to_string(i));
          !s.ok()) {
        FailArgument(s);
      }
    }
    if (Status s = CheckWritableList(output_lists[r], "allgather_coalesced output list " + std::to_string(r));
        !s.ok()) {
      FailArgument(s);
    }
  }
  // The inputs travel as one byte buffer (they may differ in dtype).
  std::vector<at::Tensor> all_outputs;
  for (const auto& list : output_lists) all_outputs.insert(all_outputs.end(), list.begin(), list.end());
  Call call(c10d::OpType::ALLGATHER_COALESCED, all_outputs);
  const ByteLayout layout = LayoutOf(inputs);
  const at::TensorOptions bytes = at::TensorOptions().dtype(at::kByte);
  at::Tensor send = Empty(layout.total, bytes, "allgather_coalesced", "the inputs (packed)");
  for (size_t i = 0; i < inputs.size(); ++i) ByteView(send, layout.offsets[i], inputs[i]).copy_(inputs[i]);
  at::Tensor recv = Empty(TimesOrMax(size_, layout.total), bytes, "allgather_coalesced",
                          "the " + std::to_string(size_) + " ranks' inputs (received packed)");
  const void* sp = send.data_ptr();
  void* rp = recv.data_ptr();
  const size_t n = static_cast<size_t>(layout.total);
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Allgather(sp, rp, n, DataType::kUint8, co); });
  call.Keep(send);
  call.Keep(recv);
  call.Then([recv, layout, output_lists] {
    for (size_t r = 0; r < output_lists.size(); ++r) {
      for (size_t i = 0; i < output_lists[r].size(); ++i) {
        const at::Tensor& o = output_lists[r][i];
        o.copy_(ByteView(recv, static_cast<int64_t>(r) * layout.total + layout.offsets[i], o));
      }
    }
  });
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) try {
  if (inputs.size() != 1) FailArgument(InvalidArgument("gather takes exactly one input tensor"));
  const at::Tensor& in = inputs[0];
  if (Status s = CheckTensor(in, "gather input"); !s.ok()) FailArgument(s);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = rank_ == root;
  if (is_root && outputs.size() != 1) {
    FailArgument(InvalidArgument("gather at the root takes one list of " + std::to_string(size_) +
                                 " output tensors"));
  }
  std::vector<at::Tensor> outs = is_root ? outputs[0] : std::vector<at::Tensor>();
  if (is_root) {
    if (Status s = CheckList(outs, static_cast<size_t>(size_), in, "gather output list"); !s.ok()) FailArgument(s);
    if (Status s = CheckWritableList(outs, "gather output list"); !s.ok()) FailArgument(s);
  }
  Call call(c10d::OpType::GATHER, outs);
  at::Tensor src = Dense(in, "gather", "the input");
  const Elements e = MoveType(in.scalar_type());
  void* recv = nullptr;
  if (is_root) {
    recv = BackToBack(outs);
    if (recv == nullptr || in.numel() == 0) {
      at::Tensor flat = Empty(TimesOrMax(size_, in.numel()), in.options(), "gather",
                              "the " + std::to_string(size_) + " outputs (received together)");
      recv = flat.data_ptr();
      call.Keep(flat);
      call.Then([flat, outs] { Split(flat, 0, outs); });
    } else {
      for (const at::Tensor& o : outs) call.Keep(o);
    }
  }
  const void* send = src.data_ptr();
  const size_t n = Count(src, e);
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Gather(send, recv, n, e.dtype, root, co); });
  call.Keep(src);
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) try {
  if (outputs.size() != 1) FailArgument(InvalidArgument("scatter takes exactly one output tensor"));
  const at::Tensor& out = outputs[0];
  if (Status s = CheckTensor(out, "scatter output"); !s.ok()) FailArgument(s);
  if (Status s = CheckWritable(out, "scatter output"); !s.ok()) FailArgument(s);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = rank_ == root;
  if (is_root && inputs.size() != 1) {
    FailArgument(InvalidArgument("scatter at the root takes one list of " + std::to_string(size_) +
                                 " input tensors"));
  }
  Call call(c10d::OpType::SCATTER, outputs);
  const void* send = nullptr;
  if (is_root) {
    const std::vector<at::Tensor>& ins = inputs[0];
    if (Status s = CheckList(ins, static_cast<size_t>(size_), out, "scatter input list"); !s.ok()) FailArgument(s);
    send = BackToBack(ins);
    if (send == nullptr || out.numel() == 0) {
      at::Tensor flat = Concat(ins, "scatter", "the input list");
      send = flat.data_ptr();
      call.Keep(flat);
    } else {
      for (const at::Tensor& t : ins) call.Keep(t);
    }
  }
  at::Tensor dst = Dense(out, "scatter", "the output");
  const Elements e = MoveType(out.scalar_type());
  void* recv = dst.data_ptr();
  const size_t n = Count(dst, e);
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Scatter(send, recv, n, e.dtype, root, co); });
  call.Keep(dst);
  call.Then(CopyBack(out, dst));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) try {
  if (outputs.size() != 1 || inputs.size() != 1) {
    FailArgument(InvalidArgument("reduce_scatter takes one output tensor and one list of inputs"));
  }
  const at::Tensor& out = outputs[0];
  if (Status s = CheckTensor(out, "reduce_scatter output"); !s.ok()) FailArgument(s);
  if (Status s = CheckWritable(out, "reduce_scatter output"); !s.ok()) FailArgument(s);
  const std::vector<at::Tensor>& ins = inputs[0];
  if (Status s = CheckList(ins, static_cast<size_t>(size_), out, "reduce_scatter input list"); !s.ok()) {
    FailArgument(s);
  }
  auto red = MapReduction(opts.reduceOp, out.scalar_type());
  if (!red.ok()) FailArgument(red.status());
  Call call(c10d::OpType::REDUCE_SCATTER, outputs);
  const void* send = PreMultiplies(*red) ? nullptr : BackToBack(ins);
  if (send == nullptr || out.numel() == 0) {
    at::Tensor flat = Concat(ins, "reduce_scatter", "the input list");
    PreMultiply(*red, flat);
    send = flat.data_ptr();
    call.Keep(flat);
  } else {
    for (const at::Tensor& t : ins) call.Keep(t);
  }
  at::Tensor dst = Dense(out, "reduce_scatter", "the output");
  void* recv = dst.data_ptr();
  const size_t n = static_cast<size_t>(dst.numel());
  const DataType dtype = red->dtype;
  const ReduceOp op = red->op;
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.ReduceScatter(send, recv, n, dtype, op, co); });
  call.Keep(dst);
  call.Then(CopyBack(out, dst));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) try {
  if (Status s = CheckTensor(input, "_reduce_scatter_base input"); !s.ok()) FailArgument(s);
  if (Status s = CheckTensor(output, "_reduce_scatter_base output"); !s.ok()) FailArgument(s);
  if (output.scalar_type() != input.scalar_type() || input.numel() != TimesOrMax(size_, output.numel())) {
    FailArgument(InvalidArgument("_reduce_scatter_base input " + Describe(input) + " must have the dtype of output " +
                                 Describe(output) + " and " + std::to_string(size_) + " times its elements"));
  }
  if (Status s = CheckWritable(output, "_reduce_scatter_base output"); !s.ok()) FailArgument(s);
  auto red = MapReduction(opts.reduceOp, input.scalar_type());
  if (!red.ok()) FailArgument(red.status());
  Call call(c10d::OpType::_REDUCE_SCATTER_BASE, {output});
  at::Tensor src = ReductionInput(input, *red, "_reduce_scatter_base", "the input");
  at::Tensor dst = Dense(output, "_reduce_scatter_base", "the output");
  const void* send = src.data_ptr();
  void* recv = dst.data_ptr();
  const size_t n = static_cast<size_t>(dst.numel());
  const DataType dtype = red->dtype;
  const ReduceOp op = red->op;
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.ReduceScatter(send, recv, n, dtype, op, co); });
  call.Keep(src);
  call.Keep(dst);
  call.Then(CopyBack(output, dst));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_split_sizes,
                                                                std::vector<int64_t>& input_split_sizes,
                                                                const c10d::AllToAllOptions& opts) try {
  if (Status s = CheckTensor(input, "alltoall_base input"); !s.ok()) FailArgument(s);
  if (Status s = CheckTensor(output, "alltoall_base output"); !s.ok()) FailArgument(s);
  if (output.scalar_type() != input.scalar_type()) {
    FailArgument(InvalidArgument("alltoall_base output " + Describe(output) + " and input " + Describe(input) +
                                 " differ in dtype"));
  }
  if (Status s = CheckWritable(output, "alltoall_base output"); !s.ok()) FailArgument(s);
  const Elements e = MoveType(input.scalar_type());
  const bool equal = output_split_sizes.empty() && input_split_sizes.empty();
  std::vector<size_t> send_counts, recv_counts;
  if (equal) {
    if (input.numel() % size_ != 0 || output.numel() != input.numel()) {
      FailArgument(Status(Code::kBufferTooSmall, "alltoall_base with equal splits needs input " + Describe(input) +
                                                     " divisible by " + std::to_string(size_) +
                                                     " ranks and an output " + Describe(output) +
                                                     " of the same number of elements"));
    }
  } else {
    auto sc = SplitCounts(input, input_split_sizes, size_, e, "alltoall_base input");
    if (!sc.ok()) FailArgument(sc.status());
    auto rc = SplitCounts(output, output_split_sizes, size_, e, "alltoall_base output");
    if (!rc.ok()) FailArgument(rc.status());
    send_counts = std::move(sc).value();
    recv_counts = std::move(rc).value();
  }
  Call call(c10d::OpType::ALLTOALL_BASE, {output});
  at::Tensor src = Dense(input, "alltoall_base", "the input");
  at::Tensor dst = Dense(output, "alltoall_base", "the output");
  const void* send = src.data_ptr();
  void* recv = dst.data_ptr();
  const CallOptions co = ToCallOptions(opts.timeout);
  if (equal) {
    const size_t n = Count(src, e) / static_cast<size_t>(size_);
    call.ops.push_back([=](Communicator& c) { return c.Alltoall(send, recv, n, e.dtype, co); });
  } else {
    call.ops.push_back([=](Communicator& c) { return c.AlltoallV(send, send_counts, recv, recv_counts, e.dtype, co); });
  }
  call.Keep(src);
  call.Keep(dst);
  call.Then(CopyBack(output, dst));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) try {
  const auto check = [&](const std::vector<at::Tensor>& ts, const std::string& what) {
    if (ts.size() != static_cast<size_t>(size_)) {
      FailArgument(Status(Code::kBufferTooSmall, "alltoall " + what + " list has " + std::to_string(ts.size()) +
                                                     " tensors for " + std::to_string(size_) + " ranks"));
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::string name = "alltoall " + what + "[" + std::to_string(i) + "]";
      if (Status s = CheckTensor(ts[i], name); !s.ok()) FailArgument(s);
      if (ts[i].scalar_type() != inputs[0].scalar_type()) {
        FailArgument(InvalidArgument(name + " is " + Describe(ts[i]) + " but input[0] is " + Describe(inputs[0]) +
                                     "; every tensor must have the same dtype"));
      }
    }
  };
  if (inputs.empty()) FailArgument(InvalidArgument("alltoall takes one input tensor per rank, got none"));
  check(inputs, "input");
  check(outputs, "output");
  if (Status s = CheckWritableList(outputs, "alltoall output"); !s.ok()) FailArgument(s);
  Call call(c10d::OpType::ALLTOALL, outputs);
  const Elements e = MoveType(inputs[0].scalar_type());
  std::vector<size_t> send_counts, recv_counts;
  for (const at::Tensor& t : inputs) send_counts.push_back(Count(t, e));
  for (const at::Tensor& t : outputs) recv_counts.push_back(Count(t, e));
  const void* send = BackToBack(inputs);
  if (send == nullptr) {
    at::Tensor flat = Concat(inputs, "alltoall", "the input list");
    send = flat.data_ptr();
    call.Keep(flat);
  } else {
    for (const at::Tensor& t : inputs) call.Keep(t);
  }
  void* recv = BackToBack(outputs);
  if (recv == nullptr) {
    int64_t total = 0;
    for (const at::Tensor& t : outputs) total = t.numel() > INT64_MAX - total ? INT64_MAX : total + t.numel();
    at::Tensor flat = Empty(total, outputs[0].options(), "alltoall", "the output list (received together)");
    recv = flat.data_ptr();
    call.Keep(flat);
    call.Then([flat, outputs] { Split(flat, 0, outputs); });
  } else {
    for (const at::Tensor& t : outputs) call.Keep(t);
  }
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) {
    return c.AlltoallV(send, send_counts, recv, recv_counts, e.dtype, co);
  });
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                       int tag) try {
  if (tensors.size() != 1) FailArgument(InvalidArgument("send takes exactly one tensor"));
  const at::Tensor& t = tensors[0];
  if (Status s = CheckTensor(t, "send tensor"); !s.ok()) FailArgument(s);
  Call call(c10d::OpType::SEND, tensors);
  at::Tensor src = Dense(t, "send", "the tensor");
  const Elements e = MoveType(t.scalar_type());
  const void* p = src.data_ptr();
  const size_t n = Count(src, e);
  call.ops.push_back([=](Communicator& c) { return c.Send(p, n, e.dtype, dst_rank, tag); });
  call.Keep(src);
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                       int tag) try {
  if (tensors.size() != 1) FailArgument(InvalidArgument("recv takes exactly one tensor"));
  const at::Tensor& t = tensors[0];
  if (Status s = CheckTensor(t, "recv tensor"); !s.ok()) FailArgument(s);
  if (Status s = CheckWritable(t, "recv tensor"); !s.ok()) FailArgument(s);
  const bool any = src_rank == Communicator::kAnySource;
  Call call(any ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV, tensors);
  call.report_source = true;
  at::Tensor dst = Dense(t, "recv", "the tensor");
  const Elements e = MoveType(t.scalar_type());
  void* p = dst.data_ptr();
  const size_t n = Count(dst, e);
  call.ops.push_back([=](Communicator& c) { return c.Recv(p, n, e.dtype, src_rank, tag); });
  call.Keep(dst);
  call.Then(CopyBack(t, dst));
  return Issue(call);
} catch (const StagingFailed& e) {
  FailArgument(e.status());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return recv(tensors, Communicator::kAnySource, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChoir::barrier(const c10d::BarrierOptions& opts) {
  Call call(c10d::OpType::BARRIER, {});
  const CallOptions co = ToCallOptions(opts.timeout);
  call.ops.push_back([=](Communicator& c) { return c.Barrier(co); });
  return Issue(call);
}

}  // namespace choir::torch_backend
