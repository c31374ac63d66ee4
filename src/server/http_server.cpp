#include "server/http_server.h"

#include <array>
#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "server/http_reader.h"

namespace pagoda::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// Bytes of a pipelined next request kept while the current one is answered; past this
// the connection stops reading until the answer is out.
constexpr size_t kPipelineCap = 64 << 10;
// After a response that closes the connection the server stops sending and discards what
// the client still sends (the rest of a refused body, say) until it has been quiet this
// long, or at most kLingerMaxSeconds, so the client reads the response instead of a reset.
constexpr double kLingerSeconds = 1.0;
constexpr double kLingerMaxSeconds = 5.0;

const char* reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

std::string http_date() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// Runs handlers that parse, render and tokenize, off the event loop.
class WorkerPool {
 public:
  explicit WorkerPool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~WorkerPool() { stop(); }
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_ && threads_.empty()) return;
      stop_ = true;
      tasks_.clear();
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !tasks_.empty(); });
        if (stop_) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

// The loop as other threads see it: gone (null) once the server is torn down, so a late
// wake-up from the engine's thread posts nothing.
struct LoopHandle {
  std::mutex mu;
  asio::io_context* loop = nullptr;
  template <class F>
  void post(F&& f) {
    std::lock_guard<std::mutex> l(mu);
    if (loop) asio::post(*loop, std::forward<F>(f));
  }
};

struct Route {
  std::string method, path;
  HttpHandler handler;
  bool on_loop = false;
};

class Connection;

}  // namespace

struct HttpServer::Impl {
  Impl(HttpLimits l, int workers)
      : limits(l),
        acceptor(loop),
        accept_retry(loop),
        pool(workers),
        handle(std::make_shared<LoopHandle>()) {
    handle->loop = &loop;
  }
  ~Impl();

  void accept();
  void dispatch(const std::shared_ptr<Connection>& c, HttpRequest req);
  HttpResponse error(int status, const std::string& message) const {
    if (error_response) return error_response(status, message);
    HttpResponse r;
    r.status = status;
    r.content_type = "text/plain";
    r.body = message;
    return r;
  }

