//===- AtomicFile.cpp - Replace a file all or nothing --------------------===//

#include "moss/Support/AtomicFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace moss {

Expected<std::string> writeTemporaryFileFor(StringRef path,
                                            ArrayRef<char> bytes) {
  SmallString<256> model(path);
  model += ".tmp-%%%%%%%%";
  int fd = -1;
  SmallString<256> temporary;
  if (std::error_code ec = sys::fs::createUniqueFile(model, fd, temporary))
    return createStringError(ec, "cannot write '" + path +
                                     "': cannot create a temporary file "
                                     "next to it: " +
                                     ec.message());
  raw_fd_ostream os(fd, /*shouldClose=*/true);
  os.write(bytes.data(), bytes.size());
  os.close();
  if (os.has_error()) {
    std::error_code ec = os.error();
    os.clear_error();
    sys::fs::remove(temporary);
    return createStringError(ec,
                             "cannot write '" + path + "': " + ec.message());
  }
  return std::string(temporary);
}

Error writeFileAtomically(StringRef path, ArrayRef<char> bytes) {
  Expected<std::string> temporary = writeTemporaryFileFor(path, bytes);
  if (!temporary)
    return temporary.takeError();
  if (std::error_code ec = sys::fs::rename(*temporary, path)) {
    sys::fs::remove(*temporary);
    return createStringError(ec, "cannot rename '" + *temporary + "' to '" +
                                     path + "': " + ec.message());
  }
  return Error::success();
}

Error createParentDirectories(StringRef path) {
  SmallString<256> directory(path);
  sys::path::remove_filename(directory);
  if (directory.empty())
    return Error::success();
  if (std::error_code ec = sys::fs::create_directories(directory))
    return createStringError(ec, "cannot create the directory '" + directory +
                                     "': " + ec.message());
  return Error::success();
}

} // namespace moss
