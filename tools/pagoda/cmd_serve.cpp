// pagoda serve: the OpenAI-compatible HTTP server (src/server) in front of the batching
// engine. SIGTERM or SIGINT drains: new requests get 503, those in flight get
// --shutdown-grace seconds to finish before they are aborted, then the process exits 0.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine_flags.h"
#include "server/server.h"

namespace pagoda::cli {
namespace {

Status read_server_flags(const Args& args, server::ServerConfig* sc) {
  FlagReader f(args);
  server::HttpLimits& l = sc->limits;
  sc->host = args.get_or("--host", sc->host);
  sc->port = static_cast<int>(f.integer("--port", sc->port, 0, 65535));
  sc->max_waiting_requests = static_cast<int>(f.integer("--max-waiting-requests", -1, 0, 1 << 30));
  sc->http_threads = static_cast<int>(f.integer("--http-threads", sc->http_threads, 1, 1024));
  sc->max_json_depth =
      static_cast<int>(f.integer("--max-json-depth", sc->max_json_depth, 2, 10000));
  l.max_headers = static_cast<int>(f.integer("--max-headers", l.max_headers, 8, 100000));
  l.header_timeout_s = f.number("--header-timeout", l.header_timeout_s, 0.1, 3600);
  l.body_timeout_s = f.number("--body-timeout", l.body_timeout_s, 0.1, 86400);
  l.idle_timeout_s = f.number("--keep-alive-timeout", l.idle_timeout_s, 0.1, 3600);
  l.write_timeout_s = f.number("--write-timeout", l.write_timeout_s, 0.1, 86400);
  l.max_connections =
      static_cast<int>(f.integer("--max-connections", l.max_connections, 1, 1 << 20));
  PAGODA_RETURN_IF_ERROR(f.status());
  if (args.has("--max-request-body")) {
    PAGODA_ASSIGN_OR_RETURN(int64_t b, parse_bytes(*args.get("--max-request-body")));
    if (b < 1024) return invalid_argument("--max-request-body must be >= 1KiB");
    l.max_body_bytes = b;
  }
  if (args.has("--max-body-memory")) {
    PAGODA_ASSIGN_OR_RETURN(int64_t b, parse_bytes(*args.get("--max-body-memory")));
    if (b < l.max_body_bytes)
      return invalid_argument("--max-body-memory must be at least --max-request-body");
    l.max_buffered_bytes = b;
  }
  if (args.has("--max-header-bytes")) {
    PAGODA_ASSIGN_OR_RETURN(int64_t b, parse_bytes(*args.get("--max-header-bytes")));
    if (b < 1024 || b > (1 << 30))
      return invalid_argument("--max-header-bytes must be between 1KiB and 1GiB");
    l.max_header_bytes = static_cast<size_t>(b);
  }
  sc->open_health_metrics = args.has("--open-health-metrics");
  sc->api_key = args.get_or("--api-key", settings().api_key);
  if (sc->open_health_metrics && sc->api_key.empty())
    return invalid_argument("--open-health-metrics needs --api-key (without a key all is open)");
  return Status::ok();
}

// Each connection is a descriptor: raise the soft limit to the hard one, and hold the
// connection limit under what the process may open (model files, the engine, a margin).
void raise_fd_limit(server::HttpLimits* l) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  const rlim_t room = r.rlim_cur > 128 ? r.rlim_cur - 128 : 16;
  if (static_cast<rlim_t>(l->max_connections) > room) {
    std::fprintf(stderr,
                 "pagoda serve: --max-connections %d lowered to %llu (open-file limit %llu)\n",
                 l->max_connections, static_cast<unsigned long long>(room),
                 static_cast<unsigned long long>(r.rlim_cur));
    l->max_connections = static_cast<int>(room);
  }
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  std::vector<FlagSpec> specs = engine_flag_specs();
  specs.push_back({"--host", "", true, "address to listen on (default 127.0.0.1)"});
  specs.push_back({"--port", "", true, "port to listen on; 0 picks a free one (default 8000)"});
  specs.push_back({"--api-key", "", true, "require this bearer key on /v1 (or PAGODA_API_KEY)"});
  specs.push_back({"--served-model-name", "", true, "the model's name in the API (default: -m)"});
  specs.push_back(
      {"--max-waiting-requests", "", true,
       "answer 503 with Retry-After while this many requests wait (default: no limit)"});
  specs.push_back({"--max-request-body", "", true,
                   "largest request body, any transfer encoding, e.g. 16MiB (default; 413)"});
  specs.push_back({"--max-header-bytes", "", true,
                   "largest request line + headers, e.g. 64KiB (default; 431)"});
  specs.push_back({"--max-headers", "", true, "most header fields a request (default 128; 431)"});
  specs.push_back({"--header-timeout", "", true,
                   "seconds from a request's first byte to its last header (default 10; 408)"});
  specs.push_back({"--body-timeout", "", true,
                   "seconds from a request's headers to its last body byte (default 60; 408)"});
  specs.push_back({"--keep-alive-timeout", "", true,
                   "seconds an idle kept-alive connection stays open (default 5)"});
  specs.push_back({"--write-timeout", "", true,
                   "seconds a response write may make no progress before the connection is "
                   "closed (default 30)"});
  specs.push_back(
      {"--max-connections", "", true, "connections open at once; more get 503 (default 4096)"});
  specs.push_back({"--max-body-memory", "", true,
                   "request bytes held at once over all connections, e.g. 1GiB (default; 503)"});
  specs.push_back(
      {"--max-json-depth", "", true, "deepest nesting of a JSON request body (default 64; 400)"});
  specs.push_back({"--open-health-metrics", "", false,
                   "with --api-key, serve /health and /metrics without the key"});
  specs.push_back({"--http-threads", "", true,
                   "threads that parse requests, render templates and tokenize (default 4)"});
  specs.push_back({"--shutdown-grace", "", true,
                   "seconds in-flight requests get to finish on SIGTERM (default 30)"});
  specs.push_back({"--chat-template", "", true,
                   "Jinja chat template file to use instead of the model's (as vLLM's flag)"});
  specs.push_back({"--help", "-h", false, "show this help"});
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("serve", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("serve", "-m MODEL [--host H] [--port P] [flags]", specs).c_str());
    return 0;
  }
  EngineConfig ec;
  if (Status s = read_engine_flags(*args, &ec); !s) return fail("serve", s);

