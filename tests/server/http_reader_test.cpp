// RequestReader: the request framing a server behind a proxy must agree on, and the limits.
// Every case is fed whole and byte by byte: a slow client must read the same as a fast one.
#include <gtest/gtest.h>

#include <string>

#include "server/http_reader.h"

namespace pagoda::server {
namespace {

struct Outcome {
  RequestReader::State state;
  int status = 0;
  std::string body;
  size_t used = 0;
};

Outcome read_all(const std::string& bytes, const HttpLimits& limits, bool byte_by_byte) {
  RequestReader r(limits);
  Outcome o;
  if (!byte_by_byte) {
    o.used = r.feed(bytes);
  } else {
    std::string pending;
    for (char c : bytes) {
      pending += c;
      const size_t n = r.feed(pending);
      o.used += n;
      pending.erase(0, n);
      if (r.state() != RequestReader::State::kNeedMore) break;
    }
  }
  o.state = r.state();
  o.status = r.error_status();
  if (o.state == RequestReader::State::kDone) o.body = r.take().body;
  return o;
}

Outcome read_both(const std::string& bytes, const HttpLimits& limits = {}) {
  const Outcome whole = read_all(bytes, limits, false);
  const Outcome slow = read_all(bytes, limits, true);
  EXPECT_EQ(whole.state, slow.state) << bytes.substr(0, 200);
  EXPECT_EQ(whole.status, slow.status) << bytes.substr(0, 200);
  EXPECT_EQ(whole.body, slow.body);
  return whole;
}

const std::string kHead = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";

TEST(HttpReader, ContentLengthAndChunkedBodies) {
  Outcome o = read_both(kHead + "Content-Length: 5\r\n\r\nhello");
  EXPECT_EQ(o.state, RequestReader::State::kDone);
  EXPECT_EQ(o.body, "hello");
  o = read_both(kHead + "Transfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n");
  EXPECT_EQ(o.state, RequestReader::State::kDone);
  EXPECT_EQ(o.body, "hello");
  o = read_both(kHead + "Transfer-Encoding: Chunked\r\n\r\n0\r\n\r\n");  // tokens ignore case
  EXPECT_EQ(o.state, RequestReader::State::kDone);
}

TEST(HttpReader, PipelinedRequestIsLeftForTheNextReader) {
  const std::string first = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string bytes = first + "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  RequestReader r{HttpLimits{}};
  const size_t used = r.feed(bytes);
  ASSERT_EQ(r.state(), RequestReader::State::kDone);
  EXPECT_EQ(used, first.size());
  EXPECT_EQ(r.take().path, "/health");
  RequestReader next{HttpLimits{}};
  next.feed(std::string_view(bytes).substr(used));
  ASSERT_EQ(next.state(), RequestReader::State::kDone);
  EXPECT_EQ(next.take().path, "/metrics");
}

TEST(HttpReader, BodyLimitHoldsForEveryEncoding) {
  HttpLimits l;
  l.max_body_bytes = 1024;
  EXPECT_EQ(read_both(kHead + "Content-Length: 1025\r\n\r\n", l).status, 413);
  // Chunked: refused at the chunk that passes the limit, before it is read.
  std::string chunked = kHead + "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) chunked += "200\r\n" + std::string(512, 'a') + "\r\n";
  const Outcome o = read_both(chunked + "0\r\n\r\n", l);
  EXPECT_EQ(o.state, RequestReader::State::kError);
  EXPECT_EQ(o.status, 413);
  // One huge chunk size: refused from its header line alone.
  EXPECT_EQ(read_both(kHead + "Transfer-Encoding: chunked\r\n\r\nfffffffffff\r\n", l).status, 413);
}

TEST(HttpReader, HeaderSizeAndCountLimits) {
  HttpLimits l;
  l.max_header_bytes = 4096;
  l.max_headers = 10;
  std::string many = kHead;
  for (int i = 0; i < 11; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(read_both(many + "\r\n", l).status, 431);
  std::string big = kHead + "X-Big: " + std::string(5000, 'b') + "\r\n\r\n";
  EXPECT_EQ(read_both(big, l).status, 431);
  // Refused before the headers end: a client cannot hold memory by never finishing them.
  RequestReader r(l);
  r.feed(kHead + "X-Big: " + std::string(5000, 'b'));
  EXPECT_EQ(r.state(), RequestReader::State::kError);
  EXPECT_EQ(r.error_status(), 431);
}

TEST(HttpReader, AmbiguousFramingIsRefused) {
  EXPECT_EQ(read_both(kHead + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello").status, 400);
  EXPECT_EQ(read_both(kHead + "Content-Length: 5, 5\r\n\r\nhello").status, 400);
  EXPECT_EQ(read_both(kHead + "Content-Length: -1\r\n\r\n").status, 400);
  EXPECT_EQ(read_both(kHead + "Content-Length: +5\r\n\r\nhello").status, 400);
  EXPECT_EQ(read_both(kHead + "Content-Length: 0x5\r\n\r\nhello").status, 400);
  EXPECT_EQ(read_both(kHead + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n").status,
            400);
  EXPECT_EQ(read_both(kHead + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n").status,
            400);
  EXPECT_EQ(read_both(kHead + "Transfer-Encoding: xchunked\r\n\r\n").status, 501);
  EXPECT_EQ(read_both(kHead + "Transfer-Encoding: gzip, chunked\r\n\r\n").status, 501);
  EXPECT_EQ(
      read_both(kHead + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n").status,
      400);
  EXPECT_EQ(read_both("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status,
            400);
  EXPECT_EQ(read_both("GET / HTTP/1.1\r\n\r\n").status, 400);  // no Host
  EXPECT_EQ(read_both("GET / HTTP/2.0\r\nHost: x\r\n\r\n").status, 505);
  EXPECT_EQ(read_both("GET / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n").status, 417);
}

TEST(HttpReader, ExpectContinueIsReported) {
  RequestReader r{HttpLimits{}};
  r.feed(kHead + "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(r.state(), RequestReader::State::kNeedMore);
  EXPECT_TRUE(r.headers_done());
  EXPECT_TRUE(r.expects_continue());
}

TEST(HttpReader, HeadersAreKeptCaseInsensitively) {
  RequestReader r{HttpLimits{}};
  r.feed("GET /health?x=1 HTTP/1.0\r\nauthorization: bearer k\r\n\r\n");
  ASSERT_EQ(r.state(), RequestReader::State::kDone);
  const HttpRequest q = r.take();
  EXPECT_EQ(q.path, "/health");
  EXPECT_EQ(q.target, "/health?x=1");
  EXPECT_EQ(q.version, 10);
  EXPECT_EQ(q.header("Authorization").value_or(""), "bearer k");
}

}  // namespace
}  // namespace pagoda::server
