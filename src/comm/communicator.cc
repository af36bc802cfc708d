// The public Communicator: turns each call into OpArgs, checks the arguments
// that can be checked locally, and hands the operation to CommImpl.
#include "choir/communicator.h"

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <optional>
#include <span>

#include "base/socket.h"
#include "base/strings.h"
#include "comm/comm_impl.h"
#include "params/params.h"
#include "topology/build.h"

namespace choir {

using algorithms::CollKind;
using algorithms::OpArgs;

namespace comm {
namespace {

// No address space in use (x86-64 with 5-level paging: 2^56 bytes) holds a
// larger buffer.
constexpr size_t kMaxBufferBytes = size_t{1} << 56;

// The sum of `counts`, or nothing when it overflows.
std::optional<size_t> CheckedSum(std::span<const size_t> counts) {
  size_t sum = 0;
  for (size_t c : counts) {
    if (__builtin_add_overflow(sum, c, &sum)) return std::nullopt;
  }
  return sum;
}

}  // namespace

Status CommImpl::Validate(const OpArgs& a) const {
  const size_t es = DataTypeSize(a.dtype);
  if (es == 0) {
    return Status(Code::kUnsupportedOp, fmt::format("data type value {} is not a choir DataType",
                                                    static_cast<int>(a.dtype)));
  }
  if (a.reduces()) CHOIR_RETURN_IF_ERROR(CheckReduceSupported(a.dtype, a.op));
  if (algorithms::IsRooted(a.kind) && (a.root < 0 || a.root >= size_)) {
    return Status(Code::kInvalidRank, fmt::format("root {} is outside [0, {})", a.root, size_));
  }
  if (a.kind == CollKind::kSend || a.kind == CollKind::kRecv) {
    const bool any = a.kind == CollKind::kRecv && a.peer == Communicator::kAnySource;
    if (!any && (a.peer < 0 || a.peer >= size_)) {
      return Status(Code::kInvalidRank, fmt::format("peer {} is outside [0, {})", a.peer, size_));
    }
    if (a.peer == rank_) {
      return Status(Code::kInvalidRank, fmt::format("rank {} cannot send to or receive from itself", rank_));
    }
    if (a.tag < 0) return InvalidArgument(fmt::format("tag {} is negative", a.tag));
  }
  const bool vcounts = a.kind == CollKind::kAllgatherV || a.kind == CollKind::kAlltoallV;
  if (vcounts && a.recv_counts.size() != static_cast<size_t>(size_)) {
    return Status(Code::kBufferTooSmall, fmt::format("recv_counts has {} entries; the communicator has {} ranks",
                                                     a.recv_counts.size(), size_));
  }
  if (a.kind == CollKind::kAlltoallV && a.send_counts.size() != static_cast<size_t>(size_)) {
    return Status(Code::kBufferTooSmall, fmt::format("send_counts has {} entries; the communicator has {} ranks",
                                                     a.send_counts.size(), size_));
  }
  if (a.kind == CollKind::kAllgatherV && a.count != a.recv_counts[static_cast<size_t>(rank_)]) {
    return Status(Code::kBufferTooSmall,
                  fmt::format("send_count {} differs from recv_counts[{}] = {}", a.count, rank_,
                              a.recv_counts[static_cast<size_t>(rank_)]));
  }
  if (a.kind == CollKind::kAlltoallV &&
      a.send_counts[static_cast<size_t>(rank_)] != a.recv_counts[static_cast<size_t>(rank_)]) {
    // The block a rank keeps for itself: no peer can disagree about it.
    return Status(Code::kBufferTooSmall,
                  fmt::format("send_counts[{}] = {} differs from recv_counts[{}] = {} (the block this rank keeps)",
                              rank_, a.send_counts[static_cast<size_t>(rank_)], rank_,
                              a.recv_counts[static_cast<size_t>(rank_)]));
  }
  if (a.kind == CollKind::kAlltoallV && a.send == a.recv && a.send_counts != a.recv_counts) {
    return InvalidArgument("in-place AlltoallV needs send_counts equal to recv_counts");
  }
  // Element counts that overflow a byte count, or describe more memory than
  // any address space holds.
  const std::optional<size_t> recv_v = CheckedSum(a.recv_counts), send_v = CheckedSum(a.send_counts);
  // Element sizes are powers of two: a shift, not a second division.
  const size_t limit = (kMaxBufferBytes / static_cast<size_t>(size_)) >> std::countr_zero(es);
  if (a.count > limit || !recv_v || !send_v || *recv_v > limit || *send_v > limit) {
    return InvalidArgument(fmt::format("the counts describe more {} elements than any address space holds "
                                       "(all ranks' blocks together must stay under {}); check the counts",
                                       DataTypeName(a.dtype), strings::FormatBytes(kMaxBufferBytes)));
  }
  // Buffers each rank needs (nullptr allowed only where the count is zero or
  // the rank ignores it), and where an in-place call puts its send buffer in
  // its receive buffer (the only overlap allowed: `in_place_send`).
  const bool root = a.root == rank_;
  const auto n = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
  size_t send_elems = a.count, recv_elems = a.count;
  const char* in_place = "send == recv";
  const auto s0 = reinterpret_cast<uintptr_t>(a.send), r0 = reinterpret_cast<uintptr_t>(a.recv);
  uintptr_t in_place_send = r0;
  switch (a.kind) {
    case CollKind::kReduceScatter:
      send_elems = a.count * n;
      in_place = "recv is this rank's block of send";
      in_place_send = r0 - me * a.count * es;
      break;
    case CollKind::kAllgather:
      recv_elems = a.count * n;
      in_place = "send is this rank's block of recv";
      in_place_send += me * a.count * es;
      break;
    case CollKind::kAllgatherV:
      recv_elems = *recv_v;
      in_place = "send is this rank's block of recv";
      in_place_send += *CheckedSum(std::span(a.recv_counts).first(me)) * es;
      break;
    case CollKind::kBroadcast: send_elems = root ? a.count : 0; break;
    case CollKind::kReduce: recv_elems = root ? a.count : 0; break;
    case CollKind::kGather:
      recv_elems = root ? a.count * n : 0;
      in_place = "send is the root's block of recv";
      in_place_send += me * a.count * es;
      break;
    case CollKind::kScatter:
      send_elems = root ? a.count * n : 0;
      in_place = "recv is the root's block of send";
      in_place_send = r0 - me * a.count * es;
      break;
    case CollKind::kAlltoall: send_elems = recv_elems = a.count * n; break;
    case CollKind::kAlltoallV:
      send_elems = *send_v;
      recv_elems = *recv_v;
      break;
    case CollKind::kSend: recv_elems = 0; break;
    case CollKind::kRecv: send_elems = 0; break;
    case CollKind::kBarrier: send_elems = recv_elems = 0; break;
    default: break;
  }
  if (send_elems > 0 && a.send == nullptr) {
    return Status(Code::kNullBuffer, fmt::format("send buffer is null but {} elements are to be sent", send_elems));
  }
  if (recv_elems > 0 && a.recv == nullptr) {
    return Status(Code::kNullBuffer, fmt::format("receive buffer is null but {} elements are expected", recv_elems));
  }
  // Overlapping buffers that are not the in-place layout: the algorithms
  // would read what they already overwrote, here and on the peers.
  const size_t send_bytes = send_elems * es, recv_bytes = recv_elems * es;
  if (send_bytes > 0 && recv_bytes > 0 && s0 < r0 + recv_bytes && r0 < s0 + send_bytes &&
      s0 != in_place_send) {
    return InvalidArgument(fmt::format(
        "send [{}, +{} B) and recv [{}, +{} B) overlap but the call is not in place (for {}, in place means {}); "
        "use separate buffers or the in-place layout",
        a.send, send_bytes, a.recv, recv_bytes, algorithms::CollKindName(a.kind), in_place));
  }
  return Status::Ok();
}

}  // namespace comm

Communicator::Communicator(std::unique_ptr<comm::CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

Result<std::unique_ptr<Communicator>> Communicator::Create(std::shared_ptr<Store> store, int rank,
                                                           int size, const CommOptions& options) {
  CHOIR_ASSIGN_OR_RETURN(auto impl, comm::CommImpl::Create(std::move(store), rank, size, options));
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Result<std::unique_ptr<Communicator>> Communicator::FromEnvironment(const CommOptions& options) {
  CHOIR_RETURN_IF_ERROR(params::CheckAll());
  const int64_t rank = params::GetInt(params::Id::kRank);
  const int64_t size = params::GetInt(params::Id::kWorldSize);
  if (size < 1 || size > topology::kMaxWorldSize) {
    return Status(Code::kInvalidWorldSize,
                  fmt::format("WORLD_SIZE is {} (from {}); it must be 1 to {}: start ranks with `choir run -n N` "
                              "or export WORLD_SIZE",
                              size, SettingSourceName(params::GetSource(params::Id::kWorldSize)),
                              topology::kMaxWorldSize));
  }
  const bool rank_fits = rank >= 0 && rank < size;
  const Status bad_rank = rank_fits ? Status::Ok()
                                    : Status(Code::kInvalidRank, fmt::format("RANK is {} but WORLD_SIZE is {}",
                                                                             rank, size));
  // RANK unset (-1) is not a rank of this job; a rank beyond WORLD_SIZE
  // (another world size than its peers') tells them through the store
  // before it returns its error, since they would wait for the rank missing.
  if (rank < 0) return bad_rank;
  std::string host = params::GetString(params::Id::kMasterAddr);
  int port = static_cast<int>(params::GetInt(params::Id::kMasterPort)) + 1;
  const std::string addr = params::GetString(params::Id::kStoreAddr);
  if (!addr.empty()) {
    CHOIR_RETURN_IF_ERROR(net::SplitHostPort(addr, &host, &port).WithContext("CHOIR_STORE_ADDR"));
  } else if (port > 65535) {
    return Status(Code::kInvalidSetting,
                  "MASTER_PORT=65535 leaves no port for the choir store (MASTER_PORT + 1); use a lower "
                  "MASTER_PORT or set CHOIR_STORE_ADDR");
  }
  TcpStoreClientOptions so;
  so.host = host;
  so.port = port;
  so.job_id = options.job_id.empty() ? params::GetString(params::Id::kJobId) : options.job_id;
  so.rank = static_cast<int>(rank);
  so.timeout = options.timeout.count() > 0
                   ? options.timeout
                   : std::chrono::milliseconds(static_cast<int64_t>(params::GetSeconds(params::Id::kTimeout) * 1000));
  if (!rank_fits) so.timeout = std::min<std::chrono::milliseconds>(so.timeout, std::chrono::seconds(2));
  auto store = ConnectTcpStore(so);
  if (!store.ok()) {
    if (!rank_fits) return bad_rank;
    return store.status().WithContext(fmt::format("rank {} connecting to the rendezvous store at {}:{}", rank, host, port));
  }
  if (!rank_fits) {
    (void)Create(*store, static_cast<int>(rank), static_cast<int>(size), options);  // fails, and reports it
    return bad_rank;
  }
  return Create(*store, static_cast<int>(rank), static_cast<int>(size), options);
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
Status Communicator::status() const { return impl_->sticky(); }
const std::string& Communicator::name() const { return impl_->config().name; }
const Topology& Communicator::topology() const { return impl_->topology(); }

namespace {
OpArgs Make(CollKind kind, const void* send, void* recv, size_t count, DataType dtype) {
  OpArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  return a;
}
}  // namespace

Work Communicator::Allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                             const CallOptions& options) {
  OpArgs a = Make(CollKind::kAllreduce, send, recv, count, dtype);
  a.op = op;
  return impl_->Submit(std::move(a), options);
}

Work Communicator::ReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                                 ReduceOp op, const CallOptions& options) {
  OpArgs a = Make(CollKind::kReduceScatter, send, recv, recv_count, dtype);
  a.op = op;
  return impl_->Submit(std::move(a), options);
}

Work Communicator::Allgather(const void* send, void* recv, size_t send_count, DataType dtype,
                             const CallOptions& options) {
  return impl_->Submit(Make(CollKind::kAllgather, send, recv, send_count, dtype), options);
}

Work Communicator::AllgatherV(const void* send, size_t send_count, void* recv,
                              std::span<const size_t> recv_counts, DataType dtype,
                              const CallOptions& options) {
  OpArgs a = Make(CollKind::kAllgatherV, send, recv, send_count, dtype);
  a.recv_counts.assign(recv_counts.begin(), recv_counts.end());
  return impl_->Submit(std::move(a), options);
}

Work Communicator::Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                             const CallOptions& options) {
  OpArgs a = Make(CollKind::kBroadcast, send, recv, count, dtype);
  a.root = root;
  return impl_->Submit(std::move(a), options);
}

Work Communicator::Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                          int root, const CallOptions& options) {
  OpArgs a = Make(CollKind::kReduce, send, recv, count, dtype);
  a.op = op;
  a.root = root;
  return impl_->Submit(std::move(a), options);
}

