// Pagoda's version: the one in CMake's project() call, and the source tree's
// `git describe` at build time ("unknown" when built outside git).
#pragma once

namespace pagoda {

const char* version();
const char* git_describe();

}  // namespace pagoda
