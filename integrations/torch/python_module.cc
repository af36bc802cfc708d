// choir.torch._C: the pybind11 module exposing ProcessGroupChoir to Python.
//
// torch must be imported before this module (the Python package does it):
// the ProcessGroup base class is registered by torch's own bindings.
#include <c10/core/CPUAllocator.h>
#include <pthread.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "choir/shared_buffer.h"
#include "choir/status.h"
#include "choir/version.h"
#include "process_group_choir.h"

namespace py = pybind11;

namespace choir::torch_backend {
namespace {

std::chrono::milliseconds ToMillis(std::chrono::duration<double> timeout) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
}

// Releases the GIL around `f` when this thread holds it: the destructor of a
// process group waits for operations whose Python future callbacks need it.
void WithoutGil(const std::function<void()>& f) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release release;
    f();
  } else {
    f();
  }
}

py::dict ErrorInfoDict(const ErrorInfo& info) {
  py::dict d;
  d["code"] = "E" + std::to_string(info.number);
  d["number"] = info.number;
  d["name"] = info.name;
  d["retryable"] = info.retryable;
  d["summary"] = info.summary;
  d["causes"] = info.causes;
  d["fix"] = info.fix;
  return d;
}

// Raises the choir error as a RuntimeError("E200 StoreTimeout: ...").
template <typename T>
T ValueOrThrow(choir::Result<T> result) {
  if (!result.ok()) throw std::runtime_error(result.status().ToString());
  return std::move(result).value();
}

void OkOrThrow(const choir::Status& status) {
  if (!status.ok()) throw std::runtime_error(status.ToString());
}

// torch's CPU allocator replaced by one that serves allocations of at least
// `min_bytes` from SharedBuffers (so that DDP's buckets, gradients and
// parameters are memory the host's ranks read from each other directly) and
// everything smaller from torch's own allocator. Freed SharedBuffers are kept
// by size for reuse (up to kCacheBytes), so a training loop's steady state
// makes no system calls. Installed once per process; never uninstalled (live
// tensors keep pointing at it).
class SharedCpuAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kCacheBytes = size_t{2} << 30;

  static SharedCpuAllocator& Get() {
    static SharedCpuAllocator* a = [] {
      auto* alloc = new SharedCpuAllocator(c10::GetCPUAllocator());
      // A forked child (a DataLoader worker) must not hand out the buffers
      // cached here, which are its parent's memory too, nor make new shared
      // ones: it forgets the cache (the mappings stay, unused; unmapping here
      // would need the registry's lock, whose own fork handler runs later)
      // and allocates like torch. Tensors it inherited stay shared with the
      // parent; when it frees them it unmaps its view only.
      pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); },
                     [] {
                       SharedCpuAllocator& s = Get();
                       s.min_bytes_.store(SIZE_MAX);
                       s.forked_child_ = true;
                       s.free_.clear();
                       s.cached_ = 0;
                       s.mu_.unlock();
                     });
      return alloc;
    }();
    return *a;
  }
  void set_min_bytes(size_t n) { min_bytes_.store(n); }

  // Every allocation served here is rounded up to this: a SharedBuffer is a
  // file of its own (one descriptor, whole pages populated at once), so small
  // ones would waste memory and descriptors.
  static constexpr size_t kGrain = 64 * 1024;

  c10::DataPtr allocate(size_t n) const override {
    if (n < min_bytes_.load()) return fallback_->allocate(n);
    const size_t rounded = (n + kGrain - 1) / kGrain * kGrain;
    choir::SharedBuffer* buf = Self().Take(rounded);
    if (buf == nullptr) {
      auto fresh = choir::SharedBuffer::Allocate(rounded);
      // Out of shared memory or descriptors: ordinary memory still works.
      if (!fresh.ok()) return fallback_->allocate(n);
      buf = new choir::SharedBuffer(std::move(*fresh));
    }
    {
      std::lock_guard<std::mutex> lock(Self().mu_);
      Self().live_[buf->data()] = buf;
    }
    // The context is the data pointer, as raw_allocate() requires.
    return {buf->data(), buf->data(), &Release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Release; }

 private:
  explicit SharedCpuAllocator(c10::Allocator* fallback) : fallback_(fallback) {}
  SharedCpuAllocator& Self() const { return const_cast<SharedCpuAllocator&>(*this); }

  choir::SharedBuffer* Take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it == free_.end() || it->second.empty()) return nullptr;
    choir::SharedBuffer* b = it->second.back();
    it->second.pop_back();
    cached_ -= bytes;
    return b;
  }
  // Frees a pointer from allocate() or raw_allocate(): a SharedBuffer goes
  // back to the cache, anything else came from the fallback allocator.
  static void Release(void* ptr) {
    SharedCpuAllocator& a = Get();
    choir::SharedBuffer* b = nullptr;
    {
      std::lock_guard<std::mutex> lock(a.mu_);
      auto it = a.live_.find(ptr);
      if (it != a.live_.end()) {
        b = it->second;
        a.live_.erase(it);
        if (!a.forked_child_ && a.cached_ + b->size() <= kCacheBytes) {
          a.cached_ += b->size();
          a.free_[b->size()].push_back(b);
          return;
        }
      }
    }
    if (b != nullptr) {
      delete b;  // outside the lock: it takes the SharedBuffer registry's
      return;
    }
    // raw_allocate() below min_bytes went to the fallback (torch's own
    // allocator always has a raw deleter).
    if (c10::DeleterFnPtr d = a.fallback_->raw_deleter(); d != nullptr) d(ptr);
  }

  c10::Allocator* fallback_;
  std::atomic<size_t> min_bytes_{1 << 20};
  std::mutex mu_;
  std::map<size_t, std::vector<choir::SharedBuffer*>> free_;  // guarded by mu_
  std::map<void*, choir::SharedBuffer*> live_;                 // guarded by mu_
  size_t cached_ = 0;                                          // guarded by mu_
  bool forked_child_ = false;                                  // guarded by mu_
};

}  // namespace
}  // namespace choir::torch_backend

