//===- QuantizeLoweringTest.cpp - moss.quantize lowers to the runtime's source
//
// The passes lower moss.quantize to exactly the text GpuQuantizer compiles
// (generateQuantizerSource), under the file's kernel names, and NVRTC
// compiles it (no GPU needed).
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/QuantizerSource.h"
#include "moss/InitAll.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"
#include "moss/Target/Cuda/TranslateToCuda.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "gtest/gtest.h"

#include <string>

using namespace moss::numerics;
using namespace moss::runtime;
using namespace moss::compiler;

namespace {

struct Case {
  const char *program;
  QuantizeSpec spec;
};

QuantizeSpec makeSpec(int64_t rows, int64_t cols, InputType input,
                      ScalingScheme scheme, Fp8Format format, bool transpose) {
  QuantizeSpec spec;
  spec.rows = rows;
  spec.cols = cols;
  spec.input = input;
  spec.options = {scheme, format, transpose};
  return spec;
}

TEST(QuantizeLoweringTest, LowersToTheRuntimesSource) {
  const Case cases[] = {
      {R"mlir(
func.func @x(%x: tensor<?x11008xbf16>) -> (tensor<?x11008xf8E4M3FN>, tensor<?x344xf8E8M0FNU>, tensor<?xf32>) {
  %q, %l, %g = moss.quantize %x scaling<two_level 32, global = row>
      : tensor<?x11008xbf16> -> tensor<?x11008xf8E4M3FN> local tensor<?x344xf8E8M0FNU> global tensor<?xf32>
  return %q, %l, %g : tensor<?x11008xf8E4M3FN>, tensor<?x344xf8E8M0FNU>, tensor<?xf32>
})mlir",
       makeSpec(1, 11008, InputType::BF16,
                ScalingScheme::twoLevel(GlobalScope::Row), Fp8Format::E4M3,
                false)},
      {R"mlir(
func.func @dy(%x: tensor<4096x1000xf32>) -> (tensor<1000x4096xf8E5M2>, tensor<1000x128xf8E8M0FNU>, tensor<1xf32>) {
  %q, %l, %g = moss.quantize %x scaling<two_level 32, global = tensor> transpose
      : tensor<4096x1000xf32> -> tensor<1000x4096xf8E5M2> local tensor<1000x128xf8E8M0FNU> global tensor<1xf32>
  return %q, %l, %g : tensor<1000x4096xf8E5M2>, tensor<1000x128xf8E8M0FNU>, tensor<1xf32>
})mlir",
       makeSpec(4096, 1000, InputType::F32,
                ScalingScheme::twoLevel(GlobalScope::Tensor), Fp8Format::E5M2,
                true)},
      {R"mlir(
func.func @mx(%x: tensor<7x256xbf16>) -> (tensor<7x256xf8E4M3FN>, tensor<7x8xf8E8M0FNU>) {
  %q, %l = moss.quantize %x scaling<mxfp8>
      : tensor<7x256xbf16> -> tensor<7x256xf8E4M3FN> local tensor<7x8xf8E8M0FNU>
  return %q, %l : tensor<7x256xf8E4M3FN>, tensor<7x8xf8E8M0FNU>
})mlir",
       makeSpec(7, 256, InputType::BF16, ScalingScheme::mxfp8(),
                Fp8Format::E4M3, false)},
  };

  mlir::DialectRegistry registry;
  mlir::moss::registerAllDialects(registry);
  mlir::moss::registerAllPasses();
  for (const Case &c : cases) {
    SCOPED_TRACE(c.program);
    mlir::MLIRContext context(registry);
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(c.program, &context);
    ASSERT_TRUE(module);
    mlir::PassManager pm(&context);
    std::string errors;
    llvm::raw_string_ostream os(errors);
    ASSERT_TRUE(mlir::succeeded(
        mlir::parsePassPipeline("moss-gemm-pipeline", pm, os)))
        << errors;
    ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
    mlir::FailureOr<llvm::SmallVector<mlir::moss::CudaTranslationUnit>> units =
        mlir::moss::translateToCudaUnits(*module);
    ASSERT_TRUE(mlir::succeeded(units));
    ASSERT_EQ(units->size(), 1u);
    const mlir::moss::CudaTranslationUnit &unit = (*units)[0];

    llvm::Expected<QuantizerSource> expected =
        generateQuantizerSource(c.spec, /*withScale=*/false, unit.kernelName);
    ASSERT_TRUE(bool(expected)) << llvm::toString(expected.takeError());
    // (The C++ emitter ends the file with one more newline.)
    EXPECT_EQ(llvm::StringRef(unit.source).rtrim().str(),
              llvm::StringRef(expected->source).rtrim().str());

    if (!isNvrtcAvailable())
      continue;
    llvm::Expected<CompileResult> compiled =
        compileCuda(unit.source, CompileOptions());
    ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
    EXPECT_NE(compiled->ptx.find(".entry " + unit.kernelName),
              std::string::npos);
  }
}

} // namespace
