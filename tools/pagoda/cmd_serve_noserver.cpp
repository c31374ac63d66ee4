// Stands in for cmd_serve.cpp when Boost.Beast was not found at configure time (the GPU
// machines lack Debian's libboost-dev): every other command still builds.
#include <cstdio>

#include "commands.h"

namespace pagoda::cli {

int cmd_serve(int, char**) {
  std::fprintf(stderr,
               "error: this build of pagoda has no HTTP server (Boost.Beast was not found when "
               "it was configured; install libboost-dev and reconfigure)\n");
  return 1;
}

}  // namespace pagoda::cli
