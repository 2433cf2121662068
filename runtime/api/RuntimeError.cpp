//===- RuntimeError.cpp - Typed errors of the runtime ---------------------===//

#include "moss/Runtime/Api/RuntimeError.h"

#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace moss::runtime {

char RuntimeError::ID = 0;

void RuntimeError::log(raw_ostream &os) const { os << text; }

std::error_code RuntimeError::convertToErrorCode() const {
  return inconvertibleErrorCode();
}

Error makeRuntimeError(ErrorKind kind, const Twine &message) {
  return make_error<RuntimeError>(kind, message.str());
}

Error invalidArgument(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

} // namespace moss::runtime