PYBIND11_MODULE(_C, m) {
  using choir::ErrorInfo;
  using choir::torch_backend::ProcessGroupChoir;
  using choir::torch_backend::ToMillis;
  using choir::torch_backend::ErrorInfoDict;
  m.doc() = "choir collectives as a torch.distributed process group (see choir.torch)";
  m.attr("__version__") = choir::kVersionString;

  py::class_<ProcessGroupChoir, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupChoir>>(
      m, "ProcessGroupChoir",
      "A torch.distributed process group over a choir communicator.\n\n"
      "Normally created by init_process_group(backend='choir') / new_group(backend='choir'),\n"
      "which call it with the group's store, rank, size and timeout.")
      // The constructor waits for every rank: it must not hold the GIL.
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::duration<double> timeout) {
             return c10::make_intrusive<ProcessGroupChoir>(store, rank, size, ToMillis(timeout),
                                                           choir::torch_backend::WithoutGil);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def(
          "communicator_status",
          [](const ProcessGroupChoir& pg) { return pg.CommunicatorStatus().ToString(); },
          "The communicator's sticky error as 'E304 PeerLost: ...', or 'OK'.")
      .def("last_algorithm", &ProcessGroupChoir::LastAlgorithm,
           "The algorithm of the most recently finished operation ('cma', 'shm_pipe+shared', ...).")
      .def("abort", &ProcessGroupChoir::Abort, py::arg("reason") = "",
           "Fails pending and later operations here and on the peers.",
           py::call_guard<py::gil_scoped_release>());

  // The store adapter on its own, so that tests can check each method's
  // mapping of c10d behaviour and exceptions to choir's contract.
  using choir::torch_backend::OkOrThrow;
  using choir::torch_backend::TorchStore;
  using choir::torch_backend::ValueOrThrow;
  py::class_<TorchStore, std::shared_ptr<TorchStore>>(m, "_StoreAdapter")
      .def(py::init<c10::intrusive_ptr<c10d::Store>>(), py::arg("store"))
      .def("set", [](TorchStore& s, const std::string& k, const py::bytes& v) { OkOrThrow(s.Set(k, v)); })
      .def("get", [](TorchStore& s, const std::string& k) { return py::bytes(ValueOrThrow(s.Get(k))); })
      .def("add", [](TorchStore& s, const std::string& k, int64_t d) { return ValueOrThrow(s.Add(k, d)); })
      .def("compare_set",
           [](TorchStore& s, const std::string& k, const py::bytes& expected, const py::bytes& desired) {
             return py::bytes(ValueOrThrow(s.CompareSet(k, expected, desired)));
           })
      .def("delete", [](TorchStore& s, const std::string& k) { return ValueOrThrow(s.Delete(k)); })
      .def(
          "wait",
          [](TorchStore& s, const std::vector<std::string>& keys, int64_t timeout_ms) {
            OkOrThrow(s.Wait(keys, std::chrono::milliseconds(timeout_ms)));
          },
          py::call_guard<py::gil_scoped_release>())
      .def("check", [](TorchStore& s, const std::vector<std::string>& keys) { return ValueOrThrow(s.Check(keys)); });

  m.def(
      "_shared_bytes",
      [](int64_t bytes) -> at::Tensor {
        if (bytes <= 0) throw std::runtime_error(choir::InvalidArgument("a shared tensor needs at least 1 byte, got " +
                                                                        std::to_string(bytes)).ToString());
        auto buf = choir::SharedBuffer::Allocate(static_cast<size_t>(bytes));
        if (!buf.ok()) throw std::runtime_error(buf.status().ToString());
        auto* owner = new choir::SharedBuffer(std::move(*buf));
        return at::from_blob(owner->data(), {bytes}, [owner](void*) { delete owner; },
                             at::TensorOptions().dtype(at::kByte));
      },
      py::arg("bytes"), "A uint8 CPU tensor of `bytes` over a choir::SharedBuffer (zero-filled).");
  m.def(
      "_use_shared_allocator",
      [](int64_t min_bytes) {
        using choir::torch_backend::SharedCpuAllocator;
        if (min_bytes < static_cast<int64_t>(SharedCpuAllocator::kGrain)) {
          throw std::runtime_error(
              choir::InvalidArgument("use_shared_allocator min_bytes is " + std::to_string(min_bytes) +
                                     "; it must be at least " + std::to_string(SharedCpuAllocator::kGrain) +
                                     " (64 KiB): every shared tensor takes whole 64 KiB grains of populated shared "
                                     "memory and a file descriptor, which smaller tensors would waste")
                  .ToString());
        }
        // Every SharedBuffer holds a file descriptor (peers take it over):
        // a model with many large tensors needs more than the usual soft
        // limit of 1024, so raise it to the hard limit once.
        rlimit lim{};
        if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
          lim.rlim_cur = lim.rlim_max;
          setrlimit(RLIMIT_NOFILE, &lim);
        }
        auto& a = SharedCpuAllocator::Get();
        a.set_min_bytes(static_cast<size_t>(min_bytes));
        c10::SetCPUAllocator(&a, /*priority=*/100);
      },
      py::arg("min_bytes"), "Serves CPU tensors of at least min_bytes from SharedBuffers (see choir.torch).");
  m.def(
      "error_info",
      [](const std::string& code) -> py::object {
        const ErrorInfo* info = choir::FindErrorInfo(code);
        if (info == nullptr) return py::none();
        return ErrorInfoDict(*info);
      },
      py::arg("code"),
      "The choir error table row for 'E401', '401' or 'CollectiveMismatch' (None if unknown).");
}