  const HttpLimits limits;
  asio::io_context loop{1};
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  WorkerPool pool;
  std::shared_ptr<LoopHandle> handle;
  std::vector<Route> routes;
  std::function<std::optional<HttpResponse>(const HttpRequest&)> guard;
  std::function<HttpResponse(int, const std::string&)> error_response;
  std::set<std::shared_ptr<Connection>> conns;  // the loop's thread only
  std::atomic<int> n_conns{0};
  int64_t buffered = 0;  // request bytes held by connections (the loop's thread only)
  std::atomic<bool> stopped{false};
  int port = 0;
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl& srv, tcp::socket s)
      : srv_(srv),
        sock_(std::move(s)),
        timer_(srv.loop),
        wake_pending_(std::make_shared<std::atomic<bool>>(false)) {}

  void start() { begin_request(); }

  // The response to the request being handled (on the loop).
  void respond(HttpResponse r) {
    if (closed_) return;  // dropping r aborts its work
    charge(in_.size());   // the request's body is no longer held
    if (r.pending) {
      pending_ = std::move(r.pending);
      pending_->set_waker(make_waker());
      return;
    }
    phase_ = Phase::kResponding;
    keep_alive_ = !r.close && req_version_ >= 11 && !req_close_ && !srv_.stopped;
    const bool chunked = r.stream && req_version_ >= 11;
    if (r.stream && !chunked) keep_alive_ = false;  // HTTP/1.0: the body ends with the close
    std::string head = str_format("HTTP/1.1 %d %s\r\n", r.status, reason(r.status));
    head += "Date: " + http_date() + "\r\n";
    if (!r.content_type.empty()) head += "Content-Type: " + r.content_type + "\r\n";
    for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
    if (chunked)
      head += "Transfer-Encoding: chunked\r\n";
    else if (!r.stream)
      head += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    if (!keep_alive_) head += "Connection: close\r\n";
    head += "\r\n";
    out_ += head;
    chunked_ = chunked;
    if (r.stream) {
      stream_ = std::move(r.stream);
      response_complete_ = false;
      stream_->set_waker(make_waker());
    } else {
      out_ += r.body;
      response_complete_ = true;
    }
    write_out();
  }

  void respond_error(int status, const std::string& message) {
    HttpResponse r = srv_.error(status, message);
    r.close = true;
    respond(std::move(r));
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    auto self = shared_from_this();  // erasing it from the set must not end it mid-call
    clear_deadline();
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    stream_.reset();
    pending_.reset();
    charge(0);
    if (srv_.conns.erase(self)) --srv_.n_conns;
  }

  // Sets what this connection holds of srv_.buffered; false when the total is over.
  bool charge(size_t bytes) {
    srv_.buffered += static_cast<int64_t>(bytes) - charged_;
    charged_ = static_cast<int64_t>(bytes);
    return bytes == 0 || srv_.buffered <= srv_.limits.max_buffered_bytes;
  }

  void set_request_info(int version, bool wants_close) {
    req_version_ = version;
    req_close_ = wants_close;
  }

 private:
  enum class Phase { kReading, kHandling, kResponding, kLingering };
  enum class Deadline { kIdle, kHeader, kBody, kWrite, kLinger };

  void begin_request() {
    reader_ = std::make_unique<RequestReader>(srv_.limits);
    phase_ = Phase::kReading;
    got_bytes_ = false;
    continue_sent_ = false;
    body_deadline_ = false;
    req_version_ = 11;
    req_close_ = false;
    set_deadline(srv_.limits.idle_timeout_s, Deadline::kIdle);
    parse();
  }

  void parse() {
    if (!in_.empty()) {
      if (!got_bytes_) {
        got_bytes_ = true;
        set_deadline(srv_.limits.header_timeout_s, Deadline::kHeader);
      }
      in_.erase(0, reader_->feed(in_));
    }
    if (!charge(in_.size() + reader_->body_bytes()))
      return respond_error(503, "the server holds too many request bodies at once; retry later");
    switch (reader_->state()) {
      case RequestReader::State::kError:
        return respond_error(reader_->error_status(), reader_->error_message());
      case RequestReader::State::kDone: {
        clear_deadline();
        phase_ = Phase::kHandling;
        HttpRequest req = reader_->take();
        auto self = shared_from_this();
        srv_.dispatch(self, std::move(req));
        read();  // to notice a client that leaves while its request runs
        return;
      }
      case RequestReader::State::kNeedMore:
        break;
    }
    if (reader_->headers_done() && !body_deadline_) {
      body_deadline_ = true;
      set_deadline(srv_.limits.body_timeout_s, Deadline::kBody);
      if (reader_->expects_continue() && !continue_sent_) {
        continue_sent_ = true;
        out_ += "HTTP/1.1 100 Continue\r\n\r\n";
        write_out();
      }
    }
    read();
  }

  void read() {
    if (reading_ || closed_) return;
    if (phase_ != Phase::kReading && phase_ != Phase::kLingering && in_.size() >= kPipelineCap)
      return;
    reading_ = true;
    sock_.async_read_some(
        asio::buffer(rbuf_),
        [self = shared_from_this()](error_code ec, size_t n) { self->on_read(ec, n); });
  }

  void on_read(error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) return close();  // the client closed or reset: whatever it asked is dropped
    if (phase_ == Phase::kLingering) {
      if (std::chrono::steady_clock::now() < linger_end_)
        set_deadline(kLingerSeconds, Deadline::kLinger);
      return read();
    }
    in_.append(rbuf_.data(), n);
    if (phase_ == Phase::kReading) return parse();
    read();
  }

  std::function<void()> make_waker() {
    return [weak = weak_from_this(), handle = srv_.handle, flag = wake_pending_] {
      if (flag->exchange(true)) return;  // one wake-up is already on its way
      handle->post([weak] {
        if (auto c = weak.lock()) c->pump();
      });
    };
  }

  // Takes what the pending response or the stream has ready.
  void pump() {
    wake_pending_->store(false);
    if (closed_) return;
    if (pending_) {
      if (auto r = pending_->poll()) {
        pending_.reset();
        respond(std::move(*r));
      }
      return;
    }
    if (!stream_ || writing_) return;  // after the write completes
    std::string data;
    const bool end = stream_->pull(&data);
    if (!data.empty()) {
      if (chunked_) {
        out_ += str_format("%zx\r\n", data.size());
        out_ += data;
        out_ += "\r\n";
      } else {
        out_ += data;
      }
    }
    if (end) {
      if (chunked_) out_ += "0\r\n\r\n";
      stream_.reset();
      response_complete_ = true;
    }
    write_out();
  }

  void write_out() {
    if (writing_ || closed_) return;
    if (out_.empty()) {
      if (phase_ == Phase::kResponding && response_complete_) finish_response();
      return;
    }
    writing_ = true;
    wbuf_.swap(out_);
    out_.clear();
    if (phase_ == Phase::kResponding) set_deadline(srv_.limits.write_timeout_s, Deadline::kWrite);
    asio::async_write(sock_, asio::buffer(wbuf_),
                      [self = shared_from_this()](error_code ec, size_t) { self->on_write(ec); });
  }

  void on_write(error_code ec) {
    writing_ = false;
    wbuf_.clear();
    if (closed_) return;
    if (ec) return close();
    if (phase_ == Phase::kResponding) clear_deadline();
    if (stream_) return pump();
    write_out();
  }

  void finish_response() {
    if (keep_alive_) return begin_request();  // a pipelined request may be waiting in in_
    // Half-close, then drain what the client still sends until it closes or the linger
    // ends: closing with unread data would reset the connection and lose the response.
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    phase_ = Phase::kLingering;
    linger_end_ = std::chrono::steady_clock::now() + seconds(kLingerMaxSeconds);
    in_.clear();
    set_deadline(kLingerSeconds, Deadline::kLinger);
    read();
  }

  void set_deadline(double s, Deadline what) {
    deadline_ = what;
    timer_.expires_after(seconds(s));
    timer_.async_wait([self = shared_from_this(), gen = ++timer_gen_](error_code ec) {
      if (!ec && gen == self->timer_gen_) self->on_deadline();
    });
  }
  void clear_deadline() {
    ++timer_gen_;
    timer_.cancel();
  }

  void on_deadline() {
    if (closed_) return;
    switch (deadline_) {
      case Deadline::kIdle:
        return close();  // a kept-alive connection with nothing new
      case Deadline::kHeader:
        return respond_error(408, str_format("the request's headers did not arrive within %g s",
                                             srv_.limits.header_timeout_s));
      case Deadline::kBody:
        return respond_error(408, str_format("the request's body did not arrive within %g s",
                                             srv_.limits.body_timeout_s));
      case Deadline::kWrite:
      case Deadline::kLinger:
        return close();  // a client that does not read
    }
  }

  HttpServer::Impl& srv_;
  tcp::socket sock_;
  asio::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  Deadline deadline_ = Deadline::kIdle;
  std::chrono::steady_clock::time_point linger_end_;
  std::array<char, 16384> rbuf_{};
  std::string in_;    // received, not yet parsed
  std::string out_;   // to write next
  std::string wbuf_;  // being written
  std::unique_ptr<RequestReader> reader_;
  Phase phase_ = Phase::kReading;
  bool reading_ = false, writing_ = false, closed_ = false;
  bool got_bytes_ = false, continue_sent_ = false, body_deadline_ = false;
  int req_version_ = 11;
  bool req_close_ = false;
  bool keep_alive_ = true, chunked_ = false, response_complete_ = false;
  int64_t charged_ = 0;  // this connection's part of srv_.buffered
  std::shared_ptr<BodySource> stream_;
  std::shared_ptr<PendingResponse> pending_;
  std::shared_ptr<std::atomic<bool>> wake_pending_;
};

