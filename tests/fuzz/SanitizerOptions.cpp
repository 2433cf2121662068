//===- SanitizerOptions.cpp - Sanitizer defaults of the fuzz targets ------===//
//
// Linked into every target.
//
//===----------------------------------------------------------------------===//

/// LLVM's BumpPtrAllocator poisons fresh slabs in an AddressSanitizer build
/// and unpoisons each allocation: our instrumented code has the poisoning
/// copy of its inline slow path, Debian's uninstrumented MLIR libraries the
/// fast path that never unpoisons, and the mix reports a use-after-poison on
/// the first MLIRContext. Manual poisoning is turned off; every other check
/// stays.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

/// An undefined-behaviour report shows where it happened.
extern "C" const char *__ubsan_default_options() {
  return "print_stacktrace=1";
}
