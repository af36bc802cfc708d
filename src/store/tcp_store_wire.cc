#include "store/tcp_store_wire.h"

#include <fmt/format.h>

namespace choir::store::wire {
namespace {

void PutU8(std::string* out, uint8_t v) { out->push_back(static_cast<char>(v)); }

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutI32(std::string* out, int32_t v) { PutU32(out, static_cast<uint32_t>(v)); }

void PutI64(std::string* out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

void PutStr(std::string* out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

// Reserves the length prefix of a frame; FinishFrame fills it in.
size_t BeginFrame(std::string* out, MsgType type) {
  const size_t start = out->size();
  out->append(kFrameHeaderBytes, '\0');
  PutU8(out, static_cast<uint8_t>(type));
  return start;
}

void FinishFrame(std::string* out, size_t start) {
  const auto body = static_cast<uint32_t>(out->size() - start - kFrameHeaderBytes);
  for (int i = 0; i < 4; ++i) (*out)[start + i] = static_cast<char>((body >> (8 * i)) & 0xff);
}

uint32_t LoadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Bounds-checked cursor over a frame body. The first failure is remembered
// and every later read fails, so decoders read field after field and check
// once at the end.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}

  bool U8(uint8_t* v) {
    if (!Need(1, "a byte")) return false;
    *v = static_cast<uint8_t>(data_[pos_++]);
    return true;
  }
  bool U32(uint32_t* v) {
    if (!Need(4, "a 32-bit integer")) return false;
    *v = LoadU32(data_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool I32(int32_t* v) {
    uint32_t u = 0;
    if (!U32(&u)) return false;
    *v = static_cast<int32_t>(u);
    return true;
  }
  bool I64(int64_t* v) {
    if (!Need(8, "a 64-bit integer")) return false;
    uint64_t u = 0;
    for (int i = 7; i >= 0; --i) u = (u << 8) | static_cast<unsigned char>(data_[pos_ + i]);
    pos_ += 8;
    *v = static_cast<int64_t>(u);
    return true;
  }
  // A length-prefixed string of at most `max` bytes, named `what` in errors.
  bool Str(std::string* s, size_t max, const char* what) {
    uint32_t len = 0;
    if (!U32(&len)) return false;
    if (len > max)
      return Fail(fmt::format("{} of {} bytes exceeds the limit of {}", what, len, max));
    if (!Need(len, what)) return false;
    s->assign(data_.substr(pos_, len));
    pos_ += len;
    return true;
  }
  bool Fail(std::string reason) {
    if (error_.empty()) error_ = std::move(reason);
    ok_ = false;
    return false;
  }
  size_t remaining() const { return data_.size() - pos_; }
  // OK when every read succeeded and the whole body was consumed.
  Status Finish(std::string_view frame_name) {
    if (ok_ && pos_ != data_.size()) {
      Fail(fmt::format("{} unexpected trailing byte(s)", data_.size() - pos_));
    }
    if (ok_) return Status::Ok();
    return Status(Code::kStoreProtocol, fmt::format("malformed {} frame: {}", frame_name, error_));
  }

 private:
  bool Need(size_t n, const char* what) {
    if (!ok_) return false;
    if (data_.size() - pos_ < n) {
      return Fail(
          fmt::format("truncated: {} needs {} byte(s), {} left", what, n, data_.size() - pos_));
    }
    return true;
  }

  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
};

bool IsRequestType(uint8_t t) {
  return t >= static_cast<uint8_t>(MsgType::kSet) && t <= static_cast<uint8_t>(MsgType::kCheck);
}

// Reads the type byte and checks that it is `want`.
bool ExpectType(Reader* r, MsgType want) {
  uint8_t t = 0;
  if (!r->U8(&t)) return false;
  if (t != static_cast<uint8_t>(want)) {
    return r->Fail(fmt::format("type {} where {} was expected",
                               MsgTypeName(static_cast<MsgType>(t)), MsgTypeName(want)));
  }
  return true;
}

bool ReadKeyList(Reader* r, std::vector<std::string>* keys) {
  uint32_t count = 0;
  if (!r->U32(&count)) return false;
  if (count > kMaxKeysPerCall) {
    return r->Fail(fmt::format("{} keys exceed the limit of {}", count, kMaxKeysPerCall));
  }
  // Each key takes at least its 4-byte length: reject a count the body cannot
  // hold before reserving room for it.
  if (count > r->remaining() / 4) {
    return r->Fail(
        fmt::format("{} keys announced but only {} bytes follow", count, r->remaining()));
  }
  keys->clear();
  keys->reserve(count);
  size_t total = 0;
  for (uint32_t i = 0; i < count; ++i) {
    std::string key;
    if (!r->Str(&key, kMaxKeyBytes, "key")) return false;
    total += key.size();
    if (total > kMaxKeyListBytes) {
      return r->Fail(fmt::format("keys add up to more than {} bytes", kMaxKeyListBytes));
    }
    keys->push_back(std::move(key));
  }
  return true;
}

}  // namespace

std::string MsgTypeName(MsgType type) {
  switch (type) {
    case MsgType::kHello:
      return "Hello";
    case MsgType::kHelloReply:
      return "HelloReply";
    case MsgType::kSet:
      return "Set";
    case MsgType::kGet:
      return "Get";
    case MsgType::kAdd:
      return "Add";
    case MsgType::kCompareSet:
      return "CompareSet";
    case MsgType::kDelete:
      return "Delete";
    case MsgType::kWait:
      return "Wait";
    case MsgType::kCheck:
      return "Check";
    case MsgType::kResponse:
      return "Response";
  }
  return fmt::format("0x{:02x}", static_cast<unsigned>(type));
}

void EncodeHello(const Hello& hello, std::string* out) {
  const size_t start = BeginFrame(out, MsgType::kHello);
  PutU32(out, hello.magic);
  PutU32(out, hello.version);
  PutStr(out, hello.job_id);
  PutI32(out, hello.rank);
  FinishFrame(out, start);
}

void EncodeHelloReply(const HelloReply& reply, std::string* out) {
  const size_t start = BeginFrame(out, MsgType::kHelloReply);
  PutI32(out, reply.code);
  PutU32(out, reply.server_version);
  PutStr(out, std::string_view(reply.message).substr(0, kMaxMessageBytes));
  FinishFrame(out, start);
}

void EncodeRequest(const Request& request, std::string* out) {
  const size_t start = BeginFrame(out, request.type);
  switch (request.type) {
    case MsgType::kSet:
      PutStr(out, request.key);
      PutStr(out, request.value);
      break;
    case MsgType::kGet:
    case MsgType::kDelete:
      PutStr(out, request.key);
      break;
    case MsgType::kAdd:
      PutStr(out, request.key);
      PutI64(out, request.number);
      break;
    case MsgType::kCompareSet:
      PutStr(out, request.key);
      PutStr(out, request.expected);
      PutStr(out, request.value);
      break;
    case MsgType::kWait:
      PutI64(out, request.number);
      [[fallthrough]];
    case MsgType::kCheck:
      PutU32(out, static_cast<uint32_t>(request.keys.size()));
      for (const std::string& key : request.keys) PutStr(out, key);
      break;
    default:
      break;
  }
  FinishFrame(out, start);
}

void EncodeResponse(const Response& response, std::string* out) {
  const size_t start = BeginFrame(out, MsgType::kResponse);
  PutU8(out, static_cast<uint8_t>(response.request_type));
  PutI32(out, response.code);
  PutStr(out, std::string_view(response.message).substr(0, kMaxMessageBytes));
  if (response.code == 0) {
    switch (response.request_type) {
      case MsgType::kGet:
      case MsgType::kCompareSet:
        PutStr(out, response.value);
        break;
      case MsgType::kAdd:
        PutI64(out, response.number);
        break;
      case MsgType::kDelete:
      case MsgType::kCheck:
        PutU8(out, response.flag ? 1 : 0);
        break;
      default:
        break;
    }
  }
  FinishFrame(out, start);
}

Result<size_t> DecodeFrameHeader(std::string_view header) {
  if (header.size() < kFrameHeaderBytes) {
    return Status(Code::kStoreProtocol, "frame header shorter than 4 bytes");
  }
  const uint32_t len = LoadU32(header.data());
  if (len == 0 || len > kMaxFrameBodyBytes) {
    return Status(Code::kStoreProtocol,
                  fmt::format("frame length {} is outside 1..{}", len, kMaxFrameBodyBytes));
  }
  return static_cast<size_t>(len);
}

Status NextFrame(std::string_view buffered, size_t* frame_bytes) {
  *frame_bytes = 0;
  if (buffered.size() < kFrameHeaderBytes) return Status::Ok();
  CHOIR_ASSIGN_OR_RETURN(const size_t body, DecodeFrameHeader(buffered));
  if (buffered.size() - kFrameHeaderBytes >= body) *frame_bytes = kFrameHeaderBytes + body;
  return Status::Ok();
}

Status DecodeHello(std::string_view body, Hello* hello) {
  *hello = Hello{.magic = 0, .version = 0};
  Reader r(body);
  if (ExpectType(&r, MsgType::kHello) && r.U32(&hello->magic) && hello->magic != kMagic) {
    r.Fail(fmt::format("magic 0x{:08x} is not a choir store client's", hello->magic));
  }
  if (r.U32(&hello->version) && hello->version != static_cast<uint32_t>(kProtocolVersion)) {
    // Another version may lay out the rest differently; the caller refuses it.
    return Status::Ok();
  }
  r.Str(&hello->job_id, kMaxJobIdBytes, "job id");
  r.I32(&hello->rank);
  return r.Finish("Hello");
}

Status DecodeHelloReply(std::string_view body, HelloReply* reply) {
  *reply = HelloReply{.server_version = 0};
  Reader r(body);
  if (ExpectType(&r, MsgType::kHelloReply) && r.I32(&reply->code) && reply->code != 0 &&
      FindErrorInfo(reply->code) == nullptr) {
    r.Fail(fmt::format("unknown error code {}", reply->code));
  }
  r.U32(&reply->server_version);
  r.Str(&reply->message, kMaxMessageBytes, "message");
  return r.Finish("HelloReply");
}

Status DecodeRequest(std::string_view body, Request* request) {
  *request = Request();
  Reader r(body);
  uint8_t t = 0;
  if (r.U8(&t) && !IsRequestType(t)) {
    r.Fail(fmt::format("type {} is not a request", MsgTypeName(static_cast<MsgType>(t))));
  }
  request->type = static_cast<MsgType>(t);
  std::string name = MsgTypeName(request->type);
  switch (request->type) {
    case MsgType::kSet:
      r.Str(&request->key, kMaxKeyBytes, "key");
      r.Str(&request->value, kMaxValueBytes, "value");
      break;
    case MsgType::kGet:
    case MsgType::kDelete:
      r.Str(&request->key, kMaxKeyBytes, "key");
      break;
    case MsgType::kAdd:
      r.Str(&request->key, kMaxKeyBytes, "key");
      r.I64(&request->number);
      break;
    case MsgType::kCompareSet:
      r.Str(&request->key, kMaxKeyBytes, "key");
      r.Str(&request->expected, kMaxValueBytes, "expected value");
      // Both values together must fit the value limit (see ValidateCompareSet).
      r.Str(&request->value, kMaxValueBytes - request->expected.size(), "desired value");
      break;
    case MsgType::kWait:
      r.I64(&request->number);
      ReadKeyList(&r, &request->keys);
      break;
    case MsgType::kCheck:
      ReadKeyList(&r, &request->keys);
      break;
    default:
      name = "request";
      break;
  }
  return r.Finish(name);
}

Status DecodeResponse(std::string_view body, Response* response) {
  *response = Response();
  Reader r(body);
  uint8_t t = 0;
  if (ExpectType(&r, MsgType::kResponse) && r.U8(&t) && !IsRequestType(t)) {
    r.Fail(fmt::format("answers type {}, not a request", MsgTypeName(static_cast<MsgType>(t))));
  }
  response->request_type = static_cast<MsgType>(t);
  if (r.I32(&response->code) && response->code != 0 && FindErrorInfo(response->code) == nullptr) {
    r.Fail(fmt::format("unknown error code {}", response->code));
  }
  if (r.Str(&response->message, kMaxMessageBytes, "message") && response->code == 0) {
    uint8_t flag = 0;
    switch (response->request_type) {
      case MsgType::kGet:
      case MsgType::kCompareSet:
        r.Str(&response->value, kMaxValueBytes, "value");
        break;
      case MsgType::kAdd:
        r.I64(&response->number);
        break;
      case MsgType::kDelete:
      case MsgType::kCheck:
        if (r.U8(&flag) && flag > 1) r.Fail(fmt::format("flag byte {} is not 0 or 1", flag));
        response->flag = flag == 1;
        break;
      default:
        break;
    }
  }
  return r.Finish("Response");
}

}  // namespace choir::store::wire
