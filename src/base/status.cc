#include "choir/status.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

namespace choir {
namespace {

const std::vector<ErrorInfo>& Table() {
  static const std::vector<ErrorInfo> table = {
#define CHOIR_X_INFO(name, number, retry, summary, causes, fix) \
  ErrorInfo{Code::k##name, number, #name, retry, summary, causes, fix},
      CHOIR_ERROR_CODES(CHOIR_X_INFO)
#undef CHOIR_X_INFO
  };
  return table;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

const std::vector<ErrorInfo>& AllErrorInfos() { return Table(); }

const ErrorInfo* FindErrorInfo(int number) {
  for (const ErrorInfo& info : Table()) {
    if (info.number == number) return &info;
  }
  return nullptr;
}

const ErrorInfo& GetErrorInfo(Code code) {
  const ErrorInfo* info = FindErrorInfo(static_cast<int>(code));
  return info ? *info : *FindErrorInfo(static_cast<int>(Code::kInternal));
}

const ErrorInfo* FindErrorInfo(std::string_view text) {
  std::string_view digits = text;
  if (!digits.empty() && (digits[0] == 'E' || digits[0] == 'e')) digits.remove_prefix(1);
  if (!digits.empty() && std::all_of(digits.begin(), digits.end(),
                                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    if (digits.size() > 6) return nullptr;
    return FindErrorInfo(std::stoi(std::string(digits)));
  }
  for (const ErrorInfo& info : Table()) {
    if (EqualsIgnoreCase(info.name, text)) return &info;
  }
  return nullptr;
}

Status::Status(Code code, std::string message) {
  if (code != Code::kOk) rep_ = std::make_shared<const Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string empty;
  return rep_ ? rep_->message : empty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  const ErrorInfo& info = GetErrorInfo(code());
  std::string out = "E" + std::to_string(info.number) + " " + info.name;
  if (!rep_->message.empty()) out += ": " + rep_->message;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += rep_->message;
  return Status(rep_->code, std::move(msg));
}

Status ErrnoError(Code code, int err, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  msg += " (errno " + std::to_string(err) + ")";
  return Status(code, std::move(msg));
}

}  // namespace choir
