// ProcessGroupChoir: choir as a torch.distributed (c10d) backend for PyTorch 1.13.
//
// Every c10d call on CPU tensors becomes one (rarely a few) calls on one
// choir::Communicator, created through the store PyTorch hands the backend
// (adapted by TorchStore). Contiguous tensors are handed to choir in place;
// non-contiguous ones, list arguments that choir wants as one buffer, and
// PREMUL_SUM inputs go through a staging buffer that is copied back when the
// operation finishes. Completion is reported through ChoirWork, whose
// getFuture() DDP uses for its gradient buckets.
//
// bool tensors travel as uint8 (0/1). Their reductions are the logical ones:
// SUM and MAX become bitwise or, PRODUCT and MIN bitwise and; AVG and
// PREMUL_SUM are rejected. Data-movement operations (broadcast, gather,
// scatter, allgather, alltoall, send/recv) accept any dtype, moving the bytes
// of types choir does not know (int16, complex...).
//
// Errors: a choir failure becomes a std::runtime_error (a RuntimeError in
// Python) whose message is Status::ToString(), "E401 CollectiveMismatch: ...".
// A bad argument detected here is treated the way choir treats one: the
// communicator is aborted (its peers fail instead of waiting) and the call
// throws; create a new process group to continue. Bad arguments include
// outputs whose elements share memory (expand()ed views: E100, checked before
// communicating) and staging copies torch cannot allocate (E503).
//
// Thread-safety: every method may be called from any thread (DDP issues
// gradient allreduces from its autograd thread). The choir calls of one c10d
// call are issued without interleaving with other threads' calls, so every
// rank sees the same order.
#ifndef CHOIR_INTEGRATIONS_TORCH_PROCESS_GROUP_CHOIR_H_
#define CHOIR_INTEGRATIONS_TORCH_PROCESS_GROUP_CHOIR_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "choir/communicator.h"
#include "choir/status.h"
#include "choir/store.h"

namespace choir::torch_backend {

// The longest timeout used: 1e9 s (31 years), the longest deadline choir
// keeps finite. Longer ones (timedelta(days=30000)) are clamped to it:
// beyond it choir's deadline is "never", which it hands a store as a wait
// of 2^63 ns, and torch's HashStore and FileStore add that to the clock,
// overflow and fail at once.
inline constexpr std::chrono::milliseconds kMaxTimeout{1'000'000'000'000};

// A choir::Store over a c10d::Store (the TCPStore/PrefixStore of
// init_process_group). c10d throws; this adapter returns Statuses instead: a
// c10d timeout becomes StoreTimeout, a lost connection StoreUnreachable.
// Waits longer than kMaxTimeout are clamped to it.
// Thread-safety: as safe as the wrapped store (c10d's TCPStore serializes
// requests internally).
class TorchStore : public Store {
 public:
  // Throws a std::runtime_error "E100 InvalidArgument: store is None ..."
  // for a null store.
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store);

  Status Set(const std::string& key, const std::string& value) override;
  Result<std::string> Get(const std::string& key) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) override;
  Result<bool> Delete(const std::string& key) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<bool> Check(const std::vector<std::string>& keys) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// The c10d Work of one ProcessGroupChoir call. It completes when the choir
// operations behind it have finished and their results have been copied to
// the caller's tensors. Work for an operation that already finished (small
// collectives run inline) costs one allocation and no synchronization
// beyond an uncontended mutex.
// Thread-safety: all methods may be called from any thread.
class ChoirWork : public c10d::Work {
 public:
  ChoirWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  // kNoTimeout waits until the operation finishes (choir's own deadline bounds
  // that); otherwise throws "E400 CollectiveTimeout" after `timeout`.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // A Future of List[Tensor] (the outputs), completed with the Work or
  // failed with the same error. Created on first use.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Records the outcome; called once, by whichever thread finishes the last
  // choir operation.
  void Finish(const Status& status, int source_rank);
  // The choir operations behind this Work, set once before it is returned:
  // wait() waits on them first, which runs them on the waiting thread when
  // the progress thread has not taken them yet (no thread hand-off).
  void SetIssued(std::vector<choir::Work> issued) { issued_ = std::move(issued); }

 private:
  const std::vector<at::Tensor> outputs_;
  std::vector<choir::Work> issued_;
  int source_rank_ = -1;                              // guarded by mutex_
  c10::intrusive_ptr<c10::ivalue::Future> future_;    // guarded by mutex_
};

class ProcessGroupChoir : public c10d::ProcessGroup {
 public:
  // Runs a function that may block for a while (the Python module passes one
  // that releases the GIL around it).
  using BlockingRegion = std::function<void(const std::function<void()>&)>;

  // Joins a communicator of `size` ranks through `store`; `timeout` is the
  // deadline of the rendezvous and the default of every operation (at least
  // 1 ms, else E100; more than kMaxTimeout is clamped). Throws a
  // std::runtime_error carrying the choir error when joining fails (E100 for
  // a null store).
  // `blocking` wraps the destructor's wait for queued operations, whose
  // completion may run callbacks that need a lock the destroying thread
  // holds (a Python future callback needs the GIL).
  ProcessGroupChoir(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout, BlockingRegion blocking = nullptr);
  ~ProcessGroupChoir() override;

  const std::string getBackendName() const override { return "choir"; }
  // The communicator's sticky error, or OK (for tests and diagnostics).
  Status CommunicatorStatus() const { return comm_->status(); }
  // Aborts the communicator: pending and later operations fail at once, on
  // this rank and on its peers.
  void Abort(const std::string& reason) { comm_->Abort(reason); }
  // The algorithm of the most recently finished choir operation, as
  // `choir perf` names it ("cma", "shm_pipe+shared", ...; "" before any).
  std::string LastAlgorithm() const;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  struct Call;  // one c10d call being turned into choir calls

  // Aborts the communicator with `status` (so that peers do not wait for this
  // rank) and throws it.
  [[noreturn]] void FailArgument(const Status& status);
  // Issues `call`'s choir operations as one uninterrupted sequence and returns
  // the Work that tracks them.
  c10::intrusive_ptr<c10d::Work> Issue(Call& call);
  static CallOptions ToCallOptions(std::chrono::milliseconds timeout);

  std::unique_ptr<Communicator> comm_;
  BlockingRegion blocking_;
  struct LastAlgorithmBox {
    std::mutex mu;
    std::string name;  // guarded by mu
  };
  // Shared with the completion callbacks, which may outlive this object.
  std::shared_ptr<LastAlgorithmBox> last_algorithm_ = std::make_shared<LastAlgorithmBox>();
  std::mutex issue_mu_;  // keeps the choir calls of one c10d call together
};

}  // namespace choir::torch_backend

#endif  // CHOIR_INTEGRATIONS_TORCH_PROCESS_GROUP_CHOIR_H_
