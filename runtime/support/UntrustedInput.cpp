//===- UntrustedInput.cpp - Reading files nobody vouches for --------------===//

#include "moss/Support/UntrustedInput.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"

using namespace llvm;

Expected<std::unique_ptr<MemoryBuffer>>
moss::readRegularFile(StringRef path, uint64_t maxBytes, StringRef what) {
  sys::fs::file_status status;
  if (std::error_code ec = sys::fs::status(path, status))
    return createStringError(ec, "cannot read " + what + " '" + path +
                                     "': " + ec.message());
  if (status.type() != sys::fs::file_type::regular_file)
    return createStringError(inconvertibleErrorCode(),
                             "cannot read " + what + " '" + path +
                                 "': not a regular file");
  if (status.getSize() > maxBytes)
    return createStringError(inconvertibleErrorCode(),
                             "cannot read " + what + " '" + path +
                                 "': " + Twine(status.getSize()) +
                                 " bytes; at most " + Twine(maxBytes));
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      MemoryBuffer::getFile(path, /*IsText=*/false,
                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return createStringError(buffer.getError(),
                             "cannot read " + what + " '" + path +
                                 "': " + buffer.getError().message());
  return std::move(*buffer);
}

Error moss::checkJsonNesting(StringRef text, unsigned maxDepth) {
  unsigned depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i; // the escaped character
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        return createStringError(inconvertibleErrorCode(),
                                 "JSON nested deeper than " + Twine(maxDepth) +
                                     " levels (at byte " + Twine(i) + ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return Error::success();
}