Work Communicator::Gather(const void* send, void* recv, size_t send_count, DataType dtype, int root,
                          const CallOptions& options) {
  OpArgs a = Make(CollKind::kGather, send, recv, send_count, dtype);
  a.root = root;
  return impl_->Submit(std::move(a), options);
}

Work Communicator::Scatter(const void* send, void* recv, size_t recv_count, DataType dtype, int root,
                           const CallOptions& options) {
  OpArgs a = Make(CollKind::kScatter, send, recv, recv_count, dtype);
  a.root = root;
  return impl_->Submit(std::move(a), options);
}

Work Communicator::Alltoall(const void* send, void* recv, size_t count, DataType dtype,
                            const CallOptions& options) {
  return impl_->Submit(Make(CollKind::kAlltoall, send, recv, count, dtype), options);
}

Work Communicator::AlltoallV(const void* send, std::span<const size_t> send_counts, void* recv,
                             std::span<const size_t> recv_counts, DataType dtype,
                             const CallOptions& options) {
  OpArgs a = Make(CollKind::kAlltoallV, send, recv, 0, dtype);
  a.send_counts.assign(send_counts.begin(), send_counts.end());
  a.recv_counts.assign(recv_counts.begin(), recv_counts.end());
  return impl_->Submit(std::move(a), options);
}

Work Communicator::Barrier(const CallOptions& options) {
  return impl_->Submit(Make(CollKind::kBarrier, nullptr, nullptr, 0, DataType::kUint8), options);
}

Work Communicator::Send(const void* buf, size_t count, DataType dtype, int peer, int tag,
                        const CallOptions& options) {
  OpArgs a = Make(CollKind::kSend, buf, nullptr, count, dtype);
  a.peer = peer;
  a.tag = tag;
  return impl_->Submit(std::move(a), options);
}

Work Communicator::Recv(void* buf, size_t count, DataType dtype, int peer, int tag,
                        const CallOptions& options) {
  OpArgs a = Make(CollKind::kRecv, nullptr, buf, count, dtype);
  a.peer = peer;
  a.tag = tag;
  return impl_->Submit(std::move(a), options);
}

Result<std::unique_ptr<Communicator>> Communicator::Split(int color, int key, const CommOptions& options) {
  CHOIR_ASSIGN_OR_RETURN(auto child, impl_->Split(color, key, options));
  if (child == nullptr) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(new Communicator(std::move(child)));
}

void Communicator::Abort(const std::string& reason) { impl_->Abort(reason); }

}  // namespace choir
