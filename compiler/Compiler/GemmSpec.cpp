//===- GemmSpec.cpp - A GEMM to compile, as a plain struct ----------------===//

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/TemplateParams.h"

#include "moss/Compiler/Tiling.h"

#include "llvm/Support/FormatVariadic.h"

using namespace moss;
using namespace moss::compiler;

unsigned compiler::getByteWidth(FloatType type) {
  switch (type) {
  case FloatType::BF16:
  case FloatType::F16:
    return 2;
  case FloatType::F32:
    return 4;
  }
  return 4;
}

const char *compiler::getName(FloatType type) {
  switch (type) {
  case FloatType::BF16:
    return "bf16";
  case FloatType::F16:
    return "f16";
  case FloatType::F32:
    return "f32";
  }
  return "?";
}

numerics::OutputRounding compiler::getOutputRounding(FloatType type) {
  // Overflow: the largest finite value plus half its spacing.
  switch (type) {
  case FloatType::BF16:
    return {0x1p-8, 0, 0x1.ffp127};
  case FloatType::F16:
    return {0x1p-11, 0x1p-25, 65520.0};
  case FloatType::F32:
    return {0x1p-23, 0, 0x1.ffffffp127};
  }
  return {0x1p-8, 0, 0x1.ffp127};
}

static const char *getName(numerics::Fp8Format format) {
  return format == numerics::Fp8Format::E4M3 ? "e4m3" : "e5m2";
}

std::string GemmSpec::str() const {
  std::string text = llvm::formatv(
      "{0}x{1}x{2} {3} {4} x {5} {6} -> {7}",
      isDynamicM() ? std::string("?") : std::to_string(m), n,
      k == kDynamic ? std::string("?") : std::to_string(k), ::getName(a),
      aScaling.str(), ::getName(b), bScaling.str(), getName(out));
  if (bias)
    text += std::string(" + bias(") + getName(*bias) + ")";
  if (accumulate)
    text += llvm::formatv(" + {0} * C({1})", beta.value_or(1.0f),
                          getName(*accumulate))
                .str();
  if (amax)
    text += ", amax";
  if (promoteK)
    text += ", promote every " + std::to_string(promoteK);
  if (multipliesInF16())
    text += ", f16 MMA";
  if (fold && getFold() != numerics::BlockScaleFold::None)
    text += std::string(", fold ") + numerics::getName(*fold);
  if (kernelFoldsA)
    text += ", A folded in the kernel";
  if (groups)
    text += ", " + std::to_string(groups) +
            (groupedK       ? " experts (k-grouped)"
             : maskedGroups ? " experts (m-grouped, masked)"
                            : " experts (m-grouped)");
  return text;
}

numerics::BlockScaleFold GemmSpec::getFold(int64_t rows) const {
  if (!numerics::isFoldable(aScaling) && !numerics::isFoldable(bScaling))
    return numerics::BlockScaleFold::None;
  // A fold's pass takes whole rows of a static K (checkShapes rejects one
  // asked for).
  if (groupedK)
    return numerics::BlockScaleFold::None;
  if (fold)
    return *fold;
  if (rows == kDynamic)
    rows = isDynamicM() ? kAssumedM : m;
  return out == FloatType::F32 || rows < kMinRowsToFold
             ? numerics::BlockScaleFold::None
             : numerics::BlockScaleFold::Row;
}

GemmSpec GemmSpec::getKernelSpec(int64_t rows) const {
  GemmSpec kernel = *this;
  numerics::BlockScaleFold applied = getFold(rows);
  kernel.aScaling = numerics::getFoldedScheme(aScaling, applied);
  kernel.bScaling = numerics::getFoldedScheme(bScaling, applied);
  // Its operands fold no further (and a foldable one stays exact).
  kernel.fold = numerics::BlockScaleFold::None;
  return kernel;
}

/// The spec of the kernel that folds A itself, whether or not the kernel
/// can take it.
static GemmSpec withKernelFoldingA(const GemmSpec &spec, int64_t rows) {
  GemmSpec folding = spec.getKernelSpec(rows);
  folding.aScaling = spec.aScaling;
  folding.kernelFoldsA = true;
  return folding;
}

bool GemmSpec::canFoldAInKernel(int64_t rows) const {
  // The templates' rule (moss::gemm_kernel::validate) on a tiling it allows;
  // the tiling checks keep the rest (TileM, split-K).
  return getFold(rows) == numerics::BlockScaleFold::Row &&
         numerics::isFoldable(aScaling) &&
         gemm_kernel::validate(getTemplateParams(
             withKernelFoldingA(*this, rows), TileConfig())) == nullptr;
}

