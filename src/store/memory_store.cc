// The in-memory store: a KeyTable under one mutex; Wait sleeps on a condition
// variable that every write notifies.
#include <condition_variable>
#include <mutex>

#include "choir/store.h"
#include "store/store_internal.h"

namespace choir {
namespace {

class MemoryStore final : public Store {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    CHOIR_RETURN_IF_ERROR(store::ValidateValue(key, value));
    {
      std::lock_guard<std::mutex> lock(mu_);
      table_.Set(key, value);
    }
    changed_.notify_all();
    return Status::Ok();
  }

  Result<std::string> Get(const std::string& key) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    std::lock_guard<std::mutex> lock(mu_);
    const std::string* value = table_.Find(key);
    if (value == nullptr) {
      return Status(Code::kKeyNotFound, "store key " + store::QuoteKey(key) + " does not exist");
    }
    return *value;
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    Result<int64_t> sum = Status::Ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      sum = table_.Add(key, delta);
    }
    if (sum.ok()) changed_.notify_all();
    return sum;
  }

  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateCompareSet(key, expected, desired));
    std::string after;
    {
      std::lock_guard<std::mutex> lock(mu_);
      after = table_.CompareSet(key, expected, desired);
    }
    changed_.notify_all();
    return after;
  }

  Result<bool> Delete(const std::string& key) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKey(key));
    std::lock_guard<std::mutex> lock(mu_);
    return table_.Delete(key);
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKeys(keys));
    timeout = store::NonNegative(timeout);
    // Timeouts beyond a century mean "forever"; adding them to now() would overflow.
    const bool forever = timeout >= store::kForever;
    const auto until = std::chrono::steady_clock::now() + (forever ? store::kForever : timeout);
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<std::string> missing = table_.Missing(keys);
    while (!missing.empty()) {
      if (forever) {
        changed_.wait(lock);
      } else if (changed_.wait_until(lock, until) == std::cv_status::timeout) {
        missing = table_.Missing(keys);
        if (missing.empty()) break;
        return store::MissingKeysError(missing, keys.size(), timeout);
      }
      missing = table_.Missing(keys);
    }
    return Status::Ok();
  }

  Result<bool> Check(const std::vector<std::string>& keys) override {
    CHOIR_RETURN_IF_ERROR(store::ValidateKeys(keys));
    std::lock_guard<std::mutex> lock(mu_);
    return table_.Missing(keys).empty();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  store::KeyTable table_;
};

}  // namespace

std::shared_ptr<Store> NewMemoryStore() { return std::make_shared<MemoryStore>(); }

}  // namespace choir
