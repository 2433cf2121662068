//===- Templates.cpp - Lookup in the embedded device templates ------------===//
//
// The table itself is generated (cmake/EmbedTemplates.cmake).
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Nvrtc/Templates.h"

#include <algorithm>

using namespace llvm;

namespace moss::runtime {

std::optional<StringRef> findTemplate(StringRef path) {
  ArrayRef<EmbeddedFile> files = getTemplateFiles();
  auto it = std::lower_bound(
      files.begin(), files.end(), path,
      [](const EmbeddedFile &file, StringRef p) { return file.path < p; });
  if (it == files.end() || it->path != path)
    return std::nullopt;
  return it->contents;
}

} // namespace moss::runtime
