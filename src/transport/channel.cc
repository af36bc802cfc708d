#include "transport/channel.h"

namespace choir::transport {

Status RemoteFailure(const Channel& ch, int code, const std::string& text) {
  const ErrorInfo* info = FindErrorInfo(code);
  const Code c = (info == nullptr || code == 0) ? Code::kRemoteError : static_cast<Code>(code);
  return Status(c, "reported by " + ch.Describe() + ": " + text);
}

bool IsRemoteFailure(const Status& status) {
  return status.message().rfind("reported by rank ", 0) == 0;
}

}  // namespace choir::transport
