//===- AtomicFile.h - Replace a file all or nothing -------------*- C++ -*-===//
//
// The one way the tools and libraries write a file a user keeps (.npy
// outputs, compiled kernels, tuning databases, candidate CSVs): a temporary
// file next to it, checked for write errors (a full filesystem), then a
// rename. A reader sees the old file or the new one, never a part. No
// signal handlers are installed (llvm::sys::fs::TempFile would), so the
// libraries can use it too.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_SUPPORT_ATOMICFILE_H
#define MOSS_SUPPORT_ATOMICFILE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace moss {

/// Writes `bytes` to a new temporary file next to `path` (in its
/// directory) and returns that file's path; removes it on a write error.
llvm::Expected<std::string> writeTemporaryFileFor(llvm::StringRef path,
                                                  llvm::ArrayRef<char> bytes);

/// Writes `bytes` to `path` through a temporary file and a rename. A
/// symbolic link is followed: its target is replaced, in the target's
/// directory, and the link stays. An existing file that is not a regular
/// file (a character device such as /dev/null, a FIFO) is written in place,
/// not replaced; a directory is refused. The directory must exist
/// (createParentDirectories makes it).
llvm::Error writeFileAtomically(llvm::StringRef path,
                                llvm::ArrayRef<char> bytes);

/// Writes `bytes` to `path` through a temporary file and a rename that
/// replaces whatever is at `path` (a link, a FIFO) without following or
/// opening it: for files the writer owns, such as cache entries, where a
/// planted link must not redirect the write. The directory must exist.
llvm::Error replaceFileAtomically(llvm::StringRef path,
                                  llvm::ArrayRef<char> bytes);

/// Creates the directories above `path` that are missing.
llvm::Error createParentDirectories(llvm::StringRef path);

} // namespace moss

#endif // MOSS_SUPPORT_ATOMICFILE_H
