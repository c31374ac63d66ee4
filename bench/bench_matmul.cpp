// Times matmul() on the matrix shapes of SmolLM2-135M for each weight type, at one token
// (decode, a GEMV) and 512 tokens (prefill, a GEMM), with 1 and 2 threads, and prints
// medians. Decode cycles through enough copies of the matrix to exceed the L3 cache, as a
// real decode step streams every weight from memory; prefill reuses one copy.
//
//   bench_matmul [--types q4_0,f16,...] [--threads 1,2] [--tokens 1,512] [--reps N] [--isa avx2]
//                [--clock cpu] [--reject off]
// Samples taken while other processes used more than 2% of a CPU are retaken (up to 40
// times per row, counted in the rej column); --reject off keeps them.
// --clock cpu times single-threaded runs by the thread's CPU time, which ignores time the
// thread spends descheduled when other work shares the machine (not valid for --threads 2).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "core/thread_pool.h"

namespace {

using pagoda::DType;
using pagoda::cpu::MatmulScratch;
using pagoda::cpu::WeightMatrix;

struct Shape {
  const char* name;
  int64_t rows, cols;
  int per_token;  // times it runs per token of the whole model
};

// q,k,v fused; gate,up fused; the tied output embedding.
const Shape kShapes[] = {
    {"qkv", 960, 576, 30},   {"o", 576, 576, 30},       {"gate_up", 3072, 576, 30},
    {"down", 576, 1536, 30}, {"output", 49152, 576, 1},
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

bool g_cpu_clock = false;
bool g_reject = true;
int g_max_rejects = 40;

struct CpuTicks {
  long long machine_busy = 0;  // all CPUs, in clock ticks
  long long self = 0;          // this process
};

// CPU time used by the whole machine and by this process, from /proc (Linux).
CpuTicks cpu_ticks() {
  CpuTicks t;
  if (FILE* f = std::fopen("/proc/stat", "r")) {
    long long v[8] = {};
    if (std::fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3],
                    &v[4], &v[5], &v[6], &v[7]) == 8)
      t.machine_busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // all but idle and iowait
    std::fclose(f);
  }
  if (FILE* f = std::fopen("/proc/self/stat", "r")) {
    char buf[1024];
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    if (const char* p = std::strrchr(buf, ')')) {
      long long utime = 0, stime = 0;
      if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &utime,
                      &stime) == 2)
        t.self = utime + stime;
    }
    std::fclose(f);
  }
  return t;
}

