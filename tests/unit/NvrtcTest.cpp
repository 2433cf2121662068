//===- NvrtcTest.cpp - Compiling with NVRTC -------------------------------===//
//
// Needs the NVRTC library (CUDA toolkit), not a GPU; skipped, with the
// reason, where NVRTC cannot be loaded.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Nvrtc/Nvrtc.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Nvrtc/Templates.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include "llvm/Testing/Support/SupportHelpers.h"

#include "gtest/gtest.h"

using namespace moss::runtime;
using namespace llvm;

namespace {

#define SKIP_WITHOUT_NVRTC()                                                   \
  do {                                                                         \
    Expected<NvrtcVersion> version = getNvrtcVersion();                        \
    if (!version)                                                              \
      GTEST_SKIP() << toString(version.takeError());                           \
  } while (false)

/// A kernel using an embedded template, a caller-supplied header and an
/// arch-specific instruction.
constexpr const char *kKernel = R"cuda(
#include "moss/common/version.cuh"
#include "scale.cuh"
#include "arch.cuh"

extern "C" __global__ void moss_test_kernel(float *out, const float *in,
                                            int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = scale(in[i]) + MOSS_TEMPLATES_VERSION_MINOR * 0.0f;
  ARCH_SPECIFIC();
}
)cuda";

CompileOptions optionsFor(const char *arch, const char *archSpecific) {
  CompileOptions options;
  options.arch = arch;
  options.headers.push_back(
      {"scale.cuh", "#pragma once\n__device__ inline float scale(float x) "
                    "{ return 2.0f * x; }\n"});
  options.headers.push_back(
      {"arch.cuh", std::string("#define ARCH_SPECIFIC() ") + archSpecific});
  return options;
}

void expectCompiledFor(const CompileResult &result, StringRef arch) {
  EXPECT_NE(result.ptx.find(".entry moss_test_kernel"), std::string::npos)
      << result.ptx;
  EXPECT_NE(result.ptx.find(".target " + arch.str()), std::string::npos)
      << result.ptx;
  ASSERT_GT(result.cubin.size(), 4u);
  EXPECT_EQ(result.cubin.substr(0, 4), "\x7f"
                                       "ELF");
  EXPECT_GT(result.seconds, 0.0);
}

TEST(NvrtcTest, ReportsItsVersion) {
  SKIP_WITHOUT_NVRTC();
  Expected<NvrtcVersion> version = getNvrtcVersion();
  ASSERT_TRUE(bool(version));
  EXPECT_GE(version->major, 12);
  EXPECT_TRUE(isNvrtcAvailable());
}

TEST(NvrtcTest, CompilesForHopper) {
  SKIP_WITHOUT_NVRTC();
  // wgmma.fence only exists on the arch-specific sm_90a target.
  Expected<CompileResult> result = compileCuda(
      kKernel,
      optionsFor("sm_90a", "asm volatile(\"wgmma.fence.sync.aligned;\")"));
  ASSERT_TRUE(bool(result)) << toString(result.takeError());
  expectCompiledFor(*result, "sm_90a");
}

TEST(NvrtcTest, CompilesForBlackwell) {
  SKIP_WITHOUT_NVRTC();
  // tcgen05 only exists on the arch-specific sm_100a target.
  Expected<CompileResult> result = compileCuda(
      kKernel,
      optionsFor("sm_100a",
                 "asm volatile(\"tcgen05.fence::before_thread_sync;\")"));
  ASSERT_TRUE(bool(result)) << toString(result.takeError());
  expectCompiledFor(*result, "sm_100a");
}

TEST(NvrtcTest, ArchSpecificInstructionNeedsTheArchSpecificTarget) {
  SKIP_WITHOUT_NVRTC();
  Expected<CompileResult> result = compileCuda(
      kKernel,
      optionsFor("sm_90", "asm volatile(\"wgmma.fence.sync.aligned;\")"));
  ASSERT_FALSE(bool(result));
  std::string message = toString(result.takeError());
  EXPECT_NE(message.find("wgmma"), std::string::npos) << message;
}

TEST(NvrtcTest, CompilesWithAndWithoutMinimal) {
  SKIP_WITHOUT_NVRTC();
  for (bool minimal : {true, false}) {
    CompileOptions options = optionsFor("sm_90a", "(void)0");
    options.minimal = minimal;
    Expected<std::vector<std::string>> flags = getNvrtcFlags(options);
    ASSERT_TRUE(bool(flags));
    EXPECT_EQ(llvm::is_contained(*flags, "-minimal"), minimal);
    Expected<CompileResult> result = compileCuda(kKernel, options);
    ASSERT_TRUE(bool(result)) << toString(result.takeError());
    expectCompiledFor(*result, "sm_90a");
  }
}

