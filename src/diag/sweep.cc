// The correctness sweep behind `choir sweep`, `choir probe` and the
// multi-process tests. Expected values come from small integer formulas
// evaluated here in int64/double, never from the library's own kernels.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "algorithms/op.h"
#include "base/clock.h"
#include "choir/selftest.h"
#include "kernels/reduce.h"

namespace choir {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,     DataType::kUint8,   DataType::kInt32,
                                  DataType::kInt64,    DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kFloat32,  DataType::kFloat64};
const char* const kAllOps[] = {"allreduce", "reduce_scatter", "allgather", "allgatherv",
                               "broadcast", "reduce",         "gather",    "scatter",
                               "alltoall",  "alltoallv",      "barrier",   "sendrecv"};

bool IsSigned(DataType t) { return t != DataType::kUint8; }

// Stores an integer-valued number as `t` (integers wrap like C++20 conversions).
void Put(DataType t, void* base, size_t i, double v) {
  auto* p = static_cast<uint8_t*>(base);
  switch (t) {
    case DataType::kInt8: { const auto x = static_cast<int8_t>(static_cast<int64_t>(v)); std::memcpy(p + i, &x, 1); break; }
    case DataType::kUint8: { const auto x = static_cast<uint8_t>(static_cast<int64_t>(v)); std::memcpy(p + i, &x, 1); break; }
    case DataType::kInt32: { const auto x = static_cast<int32_t>(static_cast<int64_t>(v)); std::memcpy(p + 4 * i, &x, 4); break; }
    case DataType::kInt64: { const auto x = static_cast<int64_t>(v); std::memcpy(p + 8 * i, &x, 8); break; }
    case DataType::kFloat16: { const uint16_t x = kernels::FloatToHalf(static_cast<float>(v)); std::memcpy(p + 2 * i, &x, 2); break; }
    case DataType::kBFloat16: { const uint16_t x = kernels::FloatToBFloat16(static_cast<float>(v)); std::memcpy(p + 2 * i, &x, 2); break; }
    case DataType::kFloat32: { const auto x = static_cast<float>(v); std::memcpy(p + 4 * i, &x, 4); break; }
    case DataType::kFloat64: { std::memcpy(p + 8 * i, &v, 8); break; }
  }
}

double Get(DataType t, const void* base, size_t i) {
  const auto* p = static_cast<const uint8_t*>(base);
  switch (t) {
    case DataType::kInt8: { int8_t x; std::memcpy(&x, p + i, 1); return x; }
    case DataType::kUint8: { uint8_t x; std::memcpy(&x, p + i, 1); return x; }
    case DataType::kInt32: { int32_t x; std::memcpy(&x, p + 4 * i, 4); return x; }
    case DataType::kInt64: { int64_t x; std::memcpy(&x, p + 8 * i, 8); return static_cast<double>(x); }
    case DataType::kFloat16: { uint16_t x; std::memcpy(&x, p + 2 * i, 2); return kernels::HalfToFloat(x); }
    case DataType::kBFloat16: { uint16_t x; std::memcpy(&x, p + 2 * i, 2); return kernels::BFloat16ToFloat(x); }
    case DataType::kFloat32: { float x; std::memcpy(&x, p + 4 * i, 4); return x; }
    case DataType::kFloat64: { double x; std::memcpy(&x, p + 8 * i, 8); return x; }
  }
  return 0;
}

// Input of rank r at element i for a reduction with `op`.
int64_t ReduceInput(ReduceOp op, DataType t, int r, size_t i) {
  const int64_t k = static_cast<int64_t>(r) * 7 + static_cast<int64_t>(i % 1000003) * 3 + 1;
  switch (op) {
    case ReduceOp::kProd: {
      const int64_t v = k % 3;  // {0,1,2} -> {-1 or 1, 1, 2}
      return v == 0 ? (IsSigned(t) ? -1 : 1) : v;
    }
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      return (static_cast<int64_t>(r) * 37 + static_cast<int64_t>(i % 1000003) * 11) & 0x7f;
    default:
      return IsSigned(t) ? k % 11 - 5 : k % 11;
  }
}

// Input for data-movement collectives: distinct per (rank, block, element).
int64_t MoveValue(DataType t, int r, int b, size_t j) {
  const int64_t k = static_cast<int64_t>(r) * 31 + static_cast<int64_t>(b) * 7 + static_cast<int64_t>(j % 1000003);
  return IsSigned(t) ? k % 97 - 48 : k % 97;
}

