// A view of another store in which every key gets "<prefix>/" in front, so that
// communicators sharing one store do not see each other's keys.
#include "choir/store.h"

namespace choir {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(const std::string& prefix, std::shared_ptr<Store> base)
      : prefix_(prefix + "/"), base_(std::move(base)) {}

  Status Set(const std::string& key, const std::string& value) override {
    return base_->Set(Full(key), value);
  }
  Result<std::string> Get(const std::string& key) override { return base_->Get(Full(key)); }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    return base_->Add(Full(key), delta);
  }
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) override {
    return base_->CompareSet(Full(key), expected, desired);
  }
  Result<bool> Delete(const std::string& key) override { return base_->Delete(Full(key)); }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return base_->Wait(Full(keys), timeout);
  }
  Result<bool> Check(const std::vector<std::string>& keys) override {
    return base_->Check(Full(keys));
  }

 private:
  std::string Full(const std::string& key) const { return prefix_ + key; }
  std::vector<std::string> Full(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const std::string& key : keys) out.push_back(Full(key));
    return out;
  }

  const std::string prefix_;
  const std::shared_ptr<Store> base_;
};

}  // namespace

std::shared_ptr<Store> NewPrefixStore(const std::string& prefix, std::shared_ptr<Store> base) {
  return std::make_shared<PrefixStore>(prefix, std::move(base));
}

}  // namespace choir
