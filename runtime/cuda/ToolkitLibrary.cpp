//===- ToolkitLibrary.cpp - Opening a CUDA toolkit library ----------------===//

#include "moss/Runtime/Cuda/ToolkitLibrary.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

using namespace llvm;

void *moss::runtime::openToolkitLibrary(StringRef pathVariable,
                                        ArrayRef<StringRef> names,
                                        std::string &tried) {
  std::vector<std::string> paths;
  if (const char *path = std::getenv(pathVariable.str().c_str()); path && *path)
    paths.push_back(path);
  for (StringRef name : names)
    paths.push_back(name.str());
  const char *roots[] = {std::getenv("CUDA_HOME"), "/usr/local/cuda"};
  for (const char *root : roots)
    if (root && *root)
      for (StringRef name : names)
        paths.push_back(std::string(root) + "/lib64/" + name.str());
  tried.clear();
  for (const std::string &path : paths) {
    if (void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
      return library;
    tried += (tried.empty() ? "" : ", ") + path;
  }
  return nullptr;
}
