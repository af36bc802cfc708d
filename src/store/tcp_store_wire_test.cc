// The store wire format: round trips, limits, and decoders fed hostile bytes.
#include "store/tcp_store_wire.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace choir::store::wire {
namespace {

// The body of the single frame in `frame`.
std::string_view Body(const std::string& frame) {
  return std::string_view(frame).substr(kFrameHeaderBytes);
}

std::vector<Request> SampleRequests() {
  return {
      Request{.type = MsgType::kSet, .key = "k", .value = std::string("v\0v", 3)},
      Request{.type = MsgType::kGet, .key = "key/with/slashes"},
      Request{.type = MsgType::kAdd, .key = "n", .number = -42},
      Request{.type = MsgType::kCompareSet, .key = "c", .value = "new", .expected = "old"},
      Request{.type = MsgType::kDelete, .key = ""},
      Request{.type = MsgType::kWait, .number = 1500, .keys = {"a", "", "c"}},
      Request{.type = MsgType::kCheck, .keys = {"x"}},
  };
}

TEST(StoreWireTest, RequestsRoundTrip) {
  for (const Request& in : SampleRequests()) {
    std::string frame;
    EncodeRequest(in, &frame);
    size_t frame_bytes = 0;
    ASSERT_TRUE(NextFrame(frame, &frame_bytes).ok());
    ASSERT_EQ(frame_bytes, frame.size());
    Request out;
    ASSERT_TRUE(DecodeRequest(Body(frame), &out).ok()) << MsgTypeName(in.type);
    EXPECT_EQ(out.type, in.type);
    EXPECT_EQ(out.key, in.key);
    EXPECT_EQ(out.value, in.value);
    EXPECT_EQ(out.expected, in.expected);
    EXPECT_EQ(out.number, in.number);
    EXPECT_EQ(out.keys, in.keys);
  }
}

TEST(StoreWireTest, ResponsesAndHandshakeRoundTrip) {
  std::string frame;
  EncodeResponse(Response{.request_type = MsgType::kAdd, .number = 7}, &frame);
  Response response;
  ASSERT_TRUE(DecodeResponse(Body(frame), &response).ok());
  EXPECT_EQ(response.number, 7);

  frame.clear();
  EncodeResponse(Response{.request_type = MsgType::kWait, .code = 200, .message = "late"}, &frame);
  ASSERT_TRUE(DecodeResponse(Body(frame), &response).ok());
  EXPECT_EQ(response.code, 200);
  EXPECT_EQ(response.message, "late");

  frame.clear();
  EncodeHello(Hello{.job_id = "job", .rank = 3}, &frame);
  Hello hello;
  ASSERT_TRUE(DecodeHello(Body(frame), &hello).ok());
  EXPECT_EQ(hello.job_id, "job");
  EXPECT_EQ(hello.rank, 3);

  frame.clear();
  EncodeHelloReply(HelloReply{.code = 303, .message = "other job"}, &frame);
  HelloReply reply;
  ASSERT_TRUE(DecodeHelloReply(Body(frame), &reply).ok());
  EXPECT_EQ(reply.code, 303);
  EXPECT_EQ(reply.message, "other job");
}

TEST(StoreWireTest, HelloOfAnotherVersionDecodesOnlyMagicAndVersion) {
  std::string body;
  body += static_cast<char>(MsgType::kHello);
  body += std::string("CHST", 4);
  body += std::string("\x63\x00\x00\x00", 4);  // version 99
  body += "whatever a future version puts here";
  Hello hello;
  ASSERT_TRUE(DecodeHello(body, &hello).ok());
  EXPECT_EQ(hello.version, 99u);

  body[1] = 'X';
  EXPECT_EQ(DecodeHello(body, &hello).code(), Code::kStoreProtocol);
}

TEST(StoreWireTest, FrameHeaderLimits) {
  EXPECT_EQ(DecodeFrameHeader(std::string("\0\0\0\0", 4)).status().code(), Code::kStoreProtocol);
  EXPECT_EQ(DecodeFrameHeader("\xff\xff\xff\xff").status().code(), Code::kStoreProtocol);
  EXPECT_EQ(DecodeFrameHeader(std::string("\x01\0\0\0", 4)).value(), 1u);
  size_t frame_bytes = 99;
  ASSERT_TRUE(NextFrame(std::string("\x05\0\0", 3), &frame_bytes).ok());
  EXPECT_EQ(frame_bytes, 0u);
  ASSERT_TRUE(NextFrame(std::string("\x05\0\0\0abcd", 8), &frame_bytes).ok());
  EXPECT_EQ(frame_bytes, 0u);
  ASSERT_TRUE(NextFrame(std::string("\x05\0\0\0abcdeXYZ", 12), &frame_bytes).ok());
  EXPECT_EQ(frame_bytes, 9u);
  EXPECT_FALSE(NextFrame("\xff\xff\xff\x7f", &frame_bytes).ok());
}

TEST(StoreWireTest, OversizedFieldsAreRejectedBeforeAllocation) {
  // A Check claiming 4 billion keys in a 9-byte body.
  std::string body;
  body += static_cast<char>(MsgType::kCheck);
  body += "\xff\xff\xff\xff";
  body += "tail";
  Request request;
  EXPECT_EQ(DecodeRequest(body, &request).code(), Code::kStoreProtocol);
  // 60000 keys announced, but only a few bytes follow.
  body = std::string(1, static_cast<char>(MsgType::kCheck)) + std::string("\x60\xea\0\0", 4) + "ab";
  EXPECT_EQ(DecodeRequest(body, &request).code(), Code::kStoreProtocol);
  // A key longer than 4 KiB.
  std::string frame;
  EncodeRequest(Request{.type = MsgType::kGet, .key = std::string(kMaxKeyBytes + 1, 'k')}, &frame);
  const Status status = DecodeRequest(Body(frame), &request);
  EXPECT_EQ(status.code(), Code::kStoreProtocol);
  EXPECT_NE(status.message().find("limit"), std::string::npos) << status.message();
}

TEST(StoreWireTest, EveryTruncationAndTrailingByteIsAnError) {
  for (const Request& in : SampleRequests()) {
    std::string frame;
    EncodeRequest(in, &frame);
    const std::string body(Body(frame));
    Request out;
    for (size_t len = 0; len < body.size(); ++len) {
      EXPECT_EQ(DecodeRequest(std::string_view(body).substr(0, len), &out).code(),
                Code::kStoreProtocol)
          << MsgTypeName(in.type) << " cut at " << len;
    }
    EXPECT_EQ(DecodeRequest(body + "x", &out).code(), Code::kStoreProtocol);
  }
}

TEST(StoreWireTest, UnknownTypesAndCodesAreErrors) {
  Request request;
  EXPECT_FALSE(DecodeRequest(std::string(1, '\x7f'), &request).ok());
  EXPECT_FALSE(DecodeRequest(std::string(1, static_cast<char>(MsgType::kResponse)), &request).ok());
  std::string frame;
  EncodeResponse(Response{.request_type = MsgType::kGet, .code = 12345}, &frame);
  Response response;
  EXPECT_FALSE(DecodeResponse(Body(frame), &response).ok());
  frame.clear();
  EncodeResponse(Response{.request_type = MsgType::kCheck, .flag = true}, &frame);
  frame.back() = 2;  // a flag must be 0 or 1
  EXPECT_FALSE(DecodeResponse(Body(frame), &response).ok());
}

// Random bodies and randomly mutated valid bodies: decoders must return (OK
// or StoreProtocol) without crashing, and whatever decodes re-encodes to the
// same bytes (there is one encoding per message).
TEST(StoreWireTest, DecodersSurviveRandomAndMutatedInput) {
  std::mt19937 rng(12345);
  const std::vector<Request> samples = SampleRequests();
  for (int iter = 0; iter < 20000; ++iter) {
    std::string body;
    if (iter % 2 == 0) {
      body.resize(rng() % 48);
      for (char& c : body) c = static_cast<char>(rng());
    } else {
      std::string frame;
      EncodeRequest(samples[rng() % samples.size()], &frame);
      body = std::string(Body(frame));
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) body[rng() % body.size()] = static_cast<char>(rng());
    }
    Request request;
    const Status status = DecodeRequest(body, &request);
    if (status.ok()) {
      std::string again;
      EncodeRequest(request, &again);
      EXPECT_EQ(Body(again), body);
    } else {
      EXPECT_EQ(status.code(), Code::kStoreProtocol);
    }
    Response response;
    const Status response_status = DecodeResponse(body, &response);
    EXPECT_TRUE(response_status.ok() || response_status.code() == Code::kStoreProtocol);
    Hello hello;
    const Status hello_status = DecodeHello(body, &hello);
    EXPECT_TRUE(hello_status.ok() || hello_status.code() == Code::kStoreProtocol);
    HelloReply reply;
    const Status reply_status = DecodeHelloReply(body, &reply);
    EXPECT_TRUE(reply_status.ok() || reply_status.code() == Code::kStoreProtocol);
  }
}

}  // namespace
}  // namespace choir::store::wire