// The reduction over ranks 0..n-1 of ReduceInput, as the dtype would hold it.
double Expected(ReduceOp op, DataType t, int n, size_t i) {
  int64_t acc = ReduceInput(op, t, 0, i);
  for (int r = 1; r < n; ++r) {
    const int64_t v = ReduceInput(op, t, r, i);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kBand: acc &= v; break;
      case ReduceOp::kBor: acc |= v; break;
      case ReduceOp::kBxor: acc ^= v; break;
    }
  }
  if (op == ReduceOp::kAvg) {
    if (!IsFloatingPoint(t)) {
      // Integer types wrap before dividing, like the sum the library computes.
      uint8_t tmp[8];
      Put(t, tmp, 0, static_cast<double>(acc));
      return std::trunc(Get(t, tmp, 0) / n);
    }
    return static_cast<double>(acc) / n;
  }
  uint8_t tmp[8];
  Put(t, tmp, 0, static_cast<double>(acc));  // apply the dtype's wrap-around
  return Get(t, tmp, 0);
}

// Accepted error: exact except for avg on floating types (one rounding of the
// quotient in the element type: half an ulp, doubled for safety).
bool Close(DataType t, ReduceOp op, double got, double want) {
  if (got == want) return true;
  if (op != ReduceOp::kAvg || !IsFloatingPoint(t)) return false;
  const double rel = t == DataType::kFloat16 ? 1.0 / 1024 : t == DataType::kBFloat16 ? 1.0 / 128
                     : t == DataType::kFloat32 ? 1.2e-7 : 2.3e-16;
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

std::vector<ReduceOp> OpsFor(DataType t, bool all) {
  if (!all) return {ReduceOp::kSum};
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  if (!IsFloatingPoint(t)) {
    ops.insert(ops.end(), {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor});
  }
  return ops;
}

// A case's buffer: heap memory, or a SharedBuffer; filled with 0xA5.
class CaseBuffer {
 public:
  static Result<CaseBuffer> Make(size_t bytes, bool shared) {
    CaseBuffer b;
    if (shared) {
      auto s = SharedBuffer::Allocate(bytes);
      if (!s.ok()) return s.status();
      b.shared_ = std::move(*s);
      b.data_ = b.shared_.as<uint8_t>();
    } else {
      b.heap_.resize(bytes);
      b.data_ = b.heap_.data();
    }
    std::memset(b.data_, 0xA5, bytes);
    return b;
  }
  uint8_t* data() const { return data_; }

 private:
  std::vector<uint8_t> heap_;
  SharedBuffer shared_;
  uint8_t* data_ = nullptr;
};

// One case: runs the collective on this rank, then checks the output.
struct Runner {
  Communicator& comm;
  CallOptions call;
  int rank;
  int n;
  bool shared_buffers;

  // Fills, runs and verifies; returns the collective's status and sets *error on a wrong value.
  Status Case(const std::string& op, DataType t, ReduceOp rop, size_t count, bool in_place,
              int case_index, int root, std::string* error, std::string* algorithm, double* seconds) {
    const size_t es = DataTypeSize(t);
    Status alloc;
    auto bytes = [&](size_t elems) {
      auto b = CaseBuffer::Make(std::max<size_t>(elems, 1) * es, shared_buffers);
      if (!b.ok()) {
        if (alloc.ok()) alloc = b.status();
        return CaseBuffer::Make(std::max<size_t>(elems, 1) * es, false).value();
      }
      return std::move(b).value();
    };
    auto mismatch = [&](size_t i, double got, double want) {
      if (error->empty()) {
        *error = fmt::format("element {}: got {} expected {}", i, got, want);
      }
    };
    Work work;
    const int64_t start = NowNanos();
    auto finish = [&]() -> Status {
      Status s = work.Wait();
      *seconds = static_cast<double>(NowNanos() - start) * 1e-9;
      *algorithm = work.info().algorithm;
      // A SharedBuffer that could not be had: the case ran on the heap
      // (every rank still runs every collective) and counts as failed.
      if (!alloc.ok() && error->empty()) *error = "SharedBuffer::Allocate: " + alloc.ToString();
      return s;
    };

    if (op == "allreduce") {
      auto send = bytes(count), recv = bytes(count);
      for (size_t i = 0; i < count; ++i) Put(t, (in_place ? recv : send).data(), i, static_cast<double>(ReduceInput(rop, t, rank, i)));
      work = comm.Allreduce(in_place ? recv.data() : send.data(), recv.data(), count, t, rop, call);
      CHOIR_RETURN_IF_ERROR(finish());
      for (size_t i = 0; i < count; ++i) {
        const double want = Expected(rop, t, n, i), got = Get(t, recv.data(), i);
        if (!Close(t, rop, got, want)) mismatch(i, got, want);
      }
    } else if (op == "reduce_scatter") {
      auto send = bytes(count * n), recv = bytes(count);
      for (size_t i = 0; i < count * n; ++i) Put(t, send.data(), i, static_cast<double>(ReduceInput(rop, t, rank, i)));
      uint8_t* out = in_place ? send.data() + static_cast<size_t>(rank) * count * es : recv.data();
      work = comm.ReduceScatter(send.data(), out, count, t, rop, call);
      CHOIR_RETURN_IF_ERROR(finish());
      for (size_t j = 0; j < count; ++j) {
        const double want = Expected(rop, t, n, static_cast<size_t>(rank) * count + j), got = Get(t, out, j);
        if (!Close(t, rop, got, want)) mismatch(j, got, want);
      }
    } else if (op == "allgather" || op == "allgatherv") {
      std::vector<size_t> counts(static_cast<size_t>(n), count);
      if (op == "allgatherv") {
        for (int b = 0; b < n; ++b) counts[static_cast<size_t>(b)] = b % 3 == 0 ? 0 : count + static_cast<size_t>(b);
      }
      std::vector<size_t> offsets(static_cast<size_t>(n), 0);
      for (int b = 1; b < n; ++b) offsets[static_cast<size_t>(b)] = offsets[static_cast<size_t>(b - 1)] + counts[static_cast<size_t>(b - 1)];
      const size_t total = offsets.back() + counts.back();
      const size_t mine = counts[static_cast<size_t>(rank)];
      auto send = bytes(mine), recv = bytes(total);
      uint8_t* in = in_place ? recv.data() + offsets[static_cast<size_t>(rank)] * es : send.data();
      for (size_t j = 0; j < mine; ++j) Put(t, in, j, static_cast<double>(MoveValue(t, rank, 0, j)));
      work = op == "allgather" ? comm.Allgather(in, recv.data(), count, t, call)
                               : comm.AllgatherV(in, mine, recv.data(), counts, t, call);
      CHOIR_RETURN_IF_ERROR(finish());
      for (int b = 0; b < n; ++b) {
        for (size_t j = 0; j < counts[static_cast<size_t>(b)]; ++j) {
          const size_t i = offsets[static_cast<size_t>(b)] + j;
          const double want = static_cast<double>(MoveValue(t, b, 0, j)), got = Get(t, recv.data(), i);
          if (got != want) mismatch(i, got, want);
        }
      }
    } else if (op == "broadcast") {
      auto send = bytes(count), recv = bytes(count);
      uint8_t* src = in_place ? recv.data() : send.data();
      if (rank == root) {
        for (size_t j = 0; j < count; ++j) Put(t, src, j, static_cast<double>(MoveValue(t, root, 1, j)));
      }
      work = comm.Broadcast(src, recv.data(), count, t, root, call);
      CHOIR_RETURN_IF_ERROR(finish());
      for (size_t j = 0; j < count; ++j) {
        const double want = static_cast<double>(MoveValue(t, root, 1, j)), got = Get(t, recv.data(), j);
        if (got != want) mismatch(j, got, want);
      }
    } else if (op == "reduce") {
      auto send = bytes(count), recv = bytes(count);
      uint8_t* in = in_place && rank == root ? recv.data() : send.data();
      for (size_t i = 0; i < count; ++i) Put(t, in, i, static_cast<double>(ReduceInput(rop, t, rank, i)));
      work = comm.Reduce(in, recv.data(), count, t, rop, root, call);
      CHOIR_RETURN_IF_ERROR(finish());
      if (rank == root) {
        for (size_t i = 0; i < count; ++i) {
          const double want = Expected(rop, t, n, i), got = Get(t, recv.data(), i);
          if (!Close(t, rop, got, want)) mismatch(i, got, want);
        }
      }
    } else if (op == "gather") {
      auto send = bytes(count), recv = bytes(count * n);
      uint8_t* in = in_place && rank == root ? recv.data() + static_cast<size_t>(root) * count * es : send.data();
      for (size_t j = 0; j < count; ++j) Put(t, in, j, static_cast<double>(MoveValue(t, rank, 2, j)));
      work = comm.Gather(in, recv.data(), count, t, root, call);
      CHOIR_RETURN_IF_ERROR(finish());
      if (rank == root) {
        for (int b = 0; b < n; ++b) {
          for (size_t j = 0; j < count; ++j) {
            const size_t i = static_cast<size_t>(b) * count + j;
            const double want = static_cast<double>(MoveValue(t, b, 2, j)), got = Get(t, recv.data(), i);
            if (got != want) mismatch(i, got, want);
          }
        }
      }
    } else if (op == "scatter") {
      auto send = bytes(count * n), recv = bytes(count);
      if (rank == root) {
        for (size_t i = 0; i < count * n; ++i) Put(t, send.data(), i, static_cast<double>(MoveValue(t, root, 3, i)));
      }
      uint8_t* out = in_place && rank == root ? send.data() + static_cast<size_t>(root) * count * es : recv.data();
      work = comm.Scatter(send.data(), out, count, t, root, call);
      CHOIR_RETURN_IF_ERROR(finish());
      for (size_t j = 0; j < count; ++j) {
        const double want = static_cast<double>(MoveValue(t, root, 3, static_cast<size_t>(rank) * count + j));
        const double got = Get(t, out, j);
        if (got != want) mismatch(j, got, want);
      }
    } else if (op == "alltoall" || op == "alltoallv") {
      // Split sizes are symmetric (S(a,b) = S(b,a)) so that in-place works for v too.
      auto split = [&](int a, int b) -> size_t {
        return op == "alltoall" ? count : (count + static_cast<size_t>(a + b)) % (count + 4);
      };
      std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
      for (int b = 0; b < n; ++b) {
        sc[static_cast<size_t>(b)] = split(rank, b);
        rc[static_cast<size_t>(b)] = split(b, rank);
      }
      size_t stotal = 0, rtotal = 0;
      for (int b = 0; b < n; ++b) {
        stotal += sc[static_cast<size_t>(b)];
        rtotal += rc[static_cast<size_t>(b)];
      }
      auto send = bytes(stotal), recv = bytes(rtotal);
      uint8_t* in = in_place ? recv.data() : send.data();
      for (int b = 0, off = 0; b < n; off += static_cast<int>(sc[static_cast<size_t>(b)]), ++b) {
        for (size_t j = 0; j < sc[static_cast<size_t>(b)]; ++j) Put(t, in, static_cast<size_t>(off) + j, static_cast<double>(MoveValue(t, rank, b, j)));
      }
      work = op == "alltoall" ? comm.Alltoall(in, recv.data(), count, t, call)
                              : comm.AlltoallV(in, sc, recv.data(), rc, t, call);
      CHOIR_RETURN_IF_ERROR(finish());
      for (int b = 0, off = 0; b < n; off += static_cast<int>(rc[static_cast<size_t>(b)]), ++b) {
        for (size_t j = 0; j < rc[static_cast<size_t>(b)]; ++j) {
          const double want = static_cast<double>(MoveValue(t, b, rank, j));
          const double got = Get(t, recv.data(), static_cast<size_t>(off) + j);
          if (got != want) mismatch(static_cast<size_t>(off) + j, got, want);
        }
      }
    } else if (op == "barrier") {
      work = comm.Barrier(call);
      CHOIR_RETURN_IF_ERROR(finish());
    } else if (op == "sendrecv") {
      if (n == 1) return Status::Ok();
      auto send = bytes(count), recv = bytes(count);
      for (size_t j = 0; j < count; ++j) Put(t, send.data(), j, static_cast<double>(MoveValue(t, rank, 4, j)));
      const int to = (rank + 1) % n, from = (rank + n - 1) % n;
      const bool any = case_index % 2 == 1;
      const int tag = 7 + case_index % 5;
      Work s, r;
      if (rank % 2 == 0) {
        s = comm.Send(send.data(), count, t, to, tag, call);
        r = comm.Recv(recv.data(), count, t, any ? Communicator::kAnySource : from, tag, call);
      } else {
        r = comm.Recv(recv.data(), count, t, any ? Communicator::kAnySource : from, tag, call);
        s = comm.Send(send.data(), count, t, to, tag, call);
      }
      CHOIR_RETURN_IF_ERROR(s.Wait());
      work = r;
      CHOIR_RETURN_IF_ERROR(finish());
      const int source = r.info().source_rank;
      if (source != from) *error = fmt::format("message came from rank {}, expected {}", source, from);
      for (size_t j = 0; j < count; ++j) {
        const double want = static_cast<double>(MoveValue(t, from, 4, j)), got = Get(t, recv.data(), j);
        if (got != want) mismatch(j, got, want);
      }
    } else {
      return InvalidArgument("unknown sweep op '" + op + "'");
    }
    return Status::Ok();
  }
};

}  // namespace

