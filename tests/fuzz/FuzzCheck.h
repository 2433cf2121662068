//===- FuzzCheck.h - Promises the fuzz targets hold -------------*- C++ -*-===//
//
// A broken promise of a reader (an error that says nothing, a value that
// does not survive its own writer) aborts like a crash, so that libFuzzer
// keeps the input as it keeps a sanitizer's finding.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TESTS_FUZZ_FUZZCHECK_H
#define MOSS_TESTS_FUZZ_FUZZCHECK_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace moss::fuzz {

/// Aborts with `what` when `ok` is false.
inline void check(bool ok, llvm::StringRef what) {
  if (ok)
    return;
  std::fprintf(stderr, "moss fuzz check failed: %.*s\n", int(what.size()),
               what.data());
  std::abort();
}

/// Consumes `error`, which must say what was wrong.
inline void checkMessage(llvm::Error error, llvm::StringRef what) {
  std::string message = llvm::toString(std::move(error));
  check(!message.empty(), what);
}

} // namespace moss::fuzz

#endif // MOSS_TESTS_FUZZ_FUZZCHECK_H
