#include "shared_dir.h"

namespace pagoda::test {

// PAGODA_SHARED_DIR is defined for this file only (CMakeLists.txt).
std::string shared_dir() {
  return PAGODA_SHARED_DIR;
}

}  // namespace pagoda::test
