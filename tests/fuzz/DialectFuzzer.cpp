//===- DialectFuzzer.cpp - libFuzzer target: moss IR ----------------------===//
//
// Any text gives a module or diagnostics that say something, through the
// parser and the verifiers of the moss dialect (and the dialects moss-opt
// registers). A module that verifies prints as text that parses, verifies
// and prints the same again. It then goes through each moss pass alone (as
// `moss-opt --<pass>` runs it) and through the GEMM pipeline (quantizers
// lowered too), each followed by the translation to CUDA C++
// (`moss-translate --moss-to-cuda`); every step gives IR that verifies or
// fails with diagnostics.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "moss/InitAll.h"
#include "moss/Target/Cuda/TranslateToCuda.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

using namespace mlir;
using ::moss::fuzz::check;

namespace {

/// One context and set of pass managers for the whole run: what differs
/// between inputs is the text.
struct Session {
  Session() : context(makeRegistry(), MLIRContext::Threading::DISABLED) {
    context.loadAllAvailableDialects();
    context.printOpOnDiagnostic(false);
    for (const char *pipeline :
         {"moss-specialize-shapes", "moss-select-tiling",
          "moss-convert-gemm-to-emitc", "moss-convert-quantize-to-emitc",
          "moss-gemm-pipeline{lower-quantize=true}"}) {
      auto pm =
          std::make_unique<PassManager>(&context, ModuleOp::getOperationName());
      std::string errors;
      llvm::raw_string_ostream os(errors);
      check(succeeded(parsePassPipeline(pipeline, *pm, os)),
            "a moss pass pipeline does not parse: " + errors);
      passes.push_back(std::move(pm));
    }
  }

  static DialectRegistry makeRegistry() {
    mlir::moss::registerAllPasses();
    DialectRegistry registry;
    mlir::moss::registerAllDialects(registry);
    return registry;
  }

  MLIRContext context;
  /// Each pass alone, then the GEMM pipeline.
  std::vector<std::unique_ptr<PassManager>> passes;
};

/// The deepest nesting of brackets in `text`. MLIR's parser recurses once
/// per level of nested attributes, types and regions with no limit of its
/// own, so a few thousand `[` overflow the stack (under ASan sooner): the
/// parser's limit, which moss-opt shares with mlir-opt, not the dialect's.
int getNestingDepth(const std::string &text) {
  int depth = 0, deepest = 0;
  for (char c : text) {
    if (c == '[' || c == '{' || c == '(' || c == '<')
      deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}' || c == ')' || c == '>') && depth > 0)
      --depth;
  }
  return deepest;
}

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
  constexpr int kMaxNesting = 200;
  if (getNestingDepth(text) > kMaxNesting)
    return 0;
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

  (void)mlir::moss::translateToCudaUnits(*module);
  for (const std::unique_ptr<PassManager> &pm : session->passes) {
    OwningOpRef<ModuleOp> copy = module->clone();
    // The pass manager verifies what each pass leaves.
    if (succeeded(pm->run(*copy)))
      (void)mlir::moss::translateToCudaUnits(*copy);
  }
  return 0;
}
