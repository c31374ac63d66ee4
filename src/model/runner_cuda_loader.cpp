// Opens the CUDA backend plugin (see make_cuda_runner in runner.h) on first use.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "core/log.h"
#include "model/runner.h"

namespace pagoda {
namespace {

using AbiFn = int (*)();
using MakeFn = void (*)(const TensorSource*, const RunnerOptions*,
                        Result<std::unique_ptr<ModelRunner>>*);
using MemFn = void (*)(int, Result<GpuMemory>*);

constexpr const char* kPluginName = "libpagoda_cuda.so";

std::mutex g_path_mu;
std::string g_plugin_path;  // set_cuda_plugin_path; "": the default places

// The plugin named by set_cuda_plugin_path, or the one beside the running executable (the
// build tree and an installed bin/ alike), or ../lib/ from it.
std::vector<std::string> candidate_paths() {
  {
    std::lock_guard<std::mutex> l(g_path_mu);
    if (!g_plugin_path.empty()) return {g_plugin_path};
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {kPluginName};  // the loader's own search path
  const auto dir = exe.parent_path();
  return {(dir / kPluginName).string(), (dir.parent_path() / "lib" / kPluginName).string()};
}

struct Plugin {
  MakeFn make = nullptr;
  MemFn memory = nullptr;
  std::string error;  // why it could not be used, when make is null
};

Plugin open_plugin() {
  Plugin p;
  std::string tried;
  for (const std::string& path : candidate_paths()) {
    if (path.find('/') != std::string::npos && access(path.c_str(), F_OK) != 0) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    // Never closed: runners it creates hold its code.
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      p.error = str_format("cannot load the CUDA backend %s: %s", path.c_str(), dlerror());
      return p;
    }
    auto abi = reinterpret_cast<AbiFn>(dlsym(h, "pagoda_cuda_plugin_abi"));
    auto make = reinterpret_cast<MakeFn>(dlsym(h, "pagoda_cuda_make_runner"));
    auto memory = reinterpret_cast<MemFn>(dlsym(h, "pagoda_cuda_memory_info"));
    if (!abi || !make || !memory) {
      p.error = str_format("%s is not a Pagoda CUDA backend (entry points missing)", path.c_str());
      return p;
    }
    if (abi() != kCudaPluginAbi) {
      p.error = str_format("%s was built for plugin ABI %d, this pagoda expects %d: rebuild both",
                           path.c_str(), abi(), kCudaPluginAbi);
      return p;
    }
    log_debug("CUDA backend: " + path);
    p.make = make;
    p.memory = memory;
    return p;
  }
  p.error = cuda_built()
                ? "the CUDA backend plugin is missing (looked for " + tried + ")"
                : "this build of Pagoda has no CUDA backend (configure with -DPAGODA_CUDA=ON)";
  return p;
}

const Plugin& plugin() {
  static std::once_flag once;
  static Plugin p;
  std::call_once(once, [] { p = open_plugin(); });
  return p;
}

}  // namespace

void set_cuda_plugin_path(const std::string& path) {
  std::lock_guard<std::mutex> l(g_path_mu);
  g_plugin_path = path;
}

Result<std::unique_ptr<ModelRunner>> make_cuda_runner(const TensorSource& file,
                                                      const RunnerOptions& options) {
  if (!plugin().make) return unsupported(plugin().error);
  Result<std::unique_ptr<ModelRunner>> out = internal_error("the CUDA backend returned nothing");
  plugin().make(&file, &options, &out);
  return out;
}

Result<GpuMemory> cuda_memory_info(int device) {
  if (!plugin().memory) return unsupported(plugin().error);
  Result<GpuMemory> out = internal_error("the CUDA backend returned nothing");
  plugin().memory(device, &out);
  return out;
}

bool cuda_built() {
#ifdef PAGODA_CUDA_PLUGIN_BUILT
  return true;
#else
  return false;
#endif
}

}  // namespace pagoda
