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

TEST(HttpReader, ChunkedBodyIsReadStrictly) {
  const std::string te = kHead + "Transfer-Encoding: chunked\r\n\r\n";
  // Extensions and trailers are allowed and ignored; hex sizes in either case.
  Outcome o = read_both(te + "3;name=\"q v\"\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n");
  EXPECT_EQ(o.state, RequestReader::State::kDone);
  EXPECT_EQ(o.body, "abc0123456789");
  o = read_both(te + "a\r\n0123456789\r\n00\r\n\r\nGET");  // the next request is left
  EXPECT_EQ(o.state, RequestReader::State::kDone);
  EXPECT_EQ(o.used, te.size() + 21);
  // Bare LF, data longer than its size, no size, a control byte: each is refused.
  EXPECT_EQ(read_both(te + "3\nabc\r\n0\r\n\r\n").status, 400);
  EXPECT_EQ(read_both(te + "3\r\nabcd\r\n0\r\n\r\n").status, 400);
  EXPECT_EQ(read_both(te + "3\r\nabc\n0\r\n\r\n").status, 400);
  EXPECT_EQ(read_both(te + ";x\r\n").status, 400);
  EXPECT_EQ(read_both(te + "3;x=\"\n\"\r\nabc\r\n0\r\n\r\n").status, 400);
  EXPECT_EQ(read_both(te + "0\r\nX: \x01\r\n\r\n").status, 400);
  EXPECT_EQ(read_both(te + "0\r\n\r\r").status, 400);
  // Sizes past 16 hex digits, and extensions or trailers past the header limit.
  EXPECT_EQ(read_both(te + "00000000000000001\r\n").status, 413);
  HttpLimits l;
  l.max_header_bytes = 512;
  EXPECT_EQ(read_both(te + "1;" + std::string(600, 'x') + "\r\n", l).status, 431);
  EXPECT_EQ(read_both(te + "0\r\nX: " + std::string(600, 'x') + "\r\n", l).status, 431);
}

TEST(HttpReader, HeaderIsReadOnlyOnceItEnds) {
  // A bad start line is judged when the header's blank line (or its limit) arrives, the
  // same whether it came whole or byte by byte.
  const std::string line = "POST /v1/completions H\x05GET /x HTTP/1.0\r\n";
  EXPECT_EQ(read_both(line).state, RequestReader::State::kNeedMore);
  const Outcome o = read_both(line + "Host: x\r\n\r\n");
  EXPECT_EQ(o.state, RequestReader::State::kError);
  EXPECT_EQ(o.status, 505);
  HttpLimits small;
  small.max_header_bytes = 256;
  const Outcome big = read_both(line + std::string(300, 'a'), small);
  EXPECT_EQ(big.state, RequestReader::State::kError);
  // A bad field within the limit, with no blank line before it: both hit the limit first.
  const Outcome field = read_both(kHead + "Bad\x0b: x\r\n" + std::string(300, 'a'), small);
  EXPECT_EQ(field.state, RequestReader::State::kError);
}

TEST(HttpReader, HeaderFaultIsReportedBeforeABodyFault) {
  // Seen whole, the parser must not run on into the bad chunk and report that instead.
  const Outcome o =
      read_both(kHead + "Transfer-Encoding: chunked\r\nExpect: 050-continue\r\n\r\n3\xc4x\r\r\n");
  EXPECT_EQ(o.state, RequestReader::State::kError);
  EXPECT_EQ(o.status, 417);
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
