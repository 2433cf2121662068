//===- AtomicFile.cpp - Replace a file all or nothing --------------------===//

#include "moss/Support/AtomicFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <unistd.h>

using namespace llvm;

namespace moss {

/// Writes `bytes` to the open file `fd` and closes it; the error names
/// `path`.
static Error writeAndClose(int fd, StringRef path, ArrayRef<char> bytes) {
  raw_fd_ostream os(fd, /*shouldClose=*/true);
  os.write(bytes.data(), bytes.size());
  os.close();
  if (!os.has_error())
    return Error::success();
  std::error_code ec = os.error();
  os.clear_error();
  return createStringError(ec, "cannot write '" + path + "': " + ec.message());
}

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
  if (Error e = writeAndClose(fd, path, bytes)) {
    sys::fs::remove(temporary);
    return std::move(e);
  }
  return std::string(temporary);
}

/// The file a write to `path` reaches: `path` with its symbolic links
/// followed, also a dangling one (the write creates its target).
static Expected<std::string> resolveSymlinks(StringRef path) {
  SmallString<256> current(path);
  // Linux's limit on the links one path lookup follows (ELOOP).
  for (int hops = 0; hops < 40; ++hops) {
    sys::fs::file_status status;
    if (sys::fs::status(current, status, /*follow=*/false) ||
        status.type() != sys::fs::file_type::symlink_file)
      return std::string(current);
    char target[4096];
    ssize_t length = ::readlink(current.c_str(), target, sizeof(target));
    if (length < 0 || size_t(length) == sizeof(target)) {
      std::error_code ec(length < 0 ? errno : ENAMETOOLONG,
                         std::generic_category());
      return createStringError(ec, "cannot write '" + path +
                                       "': cannot read the symbolic link '" +
                                       current + "': " + ec.message());
    }
    StringRef link(target, size_t(length));
    if (sys::path::is_absolute(link)) {
      current = link;
    } else {
      sys::path::remove_filename(current);
      sys::path::append(current, link);
    }
  }
  return createStringError(
      std::make_error_code(std::errc::too_many_symbolic_link_levels),
      "cannot write '" + path + "': too many levels of symbolic links");
}

/// Writes `bytes` into the existing file `path` in place.
static Error writeInPlace(StringRef path, ArrayRef<char> bytes) {
  int fd = -1;
  if (std::error_code ec = sys::fs::openFileForWrite(
          path, fd, sys::fs::CD_OpenExisting, sys::fs::OF_None))
    return createStringError(ec,
                             "cannot write '" + path + "': " + ec.message());
  return writeAndClose(fd, path, bytes);
}

Error writeFileAtomically(StringRef path, ArrayRef<char> bytes) {
  Expected<std::string> resolved = resolveSymlinks(path);
  if (!resolved)
    return resolved.takeError();
  StringRef target = *resolved;
  sys::fs::file_status status;
  if (!sys::fs::status(target, status)) {
    if (status.type() == sys::fs::file_type::directory_file)
      return createStringError(std::make_error_code(std::errc::is_a_directory),
                               "cannot write '" + path +
                                   "': it is a directory; expected a file");
    // A rename would replace a device or FIFO (/dev/null) with a regular
    // file, so those are written in place.
    if (status.type() != sys::fs::file_type::regular_file)
      return writeInPlace(target, bytes);
  }
  return replaceFileAtomically(target, bytes);
}

Error replaceFileAtomically(StringRef path, ArrayRef<char> bytes) {
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