  server::ServerConfig sc;
  if (Status st = read_server_flags(*args, &sc); !st) return fail("serve", st);
  FlagReader f(*args);
  const double grace = f.number("--shutdown-grace", 30, 0, 86400);
  if (Status st = f.status(); !st) return fail("serve", st);
  sc.served_model_name = args->get_or("--served-model-name", ec.model_path);
  raise_fd_limit(&sc.limits);

  // Every thread started from here on blocks SIGTERM/SIGINT; one thread takes them, from
  // before the model loads: a signal during the load ends the process at once (nothing
  // is in flight yet), one after it drains the server.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that leaves mid-write is an error return, not a kill
  std::mutex mu;
  server::Server* live = nullptr;  // set once serving; guarded by mu
  std::thread signals([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    std::lock_guard<std::mutex> l(mu);
    if (!live) {
      std::fprintf(stderr, "pagoda serve: %s during start-up, exiting\n", name);
      std::fflush(nullptr);
      std::_Exit(0);
    }
    std::fprintf(stderr, "pagoda serve: %s, draining (up to %.0f s)\n", name, grace);
    live->shutdown(grace);
  });
  signals.detach();  // it ends the process or the server; never joined

  if (args->has("--chat-template")) {
    const std::string path = *args->get("--chat-template");
    auto text = read_file(path);
    if (!text) return fail("serve", text.status().with_context("--chat-template"));
    if (text->empty())
      return fail("serve", invalid_argument("--chat-template '" + path + "' is empty"));
    sc.chat_template = std::move(text).value();
  } else {
    // The chat template travels with the model; the engine does not keep its metadata.
    auto file = open_tensor_source(ec.model_path);
    if (!file) return fail("serve", file.status());
    auto t = load_chat_template(**file);
    if (!t) return fail("serve", t.status());
    sc.chat_template = std::move(t).value();
  }
  const double t0 = now_seconds();
  auto engine = Engine::create(ec);
  if (!engine) return fail("serve", engine.status());
  auto srv = server::Server::create(**engine, sc);
  if (!srv) return fail("serve", srv.status());
  if (Status s = (*srv)->bind(); !s) return fail("serve", s);
  const EngineStats st = (*engine)->stats();
  std::printf("pagoda serve: model '%s' loaded in %.1f s; KV pool %.1f MiB (%d blocks)\n",
              sc.served_model_name.c_str(), now_seconds() - t0, st.kv_pool_bytes / 1048576.0,
              st.kv_blocks_total);
  std::printf("pagoda serve: listening on http://%s:%d\n", sc.host.c_str(), (*srv)->port());
  std::fflush(stdout);
  {
    std::lock_guard<std::mutex> l(mu);
    live = srv->get();
  }
  (*srv)->serve();  // returns once shutdown() has stopped it
  std::fprintf(stderr, "pagoda serve: stopped\n");
  std::fflush(nullptr);
  // The engine's threads and the signal thread need no orderly end: exit now, so a slow
  // teardown never holds the process past --shutdown-grace.
  std::_Exit(0);
}

}  // namespace pagoda::cli
