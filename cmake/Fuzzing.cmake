# A fuzzing build (MOSS_BUILD_FUZZERS=ON): every library of ours is compiled
# with libFuzzer's coverage instrumentation, AddressSanitizer and
# UndefinedBehaviorSanitizer, and with assertions on, so that a broken
# invariant stops the fuzzer instead of passing silently. The LLVM and MLIR
# libraries are Debian's, uninstrumented. tests/fuzz links the targets with
# -fsanitize=fuzzer (libFuzzer's main); tools/scripts/fuzz.sh configures such
# a build with clang and runs them.

if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR
    "MOSS_BUILD_FUZZERS needs clang with libFuzzer (the Debian packages "
    "clang-14 and libclang-rt-14-dev): configure with "
    "-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14; "
    "${CMAKE_CXX_COMPILER_ID} was found.")
endif()

set(MOSS_SANITIZERS "address,undefined")
# UBSan reports abort, so libFuzzer keeps the input as a crash. -O1 builds
# in about half the time of -O3 and keeps the stack traces readable.
add_compile_options(-fsanitize=fuzzer-no-link,${MOSS_SANITIZERS}
  -fno-sanitize-recover=all -fno-omit-frame-pointer -gline-tables-only -O1
  -UNDEBUG)
add_link_options(-fsanitize=${MOSS_SANITIZERS})

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
check_cxx_source_compiles([[
  #include <cstddef>
  #include <cstdint>
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t *, size_t) { return 0; }
]] MOSS_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
if(NOT MOSS_HAVE_LIBFUZZER)
  message(FATAL_ERROR
    "${CMAKE_CXX_COMPILER} cannot link with -fsanitize=fuzzer: install "
    "libFuzzer (the Debian package libclang-rt-14-dev for clang-14).")
endif()
