// Microbenchmarks for the reduction kernels: dst = a + b for float32, bfloat16
// and float16 at 64 KiB (L2-resident), 1 MiB (L2/LLC) and 64 MiB (DRAM) per
// buffer, for every ISA this CPU has, with and without streaming stores; the
// float32 sum again with every buffer 16 bytes past a cache line (`/line+16`,
// where a plain malloc's large blocks start); plus CopyBytes for reference,
// CopyBytesTwice against two CopyBytes (`copy_twice/`), and ReduceManyTwice
// against ReduceMany and CopyBytes (`sum_twice/`).
//
// bytes_per_second counts the useful memory traffic: both inputs read and the
// output written (3 x buffer size per iteration; 2 x for copies; 3 x for
// copy_twice, one read and two writes, fused or not; 4 x for sum_twice,
// two reads and two writes). Without
// streaming stores the hardware also reads each output line before writing
// it, which is the traffic the `nt` variants avoid.
//
// Thread-safety: single-threaded benchmark program.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce.h"

namespace choir::kernels {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, FreeDeleter>;

// 64-byte aligned and filled with ordinary values in [-1, 1] (no subnormals,
// which could slow some CPUs down and measure the wrong thing).
AlignedBuffer MakeBuffer(size_t bytes, DataType type, uint64_t seed) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  AlignedBuffer buffer(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t elem = DataTypeSize(type);
  for (size_t i = 0; i < bytes / elem; ++i) {
    const float v = dist(rng);
    uint8_t* p = buffer.get() + i * elem;
    if (type == DataType::kFloat32) {
      std::memcpy(p, &v, sizeof(v));
    } else {
      const uint16_t h = type == DataType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      std::memcpy(p, &h, sizeof(h));
    }
  }
  return buffer;
}

// `offset`: bytes past the 64-byte boundary every buffer starts at.
void BenchSum(benchmark::State& state, const char* isa, DataType type, size_t bytes,
              bool nontemporal, size_t offset) {
  if (!ForceIsa(isa)) {
    state.SkipWithError("ISA not available");
    return;
  }
  AlignedBuffer a = MakeBuffer(bytes + offset, type, 1);
  AlignedBuffer b = MakeBuffer(bytes + offset, type, 2);
  AlignedBuffer dst = MakeBuffer(bytes + offset, type, 3);
  const void* srcs[2] = {a.get() + offset, b.get() + offset};
  const size_t count = bytes / DataTypeSize(type);
  for (auto _ : state) {
    ReduceMany(dst.get() + offset, srcs, 2, count, type, ReduceOp::kSum, nontemporal);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 *
                          static_cast<int64_t>(bytes));
  ForceIsa("auto");
}

void BenchCopy(benchmark::State& state, const char* isa, size_t bytes, bool nontemporal) {
  if (!ForceIsa(isa)) {
    state.SkipWithError("ISA not available");
    return;
  }
  AlignedBuffer src = MakeBuffer(bytes, DataType::kFloat32, 1);
  AlignedBuffer dst = MakeBuffer(bytes, DataType::kFloat32, 2);
  for (auto _ : state) {
    CopyBytes(dst.get(), src.get(), bytes, nontemporal);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 *
                          static_cast<int64_t>(bytes));
  ForceIsa("auto");
}

// src to two destinations, as the pipe's allgather stages a chunk and
// writes it to the rank's own output: the stage on a line, src and the
// second destination 16 bytes past one. `fused`: CopyBytesTwice (one pass
// over src); otherwise two CopyBytes. Plain stores.
void BenchCopyTwice(benchmark::State& state, const char* isa, size_t bytes, bool fused) {
  if (!ForceIsa(isa)) {
    state.SkipWithError("ISA not available");
    return;
  }
  AlignedBuffer src = MakeBuffer(bytes + 16, DataType::kFloat32, 1);
  AlignedBuffer stage = MakeBuffer(bytes, DataType::kFloat32, 2);
  AlignedBuffer out = MakeBuffer(bytes + 16, DataType::kFloat32, 3);
  for (auto _ : state) {
    if (fused) {
      CopyBytesTwice(stage.get(), false, out.get() + 16, false, src.get() + 16, bytes);
    } else {
      CopyBytes(stage.get(), src.get() + 16, bytes, false);
      CopyBytes(out.get() + 16, src.get() + 16, bytes, false);
    }
    benchmark::DoNotOptimize(out.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * static_cast<int64_t>(bytes));
  ForceIsa("auto");
}

// float32 a + b to two destinations, as the pipe's allreduce stages a
// rank's result for its peers and writes it to its own output: the stage on
// a line, plain stores; the inputs and the output 16 bytes past a line, the
// output streaming with `nt`. `fused`: ReduceManyTwice (each result vector
// stored twice); otherwise ReduceMany into the stage, then CopyBytes out.
void BenchSumTwice(benchmark::State& state, const char* isa, size_t bytes, bool nt, bool fused) {
  if (!ForceIsa(isa)) {
    state.SkipWithError("ISA not available");
    return;
  }
  AlignedBuffer a = MakeBuffer(bytes + 16, DataType::kFloat32, 1);
  AlignedBuffer b = MakeBuffer(bytes + 16, DataType::kFloat32, 2);
  AlignedBuffer stage = MakeBuffer(bytes, DataType::kFloat32, 3);
  AlignedBuffer out = MakeBuffer(bytes + 16, DataType::kFloat32, 4);
  const void* srcs[2] = {a.get() + 16, b.get() + 16};
  const size_t count = bytes / sizeof(float);
  for (auto _ : state) {
    if (fused) {
      ReduceManyTwice(stage.get(), false, out.get() + 16, nt, srcs, 2, count, DataType::kFloat32, ReduceOp::kSum);
    } else {
      ReduceMany(stage.get(), srcs, 2, count, DataType::kFloat32, ReduceOp::kSum, false);
      CopyBytes(out.get() + 16, stage.get(), bytes, nt);
    }
    benchmark::DoNotOptimize(out.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 4 * static_cast<int64_t>(bytes));
  ForceIsa("auto");
}

std::string SizeName(size_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + "MiB"
                             : std::to_string(bytes >> 10) + "KiB";
}

// Registers `fn(args...)` under `name`, timed in real time, in µs.
template <class Fn, class... Args>
void Register(const std::string& name, Fn fn, Args... args) {
  benchmark::RegisterBenchmark(name.c_str(), fn, args...)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void RegisterAll() {
  const size_t sizes[] = {64u << 10, 1u << 20, 64u << 20};
  const DataType types[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16};
  for (const char* isa : AvailableIsas()) {
    for (DataType type : types) {
      for (size_t bytes : sizes) {
        for (bool nt : {false, true}) {
          const std::string name = std::string("sum/") + DataTypeName(type) + "/" +
                                   SizeName(bytes) + "/" + isa + (nt ? "/nt" : "/cached");
          Register(name, BenchSum, isa, type, bytes, nt, size_t{0});
        }
      }
    }
    for (size_t bytes : sizes) {
      for (bool nt : {false, true}) {
        const std::string name = std::string("sum/float32/") + SizeName(bytes) + "/" + isa +
                                 (nt ? "/nt" : "/cached") + "/line+16";
        Register(name, BenchSum, isa, DataType::kFloat32, bytes, nt, size_t{16});
      }
    }
    for (size_t bytes : sizes) {
      for (bool nt : {false, true}) {
        const std::string name =
            std::string("copy/") + SizeName(bytes) + "/" + isa + (nt ? "/nt" : "/cached");
        Register(name, BenchCopy, isa, bytes, nt);
      }
    }
    for (size_t bytes : sizes) {
      for (bool fused : {false, true}) {
        const std::string name =
            std::string("copy_twice/") + SizeName(bytes) + "/" + isa + (fused ? "/fused" : "/separate");
        Register(name, BenchCopyTwice, isa, bytes, fused);
      }
    }
    for (size_t bytes : sizes) {
      for (bool nt : {false, true}) {
        for (bool fused : {false, true}) {
          const std::string name = std::string("sum_twice/") + SizeName(bytes) + "/" + isa +
                                   (nt ? "/nt" : "/cached") + (fused ? "/fused" : "/separate");
          Register(name, BenchSumTwice, isa, bytes, nt, fused);
        }
      }
    }
  }
}

}  // namespace
}  // namespace choir::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  choir::kernels::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