TEST(NvrtcTest, VirtualArchGivesPtxOnly) {
  SKIP_WITHOUT_NVRTC();
  Expected<CompileResult> result =
      compileCuda(kKernel, optionsFor("compute_90a", "(void)0"));
  ASSERT_TRUE(bool(result)) << toString(result.takeError());
  EXPECT_NE(result->ptx.find(".entry moss_test_kernel"), std::string::npos);
  EXPECT_TRUE(result->cubin.empty());
}

TEST(NvrtcTest, SyntaxErrorReturnsTheLog) {
  SKIP_WITHOUT_NVRTC();
  CompileOptions options;
  options.arch = "sm_90a";
  options.programName = "broken.cu";
  Expected<CompileResult> result =
      compileCuda("extern \"C\" __global__ void k() { int x = ; }\n", options);
  ASSERT_FALSE(bool(result));
  std::string message = toString(result.takeError());
  EXPECT_NE(message.find("NVRTC could not compile 'broken.cu'"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("-arch=sm_90a"), std::string::npos) << message;
  // The log: file, line and NVRTC's diagnostic.
  EXPECT_NE(message.find("broken.cu(1)"), std::string::npos) << message;
  EXPECT_NE(message.find("error"), std::string::npos) << message;
}

TEST(NvrtcTest, MissingHeaderIsNamed) {
  SKIP_WITHOUT_NVRTC();
  CompileOptions options;
  options.arch = "sm_90a";
  options.includeTemplates = false;
  Expected<CompileResult> result = compileCuda(
      "#include \"moss/common/version.cuh\"\n__global__ void k() {}\n",
      options);
  ASSERT_FALSE(bool(result));
  std::string message = toString(result.takeError());
  EXPECT_NE(message.find("moss/common/version.cuh"), std::string::npos)
      << message;
}

TEST(NvrtcTest, InvalidArchIsRejectedBeforeCompiling) {
  CompileOptions options;
  options.arch = "sm90a";
  Expected<CompileResult> result =
      compileCuda("__global__ void k() {}", options);
  ASSERT_FALSE(bool(result));
  std::string message = toString(result.takeError());
  // Without NVRTC the error is about the library instead; both are clean.
  EXPECT_TRUE(message.find("invalid NVRTC arch 'sm90a'") != std::string::npos ||
              message.find("NVRTC (libnvrtc.so.13) not found") !=
                  std::string::npos)
      << message;
}

TEST(NvrtcTest, DefaultArchIsTheDevicesOrHopper) {
  std::string arch = getDefaultArch();
  EXPECT_TRUE(StringRef(arch).starts_with("sm_")) << arch;
  CompileOptions options;
  EXPECT_EQ(resolveCompileOptions(options).arch, arch);
  options.arch = "sm_100a";
  EXPECT_EQ(resolveCompileOptions(options).arch, "sm_100a");
}

TEST(TemplatesTest, EmbedsTheTemplateDirectory) {
  ArrayRef<EmbeddedFile> files = getTemplateFiles();
  ASSERT_FALSE(files.empty());
  std::optional<StringRef> version = findTemplate("moss/common/version.cuh");
  ASSERT_TRUE(version.has_value());
  EXPECT_NE(version->find("MOSS_TEMPLATES_VERSION_MAJOR"), StringRef::npos);
  EXPECT_FALSE(findTemplate("moss/common/nope.cuh").has_value());
  for (size_t i = 1; i < files.size(); ++i)
    EXPECT_LT(files[i - 1].path, files[i].path);
  for (const EmbeddedFile &file : files) {
    EXPECT_TRUE(file.path.starts_with("moss/")) << file.path.str();
    // NVRTC reads the contents as a C string.
    EXPECT_EQ(file.contents.data()[file.contents.size()], '\0');
  }
  EXPECT_NE(getTemplateHash(), 0u);
}

TEST(NvrtcCacheTest, CachesRealCompiles) {
  SKIP_WITHOUT_NVRTC();
  llvm::unittest::TempDir dir("moss-nvrtc-cache", /*Unique=*/true);
  KernelCacheOptions cacheOptions;
  cacheOptions.directory = dir.path().str();
  CompileOptions options = optionsFor("sm_90a", "(void)0");
  std::string ptx;
  {
    KernelCache cache(cacheOptions);
    Expected<std::shared_ptr<const KernelEntry>> entry =
        cache.getOrCompile(kKernel, options);
    ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
    ptx = (*entry)->getPtx().str();
    EXPECT_EQ(cache.stats().compiles, 1u);
  }
  KernelCache cache(cacheOptions);
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile(kKernel, options);
  ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
  EXPECT_EQ((*entry)->getPtx(), ptx);
  EXPECT_EQ((*entry)->getCubin().substr(0, 4), "\x7f"
                                               "ELF");
  EXPECT_EQ(cache.stats().diskHits, 1u);
  EXPECT_EQ(cache.stats().compiles, 0u);
}

} // namespace