Result<std::vector<SweepCase>> RunSweep(Communicator& comm, const SweepOptions& options) {
  std::vector<std::string> ops = options.ops;
  if (ops.empty()) ops.assign(std::begin(kAllOps), std::end(kAllOps));
  for (const auto& op : ops) {
    if (std::find(std::begin(kAllOps), std::end(kAllOps), op) == std::end(kAllOps)) {
      return InvalidArgument("unknown sweep op '" + op + "'");
    }
  }
  if (options.root < -1 || options.root >= comm.size()) {
    return InvalidArgument(fmt::format("SweepOptions::root {} is not a rank of this communicator: give 0 to {}, "
                                       "or -1 to take the ranks in turn",
                                       options.root, comm.size() - 1));
  }
  std::vector<DataType> dtypes = options.dtypes;
  if (dtypes.empty()) dtypes.assign(std::begin(kAllTypes), std::end(kAllTypes));
  Runner runner{comm, CallOptions{options.timeout, options.algorithm}, comm.rank(), comm.size(), options.shared_buffers};
  std::vector<SweepCase> cases;
  int case_index = 0;
  for (const std::string& op : ops) {
    const bool reduces = op == "allreduce" || op == "reduce_scatter" || op == "reduce";
    const bool has_in_place = op != "barrier" && op != "sendrecv";
    algorithms::CollKind kind{};
    const bool rooted = algorithms::ParseCollKind(op, &kind) && algorithms::IsRooted(kind);
    for (DataType t : dtypes) {
      std::vector<ReduceOp> rops = reduces ? OpsFor(t, options.all_reduce_ops) : std::vector<ReduceOp>{ReduceOp::kSum};
      if (reduces && !options.reduce_ops.empty()) {
        rops.clear();
        for (ReduceOp r : options.reduce_ops) {
          if (CheckReduceSupported(t, r).ok()) rops.push_back(r);
        }
      }
      for (ReduceOp rop : rops) {
        for (size_t count : options.counts) {
          // 0 out of place, 1 in place: out of place alone when an op has
          // no in-place form or neither placement is asked for.
          const bool in_place = options.in_place && has_in_place;
          const int first = in_place && !options.out_of_place ? 1 : 0, last = in_place ? 1 : 0;
          for (int placement = first; placement <= last; ++placement) {
            SweepCase c;
            c.op = op;
            c.dtype = DataTypeName(t);
            c.reduce_op = reduces ? ReduceOpName(rop) : "";
            c.count = count;
            c.in_place = placement == 1;
            const int root = options.root >= 0 ? options.root : case_index % comm.size();
            if (rooted) c.root = root;
            Status s =
                runner.Case(op, t, rop, count, c.in_place, case_index++, root, &c.error, &c.algorithm, &c.seconds);
            if (!s.ok()) return s;
            // Agree across ranks: the case is ok only if it is ok everywhere.
            int32_t ok = c.error.empty() ? 1 : 0, all_ok = 0;
            CHOIR_RETURN_IF_ERROR(comm.Allreduce(&ok, &all_ok, 1, DataType::kInt32, ReduceOp::kMin,
                                                 CallOptions{options.timeout, ""}).Wait());
            c.ok = all_ok == 1;
            if (!c.ok && c.error.empty()) c.error = "wrong values on another rank";
            cases.push_back(std::move(c));
            if (!cases.back().ok && options.stop_on_failure) return cases;
            if (op == "barrier") break;
          }
          if (op == "barrier") break;
        }
        if (op == "barrier") break;
      }
      if (op == "barrier") break;
    }
  }
  return cases;
}

}  // namespace choir
