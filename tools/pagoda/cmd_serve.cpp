// pagoda serve: the OpenAI-compatible HTTP server (src/server) in front of the batching
// engine. SIGTERM or SIGINT drains: new requests get 503, those in flight get
// --shutdown-grace seconds to finish before they are aborted, then the process exits 0.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine_flags.h"
#include "server/server.h"

namespace pagoda::cli {

int cmd_serve(int argc, char** argv) {
  std::vector<FlagSpec> specs = engine_flag_specs();
  specs.push_back({"--host", "", true, "address to listen on (default 127.0.0.1)"});
  specs.push_back({"--port", "", true, "port to listen on; 0 picks a free one (default 8000)"});
  specs.push_back({"--api-key", "", true, "require this bearer key on /v1 (or PAGODA_API_KEY)"});
  specs.push_back({"--served-model-name", "", true, "the model's name in the API (default: -m)"});
  specs.push_back(
      {"--max-waiting-requests", "", true,
       "answer 503 with Retry-After while this many requests wait (default: no limit)"});
  specs.push_back({"--max-request-body", "", true, "largest request body, e.g. 16MiB (default)"});
  specs.push_back(
      {"--http-threads", "", true, "connections served at once, streams included (default 256)"});
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
  FlagReader f(*args);
  sc.host = args->get_or("--host", sc.host);
  sc.port = static_cast<int>(f.integer("--port", sc.port, 0, 65535));
  sc.max_waiting_requests = static_cast<int>(f.integer("--max-waiting-requests", -1, 0, 1 << 30));
  sc.http_threads = static_cast<int>(f.integer("--http-threads", sc.http_threads, 4, 65536));
  const double grace = f.number("--shutdown-grace", 30, 0, 86400);
  if (Status s = f.status(); !s) return fail("serve", s);
  if (args->has("--max-request-body")) {
    auto b = parse_bytes(*args->get("--max-request-body"));
    if (!b) return fail("serve", b.status());
    if (*b < 1024) return fail("serve", invalid_argument("--max-request-body must be >= 1KiB"));
    sc.max_body_bytes = *b;
  }
  if (const char* k = std::getenv("PAGODA_API_KEY")) sc.api_key = k;
  sc.api_key = args->get_or("--api-key", sc.api_key);
  sc.served_model_name = args->get_or("--served-model-name", ec.model_path);

  // Every thread started from here on blocks SIGTERM/SIGINT; this one takes them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that leaves mid-write is an error return, not a kill

  if (args->has("--chat-template")) {
    const std::string path = *args->get("--chat-template");
    auto text = read_file(path);
    if (!text) return fail("serve", text.status().with_context("--chat-template"));
    if (text->empty())
      return fail("serve", invalid_argument("--chat-template '" + path + "' is empty"));
    sc.chat_template = std::move(text).value();
  } else {
    // The chat template travels in the model file; the engine does not keep its metadata.
    auto file = GgufFile::open(ec.model_path);
    if (!file) return fail("serve", file.status());
    if (auto t = (*file)->get_string("tokenizer.chat_template")) sc.chat_template = std::string(*t);
  }
  const double t0 = now_seconds();
  auto engine = Engine::create(ec);
  if (!engine) return fail("serve", engine.status());
  auto srv = server::Server::create(**engine, sc);
  if (!srv) return fail("serve", srv.status());
  if (Status s = (*srv)->bind(); !s) return fail("serve", s);
  std::thread http([&] { (*srv)->serve(); });
  const EngineStats st = (*engine)->stats();
  std::printf("pagoda serve: model '%s' loaded in %.1f s; KV pool %.1f MiB (%d blocks)\n",
              sc.served_model_name.c_str(), now_seconds() - t0, st.kv_pool_bytes / 1048576.0,
              st.kv_blocks_total);
  std::printf("pagoda serve: listening on http://%s:%d\n", sc.host.c_str(), (*srv)->port());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "pagoda serve: %s, draining (up to %.0f s)\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", grace);
  (*srv)->shutdown(grace);
  http.join();
  std::fprintf(stderr, "pagoda serve: stopped\n");
  return 0;
}

}  // namespace pagoda::cli
