// libFuzzer target: arbitrary bytes as what a client sends, read by RequestReader in
// pieces whose sizes come from the input, under small limits. Errors are the expected
// outcome for most inputs; a crash, a sanitizer report, a limit that does not hold, or
// pieces that read differently from the whole are bugs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http_reader.h"

using pagoda::server::HttpLimits;
using pagoda::server::RequestReader;

namespace {

struct Read {
  RequestReader::State state;
  int status = 0;
  size_t used = 0;
  std::string body;
  size_t headers = 0;
};

// Feeds `bytes` in pieces of `step` bytes (0: whole), as a connection would.
Read read(std::string_view bytes, size_t step, const HttpLimits& limits) {
  RequestReader r(limits);
  Read out;
  std::string pending;
  size_t pos = 0;
  while (r.state() == RequestReader::State::kNeedMore && pos < bytes.size()) {
    const size_t n = step == 0 ? bytes.size() - pos : std::min(step, bytes.size() - pos);
    pending.append(bytes.substr(pos, n));
    pos += n;
    const size_t used = r.feed(pending);
    out.used += used;
    pending.erase(0, used);
  }
  out.state = r.state();
  out.status = r.error_status();
  if (out.state == RequestReader::State::kDone) {
    auto q = r.take();
    out.body = std::move(q.body);
    out.headers = q.headers.size();
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = 1 + data[0] % 7;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  HttpLimits limits;
  limits.max_header_bytes = 2048;
  limits.max_headers = 16;
  limits.max_body_bytes = 4096;
  const Read whole = read(bytes, 0, limits);
  const Read pieces = read(bytes, step, limits);
  if (whole.state != pieces.state || whole.status != pieces.status || whole.body != pieces.body ||
      (whole.state == RequestReader::State::kDone && whole.used != pieces.used))
    std::abort();  // a slow client must read the same request as a fast one
  if (whole.state == RequestReader::State::kDone &&
      (whole.body.size() > static_cast<size_t>(limits.max_body_bytes) ||
       whole.headers > static_cast<size_t>(limits.max_headers) || whole.used > bytes.size()))
    std::abort();
  return 0;
}
