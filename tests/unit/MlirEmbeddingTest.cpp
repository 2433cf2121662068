//===- MlirEmbeddingTest.cpp - The dialect from another MLIR compiler -----===//
//
// What an embedder calls: registerAllDialects / registerAllPasses from C++,
// and the MLIR C API's dialect handle. Each parses, verifies and runs the
// GEMM pipeline on a moss program it did not write itself.
//
//===----------------------------------------------------------------------===//

#include "moss-c/Dialects.h"
#include "moss/InitAll.h"

#include "mlir-c/Diagnostics.h"
#include "mlir-c/Dialect/Func.h"
#include "mlir-c/IR.h"
#include "mlir-c/Pass.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <string>

namespace {

constexpr const char *kProgram = R"mlir(
func.func @forward(%a: tensor<256x4096xf8E4M3FN>, %al: tensor<256x128xf8E8M0FNU>,
                   %ag: tensor<256xf32>, %b: tensor<11008x4096xf8E4M3FN>,
                   %bg: tensor<1xf32>) -> tensor<256x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg)
      : (tensor<256x4096xf8E4M3FN>, tensor<256x128xf8E8M0FNU>, tensor<256xf32>,
         tensor<11008x4096xf8E4M3FN>, tensor<1xf32>) -> tensor<256x11008xbf16>
  return %c : tensor<256x11008xbf16>
}
)mlir";

TEST(MlirEmbeddingTest, RegisterAllParsesAndLowersAProgram) {
  mlir::DialectRegistry registry;
  mlir::moss::registerAllDialects(registry);
  mlir::moss::registerAllPasses();
  mlir::moss::registerAllPasses(); // a second call is harmless
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kProgram, &context);
  ASSERT_TRUE(module);
  ASSERT_TRUE(mlir::succeeded(mlir::verify(*module)));

  ASSERT_NE(mlir::PassInfo::lookup("moss-select-tiling"), nullptr);
  mlir::PassManager pm(&context);
  std::string errors;
  llvm::raw_string_ostream os(errors);
  ASSERT_TRUE(mlir::succeeded(
      mlir::parsePassPipeline("moss-gemm-pipeline", pm, os)))
      << errors;
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  // The pipeline leaves EmitC behind: no moss.gemm remains.
  std::string text;
  llvm::raw_string_ostream printed(text);
  module->print(printed);
  EXPECT_EQ(text.find("moss.gemm"), std::string::npos) << text;
  EXPECT_NE(text.find("emitc."), std::string::npos) << text;
}

TEST(MlirEmbeddingTest, TheCApiHandleRegistersTheDialect) {
  MlirContext context = mlirContextCreate();
  MlirDialectHandle moss = mlirGetDialectHandle__moss__();
  MlirStringRef name = mlirDialectHandleGetNamespace(moss);
  EXPECT_EQ(std::string(name.data, name.length), "moss");
  mlirDialectHandleRegisterDialect(mlirGetDialectHandle__func__(), context);
  mlirDialectHandleRegisterDialect(moss, context);
  MlirModule module =
      mlirModuleCreateParse(context, mlirStringRefCreateFromCString(kProgram));
  ASSERT_FALSE(mlirModuleIsNull(module));
  EXPECT_TRUE(mlirOperationVerify(mlirModuleGetOperation(module)));

  // The passes through the C API's pipeline parser.
  mossRegisterAllPasses();
  MlirPassManager pm = mlirPassManagerCreate(context);
  MlirOpPassManager top = mlirPassManagerGetAsOpPassManager(pm);
  MlirLogicalResult added = mlirOpPassManagerAddPipeline(
      top, mlirStringRefCreateFromCString("moss-select-tiling"),
      [](MlirStringRef, void *) {}, nullptr);
  EXPECT_TRUE(mlirLogicalResultIsSuccess(added));
  EXPECT_TRUE(mlirLogicalResultIsSuccess(
      mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(module))));
  // The pass ran: the GEMM now carries the heuristic's tiling.
  std::string text;
  mlirOperationPrint(
      mlirModuleGetOperation(module),
      [](MlirStringRef piece, void *out) {
        static_cast<std::string *>(out)->append(piece.data, piece.length);
      },
      &text);
  EXPECT_NE(text.find("#moss.tiling<"), std::string::npos) << text;
  mlirPassManagerDestroy(pm);
  mlirModuleDestroy(module);
  mlirContextDestroy(context);
}

TEST(MlirEmbeddingTest, WithoutTheDialectTheProgramDoesNotParse) {
  // The test above is not vacuous: a context without the handle rejects
  // the program.
  MlirContext context = mlirContextCreate();
  mlirDialectHandleRegisterDialect(mlirGetDialectHandle__func__(), context);
  mlirContextAttachDiagnosticHandler(
      context, [](MlirDiagnostic, void *) { return mlirLogicalResultSuccess(); },
      nullptr, nullptr);
  MlirModule module =
      mlirModuleCreateParse(context, mlirStringRefCreateFromCString(kProgram));
  EXPECT_TRUE(mlirModuleIsNull(module));
  mlirContextDestroy(context);
}

} // namespace
