//===- ShapesFuzzer.cpp - libFuzzer target: the shapes-file reader --------===//
//
// Any text gives the GEMMs of a shapes file (plain lines or JSON) or an
// error that names where it is wrong. Shapes that pass the checks of
// moss-tune and `moss-jit cache warm` get a tuning key and a plan from
// planGemm at their M (grouped shapes too), whose kernel spec is the shape's
// and whose tiling passes the tiling checks.
//
//===----------------------------------------------------------------------===//

#include "FuzzCheck.h"

#include "Shapes.h"

#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Compiler/TuningDatabase.h"

#include <cstddef>
#include <cstdint>

using namespace moss;
using moss::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  // The defaults of `moss-jit cache warm`: activations MOSS two-level with a
  // per-row global, weights per tensor.
  tune::ShapeDefaults defaults;
  defaults.a.scheme =
      numerics::ScalingScheme::twoLevel(numerics::GlobalScope::Row, 32);
  defaults.b.scheme = numerics::ScalingScheme::perTensor();
  llvm::Expected<std::vector<tune::TuneShape>> shapes =
      tune::parseShapesFile(text, "fuzz-shapes", defaults);
  if (!shapes) {
    fuzz::checkMessage(shapes.takeError(), "a shapes error without a message");
    return 0;
  }
  check(!shapes->empty(), "a shapes file parsed to no shapes");
  if (llvm::Error error = tune::checkShapes(*shapes)) {
    fuzz::checkMessage(std::move(error), "a shape check without a message");
    return 0;
  }
  compiler::TargetInfo target = compiler::TargetInfo::h200();
  for (const tune::TuneShape &shape : *shapes) {
    check(!shape.origin.empty(), "a shape without its origin");
    (void)compiler::TuningKey::get(shape.spec, target, shape.m).str();
    compiler::GemmPlanOptions options;
    options.rows = shape.m;
    llvm::Expected<compiler::GemmPlan> plan =
        compiler::planGemm(shape.given, target, options);
    if (!plan) {
      fuzz::checkMessage(plan.takeError(), "a plan error without a message");
      continue;
    }
    check(plan->kernel.str() == shape.spec.str(),
          "the plan's kernel spec is not the shape's: " + plan->kernel.str() +
              " against " + shape.spec.str());
    llvm::Error fits =
        compiler::checkTiling(plan->kernel, plan->tiling, target);
    if (fits) {
      std::string message = llvm::toString(std::move(fits));
      check(false, "the planned tiling fails checkTiling: " + message);
    }
  }
  return 0;
}
