//===- Nvrtc.h - Compiling CUDA C++ with NVRTC -----------------*- C++ -*-===//
//
// NVRTC is opened with dlopen on first use (once, thread-safe), never linked,
// so a prebuilt kernel cache works on machines without the CUDA toolkit.
// Search order: $MOSS_NVRTC_PATH, libnvrtc.so.13, libnvrtc.so (the loader's
// path), then lib64/ of $CUDA_HOME and of /usr/local/cuda.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_NVRTC_NVRTC_H
#define MOSS_RUNTIME_NVRTC_NVRTC_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace moss::runtime {

/// A header handed to NVRTC in memory: `#include "name"` finds `contents`.
struct HeaderFile {
  std::string name;
  std::string contents;
};

/// What to compile for, and how.
struct CompileOptions {
  /// The target, e.g. "sm_90a" or "sm_100a" ("compute_90a" gives PTX only).
  /// Empty means getDefaultArch().
  std::string arch;
  /// Flags appended after the defaults, e.g. "-lineinfo", "-DTILE_M=128".
  std::vector<std::string> flags;
  /// Headers besides the embedded templates.
  std::vector<HeaderFile> headers;
  /// Also hand NVRTC every embedded template (see Templates.h).
  bool includeTemplates = true;
  /// Pass -minimal: faster compiles, without textures, surfaces, device-side
  /// launches and the CUDA runtime API's types (none of which kernels here
  /// use).
  bool minimal = true;
  /// The source's name in NVRTC's diagnostics.
  std::string programName = "moss_kernel.cu";
};

/// What NVRTC produced.
struct CompileResult {
  /// PTX text (without the trailing NUL).
  std::string ptx;
  /// The cubin (ELF); empty when compiling for a virtual "compute_" arch.
  std::string cubin;
  /// NVRTC's log (warnings); empty when clean.
  std::string log;
  /// Wall time of the compilation, in seconds (library loading excluded).
  double seconds = 0;
};

/// NVRTC's version.
struct NvrtcVersion {
  int major = 0;
  int minor = 0;
  /// "13.0".
  std::string toString() const;
};

/// The loaded NVRTC's version; fails with "NVRTC (libnvrtc.so.13) not
/// found: ..." when no library could be opened.
llvm::Expected<NvrtcVersion> getNvrtcVersion();

/// The file the loaded NVRTC came from (see openToolkitLibrary for where
/// it is looked for).
llvm::Expected<std::string> getNvrtcLibraryPath();

/// True when NVRTC could be loaded.
bool isNvrtcAvailable();

/// The arch used when CompileOptions::arch is empty: device 0's (see
/// getArchForComputeCapability) when a GPU is present, else "sm_90a".
/// Queried once.
std::string getDefaultArch();

/// `options` with the arch filled in (getDefaultArch() when empty).
CompileOptions resolveCompileOptions(const CompileOptions &options);

/// The exact flags compileCuda passes to NVRTC for `options`: -arch, -std,
/// -minimal, then the caller's. Fails when the arch is empty or not of the
/// form sm_NN[a|f] / compute_NN[a|f].
llvm::Expected<std::vector<std::string>>
getNvrtcFlags(const CompileOptions &options);

/// Compiles `source` to PTX and a cubin. On failure the error holds NVRTC's
/// full log.
llvm::Expected<CompileResult> compileCuda(llvm::StringRef source,
                                          const CompileOptions &options);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_NVRTC_NVRTC_H
