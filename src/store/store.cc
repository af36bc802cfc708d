#include "choir/store.h"

namespace choir {

Result<std::string> Store::WaitGet(const std::string& key, std::chrono::milliseconds timeout) {
  CHOIR_RETURN_IF_ERROR(Wait({key}, timeout));
  return Get(key);
}

}  // namespace choir
