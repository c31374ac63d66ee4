// Stands in for cmd_serve.cpp when cpp-httplib was not found at configure time (the GPU
// machines have no Debian package for it): every other command still builds.
#include <cstdio>

#include "commands.h"

namespace pagoda::cli {

int cmd_serve(int, char**) {
  std::fprintf(stderr,
               "error: this build of pagoda has no HTTP server (cpp-httplib was not found when "
               "it was configured; install libcpp-httplib-dev and reconfigure)\n");
  return 1;
}

}  // namespace pagoda::cli
