//===- CacheCommand.cpp - moss-jit cache stats|clear ----------------------===//

#include "Commands.h"

#include "moss/Runtime/KernelCache.h"

#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace moss::jit {

cl::SubCommand cacheCommand("cache",
                            "Show or clear the kernel cache (stats|clear)");

namespace {
cl::opt<std::string> action(cl::Positional, cl::desc("<stats|clear>"),
                            cl::Required, cl::sub(cacheCommand));
} // namespace

int runCache() {
  // The default cache: MOSS_CACHE_DIR, else $XDG_CACHE_HOME/moss, else
  // ~/.cache/moss, as every kernel lookup resolves it.
  runtime::KernelCache cache;
  if (action == "stats") {
    cache.formatStats(outs());
    return 0;
  }
  if (action == "clear") {
    std::string directory = cache.getDirectory();
    if (Error error = cache.clear()) {
      errs() << "moss-jit cache: error: " << toString(std::move(error))
             << "\n";
      return 1;
    }
    outs() << "cleared " << (directory.empty() ? "the memory cache"
                                               : directory)
           << "\n";
    return 0;
  }
  errs() << "moss-jit cache: error: unknown action '" << action
         << "'; expected stats or clear\n";
  return 2;
}

} // namespace moss::jit
