// Where the test data lives (../shared beside the checkout). A function rather than a
// compile definition in every test file, so that the test objects do not depend on the
// checkout's path and a build of another clone reuses them from ccache.
#pragma once

#include <string>

namespace pagoda::test {

std::string shared_dir();

}  // namespace pagoda::test
