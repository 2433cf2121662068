//===- UntrustedInput.h - Reading files nobody vouches for ------*- C++ -*-===//
//
// Tuning databases and shape files come from anywhere: a file that is not
// regular (a FIFO would block, /dev/zero never ends), one larger than its
// kind can be, or JSON nested deeper than any real one (the parser recurses)
// gets a one-line error before it is read or parsed.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_SUPPORT_UNTRUSTEDINPUT_H
#define MOSS_SUPPORT_UNTRUSTEDINPUT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>

namespace moss {

/// The contents of `path` if it is a regular file (after symbolic links) of
/// at most `maxBytes`; `what` names the file in errors ("the tuning
/// database").
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readRegularFile(llvm::StringRef path, uint64_t maxBytes, llvm::StringRef what);

/// Fails when `text`'s JSON arrays and objects nest deeper than `maxDepth`
/// (brackets inside strings do not count).
llvm::Error checkJsonNesting(llvm::StringRef text, unsigned maxDepth);

} // namespace moss

#endif // MOSS_SUPPORT_UNTRUSTEDINPUT_H
