//===- Templates.h - Device templates embedded in the library --*- C++ -*-===//
//
// Every file under templates/moss/ is embedded at build time
// (cmake/EmbedTemplates.cmake) and handed to NVRTC as an in-memory header
// under its path relative to templates/, e.g. "moss/common/version.cuh".
// Kernel sources and templates include each other by that full path
// (#include "moss/ptx/wgmma.cuh"), so no include directory on disk is needed.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_NVRTC_TEMPLATES_H
#define MOSS_RUNTIME_NVRTC_TEMPLATES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace moss::runtime {

/// One embedded file: its path relative to templates/ and its contents.
struct EmbeddedFile {
  llvm::StringRef path;
  llvm::StringRef contents;
};

/// All embedded templates, sorted by path.
llvm::ArrayRef<EmbeddedFile> getTemplateFiles();

/// A 64-bit hash of every template's path and contents (the "template
/// hash" that enters kernel cache keys).
uint64_t getTemplateHash();

/// The contents of the template at `path` (e.g. "moss/common/version.cuh"),
/// or std::nullopt when there is none.
std::optional<llvm::StringRef> findTemplate(llvm::StringRef path);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_NVRTC_TEMPLATES_H
