//===- Nvrtc.cpp - Compiling CUDA C++ with NVRTC --------------------------===//

#include "moss/Runtime/Nvrtc/Nvrtc.h"
#include "moss/Runtime/Cuda/ToolkitLibrary.h"

#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Nvrtc/Templates.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Regex.h"

#include <chrono>
#include <cstdlib>
#include <dlfcn.h>
#include <nvrtc.h>

using namespace llvm;

namespace moss::runtime {
namespace {

/// The NVRTC entry points we use. nvrtc.h exports plain C names (no _v2
/// remapping), so dlsym finds each under its own name.
struct NvrtcApi {
#define MOSS_NVRTC_FUNCTIONS(X)                                                \
  X(nvrtcVersion)                                                              \
  X(nvrtcGetErrorString)                                                       \
  X(nvrtcCreateProgram)                                                        \
  X(nvrtcDestroyProgram)                                                       \
  X(nvrtcCompileProgram)                                                       \
  X(nvrtcGetPTXSize)                                                           \
  X(nvrtcGetPTX)                                                               \
  X(nvrtcGetCUBINSize)                                                         \
  X(nvrtcGetCUBIN)                                                             \
  X(nvrtcGetProgramLogSize)                                                    \
  X(nvrtcGetProgramLog)
#define MOSS_NVRTC_FIELD(name) decltype(&::name) name = nullptr;
  MOSS_NVRTC_FUNCTIONS(MOSS_NVRTC_FIELD)
#undef MOSS_NVRTC_FIELD
  NvrtcVersion version;
};

struct NvrtcState {
  NvrtcApi api;
  std::string path;
  std::string error;
};

NvrtcState loadNvrtc() {
  NvrtcState state;
  std::string tried;
  void *library =
      openToolkitLibrary("MOSS_NVRTC_PATH", {"libnvrtc.so.13", "libnvrtc.so"},
                         tried, &state.path);
  if (!library) {
    state.error = "NVRTC (libnvrtc.so.13) not found; tried " + tried +
                  ". Install the CUDA toolkit (or set CUDA_HOME), pip "
                  "install nvidia-cuda-nvrtc (moss_jit finds it), or set "
                  "MOSS_NVRTC_PATH to the library";
    return state;
  }
  std::string missing;
  NvrtcApi &api = state.api;
#define MOSS_NVRTC_RESOLVE(name)                                               \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, #name));      \
  if (!api.name)                                                               \
    missing += std::string(missing.empty() ? "" : ", ") + #name;
  MOSS_NVRTC_FUNCTIONS(MOSS_NVRTC_RESOLVE)
#undef MOSS_NVRTC_RESOLVE
  if (!missing.empty()) {
    state.error = "the NVRTC library found lacks " + missing +
                  " (it is older than CUDA 11.1)";
    return state;
  }
  api.nvrtcVersion(&api.version.major, &api.version.minor);
  return state;
}

const NvrtcState &getNvrtcState() {
  static const NvrtcState state = loadNvrtc();
  return state;
}

Expected<const NvrtcApi &> getNvrtcApi() {
  const NvrtcState &state = getNvrtcState();
  if (!state.error.empty())
    return makeRuntimeError(ErrorKind::Compile, state.error);
  return state.api;
}

Error makeNvrtcError(const NvrtcApi &api, nvrtcResult result, StringRef call) {
  return makeRuntimeError(ErrorKind::Compile,
                          call + " failed: " + api.nvrtcGetErrorString(result));
}

/// Destroys the program on every path out of compileCuda.
struct ProgramGuard {
  const NvrtcApi &api;
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program)
      api.nvrtcDestroyProgram(&program);
  }
};

} // namespace

std::string NvrtcVersion::toString() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

Expected<NvrtcVersion> getNvrtcVersion() {
  Expected<const NvrtcApi &> api = getNvrtcApi();
  if (!api)
    return api.takeError();
  return api->version;
}

Expected<std::string> getNvrtcLibraryPath() {
  if (Expected<const NvrtcApi &> api = getNvrtcApi(); !api)
    return api.takeError();
  return getNvrtcState().path;
}

bool isNvrtcAvailable() { return getNvrtcState().error.empty(); }

std::string getDefaultArch() {
  static const std::string arch = [] {
    Expected<std::string> deviceArch = queryDeviceArch(0);
    if (deviceArch)
      return *deviceArch;
    consumeError(deviceArch.takeError());
    return std::string("sm_90a");
  }();
  return arch;
}

