#include "choir/version.h"

#include "kernels/reduce.h"

namespace choir {

#ifndef CHOIR_BUILD_TYPE
#define CHOIR_BUILD_TYPE "unknown"
#endif

const char* BuildString() {
#if defined(__SANITIZE_ADDRESS__)
  constexpr const char* kSan = "asan+ubsan";
#elif defined(__SANITIZE_THREAD__)
  constexpr const char* kSan = "tsan";
#else
  constexpr const char* kSan = "none";
#endif
  static const char* const text = [] {
    static char buf[160];
    __builtin_snprintf(buf, sizeof(buf), "%s (%s, gcc %d.%d.%d, sanitizers=%s)", kVersionString,
                       CHOIR_BUILD_TYPE, __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__, kSan);
    return buf;
  }();
  return text;
}

const char* KernelIsa() { return kernels::ActiveIsa(); }

}  // namespace choir