bool wants_close(const HttpRequest& req) {
  const auto v = req.header("Connection");
  if (!v) return req.version < 11;
  if (req.version < 11) return true;  // HTTP/1.0 keep-alive is not offered
  // A comma-separated token list; "close" must be one of its tokens.
  std::string_view rest = *v;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view token = rest.substr(0, comma);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
      token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (iequals_ascii(token, "close")) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

HttpServer::Impl::~Impl() {
  pool.stop();
  {
    std::lock_guard<std::mutex> l(handle->mu);
    handle->loop = nullptr;
  }
  for (const auto& c : std::vector<std::shared_ptr<Connection>>(conns.begin(), conns.end()))
    c->close();
}

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket sock) {
    if (stopped) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors (EMFILE) and the like: try again shortly rather than spin.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](error_code e) {
        if (!e && !stopped) accept();
      });
      return;
    }
    if (static_cast<int>(conns.size()) >= limits.max_connections) {
      // Answered at once rather than left in the backlog, so the client knows why.
      HttpResponse r = error(503, "the server has too many open connections; retry later");
      auto text = std::make_shared<std::string>(str_format(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
          "Retry-After: 1\r\nConnection: close\r\n\r\n%s",
          r.content_type.c_str(), r.body.size(), r.body.c_str()));
      auto s = std::make_shared<tcp::socket>(std::move(sock));
      asio::async_write(*s, asio::buffer(*text), [s, text](error_code, size_t) {
        error_code e;
        s->shutdown(tcp::socket::shutdown_both, e);
        s->close(e);
      });
    } else {
      error_code e;
      sock.set_option(tcp::no_delay(true), e);  // stream tokens as they come
      auto c = std::make_shared<Connection>(*this, std::move(sock));
      conns.insert(c);
      ++n_conns;
      c->start();
    }
    accept();
  });
}