CompileOptions resolveCompileOptions(const CompileOptions &options) {
  CompileOptions resolved = options;
  if (resolved.arch.empty())
    resolved.arch = getDefaultArch();
  return resolved;
}

Expected<std::vector<std::string>>
getNvrtcFlags(const CompileOptions &options) {
  static const Regex archPattern("^(sm|compute)_[0-9]+[af]?$");
  if (!archPattern.match(options.arch))
    return createStringError(inconvertibleErrorCode(),
                             "invalid NVRTC arch '" + options.arch +
                                 "': expected sm_NN[a|f] or compute_NN[a|f], "
                                 "e.g. sm_90a");
  std::vector<std::string> flags = {"-arch=" + options.arch, "-std=c++17"};
  if (options.minimal)
    flags.push_back("-minimal");
  flags.insert(flags.end(), options.flags.begin(), options.flags.end());
  return flags;
}

Expected<CompileResult> compileCuda(StringRef source,
                                    const CompileOptions &options) {
  Expected<const NvrtcApi &> apiOrError = getNvrtcApi();
  if (!apiOrError)
    return apiOrError.takeError();
  const NvrtcApi &api = *apiOrError;
  CompileOptions resolved = resolveCompileOptions(options);
  Expected<std::vector<std::string>> flags = getNvrtcFlags(resolved);
  if (!flags)
    return flags.takeError();

  auto start = std::chrono::steady_clock::now();
  SmallVector<const char *> headerNames, headerContents;
  if (resolved.includeTemplates) {
    // NVRTC wants NUL-terminated strings; the embedded arrays end in one.
    for (const EmbeddedFile &file : getTemplateFiles()) {
      headerNames.push_back(file.path.data());
      headerContents.push_back(file.contents.data());
    }
  }
  for (const HeaderFile &header : resolved.headers) {
    headerNames.push_back(header.name.c_str());
    headerContents.push_back(header.contents.c_str());
  }
  std::string sourceCopy = source.str();

  ProgramGuard guard{api};
  nvrtcResult result = api.nvrtcCreateProgram(
      &guard.program, sourceCopy.c_str(), resolved.programName.c_str(),
      static_cast<int>(headerNames.size()), headerContents.data(),
      headerNames.data());
  if (result != NVRTC_SUCCESS)
    return makeNvrtcError(api, result, "nvrtcCreateProgram");

  SmallVector<const char *> flagPointers;
  for (const std::string &flag : *flags)
    flagPointers.push_back(flag.c_str());
  nvrtcResult compiled = api.nvrtcCompileProgram(
      guard.program, static_cast<int>(flagPointers.size()),
      flagPointers.data());

  CompileResult out;
  size_t logSize = 0;
  if (api.nvrtcGetProgramLogSize(guard.program, &logSize) == NVRTC_SUCCESS &&
      logSize > 1) {
    out.log.resize(logSize);
    api.nvrtcGetProgramLog(guard.program, out.log.data());
    out.log.resize(logSize - 1);
  }
  if (compiled != NVRTC_SUCCESS) {
    std::string command;
    for (const std::string &flag : *flags)
      command += " " + flag;
    return makeRuntimeError(ErrorKind::Compile,
                            "NVRTC could not compile '" +
                                resolved.programName + "' (flags:" + command +
                                "): " + api.nvrtcGetErrorString(compiled) +
                                "\n" + out.log);
  }

  size_t size = 0;
  if ((result = api.nvrtcGetPTXSize(guard.program, &size)) != NVRTC_SUCCESS)
    return makeNvrtcError(api, result, "nvrtcGetPTXSize");
  out.ptx.resize(size);
  if ((result = api.nvrtcGetPTX(guard.program, out.ptx.data())) !=
      NVRTC_SUCCESS)
    return makeNvrtcError(api, result, "nvrtcGetPTX");
  if (!out.ptx.empty() && out.ptx.back() == '\0')
    out.ptx.pop_back();

  if (StringRef(resolved.arch).starts_with("sm_")) {
    if ((result = api.nvrtcGetCUBINSize(guard.program, &size)) != NVRTC_SUCCESS)
      return makeNvrtcError(api, result, "nvrtcGetCUBINSize");
    out.cubin.resize(size);
    if ((result = api.nvrtcGetCUBIN(guard.program, out.cubin.data())) !=
        NVRTC_SUCCESS)
      return makeNvrtcError(api, result, "nvrtcGetCUBIN");
  }
  out.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return std::move(out);
}

} // namespace moss::runtime
