// Test helper: confines the calling thread to the CPU it runs on, as a rank
// bound to one core is, until the object goes out of scope. Threads the test
// starts meanwhile (ranks, progress threads) inherit the one-CPU affinity.
//
// Thread-safety: affects only the thread that creates and destroys it.
#ifndef CHOIR_TESTING_ONE_CPU_H_
#define CHOIR_TESTING_ONE_CPU_H_

#include <sched.h>

namespace choir::testing {

class OneCpuForThisThread {
 public:
  OneCpuForThisThread() {
    ok_ = sched_getaffinity(0, sizeof(before_), &before_) == 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ok_ = ok_ && sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  ~OneCpuForThisThread() { sched_setaffinity(0, sizeof(before_), &before_); }
  OneCpuForThisThread(const OneCpuForThisThread&) = delete;
  OneCpuForThisThread& operator=(const OneCpuForThisThread&) = delete;
  // False when the affinity could not be read or set.
  bool ok() const { return ok_; }

 private:
  cpu_set_t before_;
  bool ok_ = false;
};

}  // namespace choir::testing

#endif  // CHOIR_TESTING_ONE_CPU_H_
