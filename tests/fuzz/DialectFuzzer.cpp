//===- DialectFuzzer.cpp - libFuzzer target: moss IR ----------------------===//
//
// Any text gives a module or diagnostics that say something, through the
// parser and the verifiers of the moss dialect (and the dialects moss-opt
// registers). A module that verifies prints as text that parses, verifies
// and prints the same again, and goes through the GEMM pipeline (quantizers
// lowered too) to CUDA C++, or fails with diagnostics: what moss-opt and
// moss-translate do with it.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "moss/Compiler/Pipelines.h"
#include "moss/InitAll.h"
#include "moss/Target/Cuda/TranslateToCuda.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

using namespace mlir;
using ::moss::fuzz::check;

namespace {

/// One context and pipeline for the whole run: what differs between inputs
/// is the text.
struct Session {
  Session()
      : context(makeRegistry(), MLIRContext::Threading::DISABLED),
        pipeline(PassManager::on<ModuleOp>(&context)) {
    context.loadAllAvailableDialects();
    context.printOpOnDiagnostic(false);
    mlir::moss::GemmPipelineOptions options;
    options.lowerQuantize = true;
    mlir::moss::buildGemmPipeline(pipeline, options);
  }

  static DialectRegistry makeRegistry() {
    DialectRegistry registry;
    mlir::moss::registerAllDialects(registry);
    return registry;
  }

  MLIRContext context;
  PassManager pipeline;
};

std::string print(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // Never destroyed: the MLIR libraries' own statics outlive the run.
  static Session *session = new Session();
  MLIRContext &context = session->context;
  ScopedDiagnosticHandler handler(&context, [](Diagnostic &diagnostic) {
    check(!diagnostic.str().empty(), "a diagnostic without a message");
    return success();
  });

  // MLIR's lexer reads up to a terminating NUL, which moss-opt's file
  // buffers have and libFuzzer's do not.
  std::string text(reinterpret_cast<const char *>(data), size);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module || failed(verify(*module)))
    return 0;

  std::string printed = print(*module);
  OwningOpRef<ModuleOp> reparsed =
      parseSourceString<ModuleOp>(printed, &context);
  check(bool(reparsed), "a verified module prints as text that does not parse");
  check(succeeded(verify(*reparsed)),
        "a verified module prints as text that does not verify");
  check(print(*reparsed) == printed,
        "a verified module printed, parsed and printed again differs");

  if (failed(session->pipeline.run(*module)))
    return 0;
  (void)mlir::moss::translateToCudaUnits(*module);
  return 0;
}
