//===- ToolkitLibrary.cpp - Opening a CUDA toolkit library ----------------===//

#include "moss/Runtime/Cuda/ToolkitLibrary.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <vector>

using namespace llvm;

namespace {

StringRef getEnvironment(const char *name) {
  const char *value = std::getenv(name);
  return value ? StringRef(value) : StringRef();
}

/// The file the loader mapped for `library` (a name it searched for
/// becomes the path it found).
std::string getLoadedPath(void *library, const std::string &fallback) {
  struct link_map *map = nullptr;
  if (dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
      *map->l_name)
    return map->l_name;
  return fallback;
}

} // namespace

bool moss::runtime::isToolkitSearchSkipped() {
  StringRef skip = getEnvironment("MOSS_CUDA_SKIP_TOOLKIT");
  return !skip.empty() && skip != "0";
}

void *moss::runtime::openToolkitLibrary(StringRef pathVariable,
                                        ArrayRef<StringRef> names,
                                        std::string &tried,
                                        std::string *openedPath) {
  std::vector<std::string> paths;
  if (StringRef path = getEnvironment(pathVariable.str().c_str());
      !path.empty())
    paths.push_back(path.str());
  if (!isToolkitSearchSkipped()) {
    for (StringRef name : names)
      paths.push_back(name.str());
    for (StringRef root : {getEnvironment("CUDA_HOME"),
                           StringRef("/usr/local/cuda")})
      if (!root.empty())
        for (StringRef name : names)
          paths.push_back((Twine(root) + "/lib64/" + name).str());
  }
  // Pip's CUDA wheels (nvidia/cu13/lib), which moss_jit lists here.
  SmallVector<StringRef> directories;
  getEnvironment("MOSS_CUDA_LIBRARY_DIRS")
      .split(directories, ':', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef directory : directories)
    for (StringRef name : names)
      paths.push_back((Twine(directory) + "/" + name).str());
  tried.clear();
  for (const std::string &path : paths) {
    if (void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      if (openedPath)
        *openedPath = getLoadedPath(library, path);
      return library;
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (tried.empty())
    tried = "nothing: MOSS_CUDA_SKIP_TOOLKIT is set and neither $" +
            pathVariable.str() + " nor MOSS_CUDA_LIBRARY_DIRS is";
  return nullptr;
}
