//===- RuntimeError.h - Typed errors of the runtime -------------*- C++ -*-===//
//
// The failures a caller may want to tell apart (no GPU, a compile, a driver
// call) carry their kind in their type, so that the C API's error codes
// never depend on how a message is worded.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_RUNTIMEERROR_H
#define MOSS_RUNTIME_API_RUNTIMEERROR_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <string>

namespace moss::runtime {

enum class ErrorKind {
  /// No CUDA driver, or no GPU of the requested ordinal.
  NoDevice,
  /// NVRTC is missing, or it failed to compile a kernel.
  Compile,
  /// A CUDA driver call failed.
  Cuda,
};

/// An error of one ErrorKind with its message.
class RuntimeError : public llvm::ErrorInfo<RuntimeError> {
public:
  static char ID;
  RuntimeError(ErrorKind kind, std::string message)
      : kind(kind), text(std::move(message)) {}
  ErrorKind getKind() const { return kind; }
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;

private:
  ErrorKind kind;
  std::string text;
};

/// A RuntimeError as an llvm::Error.
llvm::Error makeRuntimeError(ErrorKind kind, const llvm::Twine &message);

/// An error for arguments the caller got wrong ("K=100 is not a multiple of
/// the scaling block 32"): untyped, so the C API reports it as an invalid
/// argument where it checks arguments.
llvm::Error invalidArgument(const llvm::Twine &message);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_API_RUNTIMEERROR_H