double now_s() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Other work on the machine skews timings: print the load next to the numbers.
std::string load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "load average unknown";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "load average %.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> types = {"f32",  "f16",  "bf16", "q8_0", "q4_0",
                                    "q4_1", "q4_k", "q5_k", "q6_k"};
  std::vector<int> threads = {1, 2};
  std::vector<int64_t> tokens = {1, 512};
  int reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--types") types = split(v);
    if (k == "--threads") {
      threads.clear();
      for (auto& s : split(v)) threads.push_back(std::atoi(s.c_str()));
    }
    if (k == "--tokens") {
      tokens.clear();
      for (auto& s : split(v)) tokens.push_back(std::atoll(s.c_str()));
    }
    if (k == "--reps") reps = std::atoi(v.c_str());
    if (k == "--clock") g_cpu_clock = v == "cpu";
    if (k == "--reject") g_reject = v != "off";
    if (k == "--isa") {
      if (v == "generic") pagoda::cpu::set_isa_override(pagoda::cpu::Isa::kGeneric);
      if (v == "avx2") pagoda::cpu::set_isa_override(pagoda::cpu::Isa::kAvx2);
    }
  }
  std::printf("isa %s, %s\n", std::string(pagoda::cpu::isa_name(pagoda::cpu::best_isa())).c_str(),
              load_average().c_str());
  std::printf("%-5s %-8s %6s %6s %4s %3s %10s %9s %8s\n", "type", "shape", "rows", "cols", "tok",
              "thr", "time_us", "GMAC/s", "GB/s");
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // type, threads, tokens -> seconds per token of the whole model's matmuls
  std::map<std::string, double> model_time;
  for (const std::string& tname : types) {
    DType t;
    // NF4 and the Q4_G types are internal (checkpoint folders): parse_dtype does not name
    // them.
    bool internal = false;
    for (DType it : {DType::kNF4, DType::kQ4_G64, DType::kQ4_G128}) {
      std::string name(pagoda::dtype_name(it));
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (tname == name || tname == pagoda::dtype_name(it)) t = it, internal = true;
    }
    if ((!internal && !pagoda::parse_dtype(tname, &t)) ||
        !pagoda::cpu::is_supported_weight_type(t)) {
      std::fprintf(stderr, "unsupported type %s\n", tname.c_str());
      return 1;
    }
    const int64_t block = pagoda::dtype_info(t).block_elems;
    for (const Shape& sh : kShapes) {
      if (sh.cols % block != 0) continue;
      std::vector<float> wf(static_cast<size_t>(sh.rows * sh.cols));
      for (float& f : wf) f = dist(rng);
      std::vector<uint8_t> wq(pagoda::row_bytes(t, sh.cols) * sh.rows);
      // IQ4_NL and NF4 have no quantizer but Q4_0's block shape (f16 d + 16 bytes of
      // nibbles), and MXFP4 takes any nibbles under an exponent byte: timing does not
      // depend on values.
      const DType qt = t == DType::kIQ4_NL || t == DType::kNF4 ? DType::kQ4_0 : t;
      if (t == DType::kMXFP4) {
        for (size_t i = 0; i < wq.size(); ++i)
          wq[i] = i % 17 == 0 ? 120 : static_cast<uint8_t>(rng());
      } else if (t == DType::kQ4_G64 || t == DType::kQ4_G128) {
        // Random codes under a small scale and a zero point in [0, 15].
        const size_t bb = pagoda::dtype_info(t).block_bytes;
        for (size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<uint8_t>(rng());
        for (size_t b = 0; b < wq.size(); b += bb) {
          const uint16_t d = pagoda::f32_to_fp16(0.01f);
          std::memcpy(&wq[b], &d, 2);
          wq[b + 2] &= 15;
        }
      } else {
        for (int64_t r = 0; r < sh.rows; ++r)
          if (!pagoda::cpu::quantize_row(qt, wf.data() + r * sh.cols,
                                         wq.data() + r * pagoda::row_bytes(t, sh.cols), sh.cols)
                   .is_ok())
            return 1;
      }
      auto first = WeightMatrix::from_gguf(t, wq.data(), sh.rows, sh.cols);
      if (!first.is_ok()) return 1;
      const size_t wbytes = first->bytes();
      for (int64_t n : tokens) {
        // Decode streams weights from DRAM: rotate over > 96 MB of copies.
        const size_t copies = n == 1 ? std::max<size_t>(1, (96u << 20) / wbytes + 1) : 1;
        std::vector<WeightMatrix> ws;
        for (size_t c = 0; c < copies; ++c)
          ws.push_back(WeightMatrix::from_gguf(t, wq.data(), sh.rows, sh.cols).value());
        std::vector<float> x(static_cast<size_t>(n * sh.cols)), y(static_cast<size_t>(n * sh.rows));
        for (float& f : x) f = dist(rng);
        for (int th : threads) {
          pagoda::ThreadPool pool(th);
          MatmulScratch scratch;
          const double macs = static_cast<double>(sh.rows) * sh.cols * n;
          // Each sample runs at least ~100 ms of calls (the CPU accounting below counts
          // in 10 ms ticks).
          size_t calls = 1, ci = 0;
          auto call = [&] {
            pagoda::cpu::matmul(ws[ci], x.data(), n, sh.cols, y.data(), sh.rows, pool, scratch);
            ci = (ci + 1) % ws.size();
          };
          call();
          const double t0 = now_s();
          call();
          const double one = std::max(1e-7, now_s() - t0);
          calls = std::max<size_t>(1, static_cast<size_t>(0.1 / one));
          std::vector<double> samples;
          int rejected = 0;
          while (static_cast<int>(samples.size()) < reps) {
            const CpuTicks c0 = cpu_ticks();
            const double s0 = now_s();
            for (size_t c = 0; c < calls; ++c) call();
            const double s1 = now_s();
            const CpuTicks c1 = cpu_ticks();
            // Reject samples during which other processes used more than a tick and 2% of one CPU
            // (the threads' spin-waits turn stolen cores into millisecond stalls).
            const double foreign =
                static_cast<double>((c1.machine_busy - c0.machine_busy) - (c1.self - c0.self)) /
                static_cast<double>(sysconf(_SC_CLK_TCK));
            if (g_reject && foreign > 0.02 * (s1 - s0) + 0.011 && rejected < g_max_rejects) {
              ++rejected;
              continue;
            }
            samples.push_back((s1 - s0) / static_cast<double>(calls));
          }
          const double sec = median(samples);
          std::printf("%-5s %-8s %6lld %6lld %4lld %3d %10.1f %9.1f %8.1f %5d\n", tname.c_str(),
                      sh.name, static_cast<long long>(sh.rows), static_cast<long long>(sh.cols),
                      static_cast<long long>(n), th, sec * 1e6, macs / sec * 1e-9,
                      static_cast<double>(wbytes) / sec * 1e-9, rejected);
          std::fflush(stdout);
          // Per token of a model step: prefill computes logits for the last token only.
          const double per_token =
              n == 1 ? sec * sh.per_token
                     : (std::strcmp(sh.name, "output") == 0 ? 0.0 : sec * sh.per_token / n);
          model_time[tname + " thr=" + std::to_string(th) + " tok=" + std::to_string(n)] +=
              per_token;
        }
      }
    }
  }
  std::printf(
      "\nwhole-model matmul estimate (SmolLM2-135M shapes; K quants only where cols %% 256 == "
      "0):\n");
  for (auto& [k, v] : model_time) std::printf("  %-24s %9.1f tok/s\n", k.c_str(), 1.0 / v);
  return 0;
}
