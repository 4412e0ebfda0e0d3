// The XNNPACK backend's version, for the tuning cache's key. The 2022 library has no version
// call, so it is the Debian package's version that CMake read when kiln was configured.
#include <string>

#include "backends/backend.h"
#include "backends/xnnpack/library.h"

#ifndef KILN_XNNPACK_VERSION
#define KILN_XNNPACK_VERSION "unknown"
#endif

namespace kiln::backends::xnnpack {
namespace {

const VersionRegistrar kVersion(kName, [] { return std::string("XNNPACK " KILN_XNNPACK_VERSION); });

}  // namespace
}  // namespace kiln::backends::xnnpack