void HttpServer::Impl::dispatch(const std::shared_ptr<Connection>& c, HttpRequest req) {
  c->set_request_info(req.version, wants_close(req));
  const Route* route = nullptr;
  std::string allowed;
  for (const Route& r : routes) {
    if (r.path != req.path) continue;
    if (r.method == req.method) route = &r;
    allowed += (allowed.empty() ? "" : ", ") + r.method;
  }
  if (!route) {
    if (allowed.empty())
      return c->respond(
          error(404, "no route " + req.method.substr(0, 16) + " " + req.path.substr(0, 256)));
    HttpResponse r = error(405, "the method " + req.method.substr(0, 16) + " is not allowed on " +
                                    req.path + " (allowed: " + allowed + ")");
    r.headers.emplace_back("Allow", allowed);
    return c->respond(std::move(r));
  }
  if (guard)
    if (auto r = guard(req)) return c->respond(std::move(*r));
  const auto run = [this](const HttpHandler& h, const HttpRequest& q) {
    try {
      return h(q);
    } catch (const std::exception& e) {
      return error(500, std::string("internal error: ") + e.what());
    } catch (...) {
      return error(500, "internal error");
    }
  };
  if (route->on_loop) return c->respond(run(route->handler, req));
  pool.post([this, run, h = route->handler, q = std::move(req), conn = c]() mutable {
    HttpResponse r = run(h, q);
    // The connection moves into the loop's task, so its last reference never ends on
    // this thread.
    handle->post(
        [conn = std::move(conn), r = std::move(r)]() mutable { conn->respond(std::move(r)); });
  });
}

HttpServer::HttpServer(HttpLimits limits, int worker_threads)
    : impl_(std::make_shared<Impl>(limits, std::max(1, worker_threads))) {}

HttpServer::~HttpServer() {
  stop();
  impl_.reset();
}

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler handler,
                       bool on_loop) {
  impl_->routes.push_back(Route{method, path, std::move(handler), on_loop});
}

void HttpServer::set_guard(std::function<std::optional<HttpResponse>(const HttpRequest&)> g) {
  impl_->guard = std::move(g);
}

void HttpServer::set_error_response(
    std::function<HttpResponse(int status, const std::string& message)> f) {
  impl_->error_response = std::move(f);
}

Status HttpServer::bind(const std::string& host, int port) {
  error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return invalid_argument("'" + host + "' is not an IP address to listen on");
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return io_error(
        str_format("cannot listen on %s:%d: %s", host.c_str(), port, ec.message().c_str()));
  impl_->port = a.local_endpoint().port();
  return Status::ok();
}

int HttpServer::port() const {
  return impl_->port;
}

void HttpServer::run() {
  if (impl_->stopped) return;
  impl_->accept();
  impl_->loop.run();
}

void HttpServer::stop() {
  if (impl_->stopped.exchange(true)) return;
  Impl* impl = impl_.get();
  asio::post(impl->loop, [impl] {
    error_code ec;
    impl->acceptor.close(ec);
    impl->accept_retry.cancel();
    for (const auto& c :
         std::vector<std::shared_ptr<Connection>>(impl->conns.begin(), impl->conns.end()))
      c->close();
    impl->loop.stop();
  });
}

int HttpServer::open_connections() const {
  return impl_->n_conns;
}

}  // namespace pagoda::server