GemmSpec GemmSpec::getFoldingKernelSpec(int64_t rows) const {
  return canFoldAInKernel(rows) ? withKernelFoldingA(*this, rows)
                                : getKernelSpec(rows);
}

llvm::Error compiler::checkShapes(const GemmSpec &spec) {
  if (spec.m != GemmSpec::kDynamic && spec.m < 1)
    return llvm::createStringError(
        "M=%lld is not a valid row count; expected M >= 1, or kDynamic (-1) "
        "for an M known only at launch",
        static_cast<long long>(spec.m));
  if (spec.n < 1)
    return llvm::createStringError(
        "N=%lld is not a valid size; code generation needs a static N >= 1",
        static_cast<long long>(spec.n));
  if (spec.groupedK) {
    if (!spec.groups || spec.maskedGroups)
      return llvm::createStringError(
          "a k-grouped GEMM needs groups > 0 and the contiguous layout");
    if (spec.isDynamicM() || spec.k != GemmSpec::kDynamic)
      return llvm::createStringError(
          "a k-grouped GEMM has a static M and a dynamic K (its columns are "
          "the experts' tokens together, known at launch); got M=%lld, "
          "K=%lld",
          static_cast<long long>(spec.m), static_cast<long long>(spec.k));
    if (spec.bias)
      return llvm::createStringError(
          "a k-grouped GEMM takes no bias (each expert's output is a weight "
          "gradient); expected none");
    if (spec.fold && *spec.fold != numerics::BlockScaleFold::None)
      return llvm::createStringError(
          "a k-grouped GEMM takes no fold (a fold's pass needs a static K); "
          "expected fold none");
  } else if (spec.k < 1) {
    return llvm::createStringError(
        "K=%lld is not a valid size; code generation needs a static K >= 1",
        static_cast<long long>(spec.k));
  }
  if (spec.groups < 0 || spec.groups > GemmSpec::kMaxGroups)
    return llvm::createStringError(
        "groups=%lld is not a valid expert count; expected 0 (a plain GEMM) "
        "to %lld",
        static_cast<long long>(spec.groups),
        static_cast<long long>(GemmSpec::kMaxGroups));
  if (spec.maskedGroups && !spec.groups)
    return llvm::createStringError(
        "the masked layout is one of an m-grouped GEMM's; expected groups > 0 "
        "with it");
  if (spec.groups && !spec.groupedK && !spec.isDynamicM())
    return llvm::createStringError(
        "an m-grouped GEMM has a dynamic M (its rows are the experts' "
        "together, known at launch); got M=%lld",
        static_cast<long long>(spec.m));
  if (spec.beta && !spec.accumulate)
    return llvm::createStringError(
        "beta is set but the GEMM has no accumulate operand C; expected "
        "beta only together with accumulate");
  return llvm::Error::success();
}

llvm::Error compiler::checkGemmArch(llvm::StringRef arch) {
  if (arch == "sm_90a")
    return llvm::Error::success();
  llvm::StringRef why = arch == "sm_90"
                            ? " (wgmma needs the arch-specific 'a' target)"
                            : "";
  return llvm::createStringError(
      "arch " + llvm::Twine(arch) + " is not supported" + why +
      ": the GEMM kernels are Hopper's, compiled for sm_90a only");
}

llvm::Error compiler::checkFold(const GemmSpec &spec) {
  if (!spec.fold || *spec.fold == numerics::BlockScaleFold::None)
    return llvm::Error::success();
  bool any = false;
  for (auto [name, scheme] :
       {std::pair{"A", &spec.aScaling}, std::pair{"B", &spec.bScaling}}) {
    if (!numerics::isFoldable(*scheme))
      continue;
    any = true;
    if (llvm::Error e = numerics::checkFold(*scheme, spec.k, *spec.fold))
      return llvm::createStringError("operand " + llvm::Twine(name) + ": " +
                                     llvm::toString(std::move(e)));
  }
  if (!any)
    return llvm::createStringError(
        llvm::Twine("fold=") + numerics::getName(*spec.fold) +
        " moves E8M0 block factors, but neither operand has them (" +
        spec.aScaling.str() + " x " + spec.bScaling.str() +
        "); expected two-level or MXFP8, or no fold");
  return llvm::Error::success();
}
