//===- GemmChecks.cpp - A GEMM's arguments, checked without the GPU -------===//
//
// Every check of a GEMM call that the runtime makes: the spec (shapes,
// schemes, epilogue), the rows, and each buffer (present exactly when
// needed, aligned, of the right scale count, not overlapping the output).
//
//===----------------------------------------------------------------------===//

#include "GemmChecks.h"

#include "moss/Compiler/Tiling.h"
#include "moss/Runtime/Api/RuntimeError.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <limits>
#include <string>

using namespace llvm;
using namespace moss;
using compiler::FloatType;
using compiler::GemmSpec;
using numerics::ScalingScheme;

GemmScaleCounts moss::getGemmScaleCounts(const GemmSpec &launched,
                                         int64_t extent) {
  const GemmSpec spec = launched.atExtent(extent);
  const int64_t m = spec.m;
  auto local = [&](const ScalingScheme &s, int64_t rows) -> int64_t {
    if (!s.hasLocalScales() || s.blockCols <= 0)
      return 0;
    return divideCeil(rows, std::max<int64_t>(1, s.blockRows)) *
           divideCeil(spec.k, s.blockCols);
  };
  auto global = [](const ScalingScheme &s, int64_t rows) -> int64_t {
    return s.hasGlobalScales() ? (s.globalPerRow() ? rows : 1) : 0;
  };
  // An m-grouped GEMM's B: one per-tensor global per expert.
  const int64_t rowsB = getGemmRowsB(spec);
  const int64_t bGlobal = spec.bScaling.hasGlobalScales() &&
                                  !spec.bScaling.globalPerRow() &&
                                  spec.groups && !spec.groupedK
                              ? spec.groups
                              : global(spec.bScaling, rowsB);
  return {local(spec.aScaling, m), global(spec.aScaling, m),
          local(spec.bScaling, rowsB), bGlobal};
}

/// A device pointer: present exactly when `needed`, aligned to `alignment`.
static Error checkPointer(CUdeviceptr pointer, bool needed, unsigned alignment,
                          const Twine &name, const Twine &why) {
  if (needed && !pointer)
    return runtime::invalidArgument(name + " is null; " + why + " needs it");
  if (!needed && pointer)
    return runtime::invalidArgument(name + " is given, but " + why +
                                    " has none");
  if (pointer % alignment != 0)
    return runtime::invalidArgument(name + " must be " + Twine(alignment) +
                                    "-byte aligned, got 0x" +
                                    Twine::utohexstr(pointer));
  return Error::success();
}

static Error checkOperand(const GemmOperand &operand, const char *name,
                          const ScalingScheme &scheme, int64_t rows,
                          int64_t localCount, int64_t globalCount) {
  std::string prefix = std::string("buffers.") + name;
  std::string why =
      std::string("operand ") + name + "'s scheme " + scheme.str();
  if (Error e = checkPointer(operand.codes, true, 16, prefix + ".codes",
                             "every GEMM"))
    return e;
  if (Error e = checkPointer(operand.localScales, scheme.hasLocalScales(), 4,
                             prefix + ".localScales", why))
    return e;
  if (Error e = checkPointer(operand.globalScales, scheme.hasGlobalScales(), 4,
                             prefix + ".globalScales", why))
    return e;
  if (operand.localScaleCount != localCount)
    return runtime::invalidArgument(
        prefix + ".localScaleCount=" + Twine(operand.localScaleCount) +
        " does not match " + why + " for " + Twine(rows) + " rows: expected " +
        Twine(localCount) +
        (localCount ? " block scales (row-major [rows / block rows, "
                      "K / block])"
                    : ""));
  if (operand.globalScaleCount != globalCount)
    return runtime::invalidArgument(
        prefix + ".globalScaleCount=" + Twine(operand.globalScaleCount) +
        " does not match " + why + ": expected " + Twine(globalCount));
  return Error::success();
}

static unsigned byteWidth(std::optional<FloatType> type) {
  return type ? compiler::getByteWidth(*type) : 1;
}

/// checkGemmSpec for a launch of `rows` rows (kDynamic: any), which decide
/// the default fold and so the blocks the kernel promotes by.
static Error checkGemmSpecAt(const GemmSpec &asked, int64_t rows) {
  if (Error e = compiler::checkShapes(asked))
    return e;
  if (Error e = compiler::checkFold(asked))
    return e;
  // A k-grouped GEMM's K is a launch's multiple of 128, and 128 is a
  // multiple of every block and promotion interval the checks below ask K
  // to be a multiple of (checkGemmRows checks the launch's).
  const GemmSpec spec = asked.groupedK ? asked.atExtent(128) : asked;
  if (spec.beta && !std::isfinite(*spec.beta))
    return runtime::invalidArgument(
        "beta=" + Twine(std::to_string(*spec.beta)) + " is not finite");
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  if (spec.k % 32 != 0)
    return runtime::invalidArgument(
        "K=" + Twine(spec.k) + " is not a multiple of 32 (the FP8 wgmma's K)");
  if (spec.n > kIntMax || spec.k > kIntMax || spec.m > kIntMax)
    return runtime::invalidArgument("the GEMM is " + Twine(spec.m) + "x" +
                                    Twine(spec.n) + "x" + Twine(spec.k) +
                                    "; the kernel takes M, N and K below 2^31");
  if (Error e = compiler::checkKernelSupport(spec))
    return e;
  if (spec.promoteK != 0) {
    if (spec.promoteK != 32 && spec.promoteK != 64 && spec.promoteK != 128)
      return runtime::invalidArgument(
          "promoteK=" + Twine(spec.promoteK) +
          " is not a promotion interval; expected 0 (the "
          "schemes'), 32, 64 or 128");
    if (spec.k % spec.promoteK != 0)
      return runtime::invalidArgument(
          "K=" + Twine(spec.k) +
          " is not a multiple of promoteK=" + Twine(spec.promoteK));
  }
  // A fold changes the blocks the kernel promotes by.
  const GemmSpec kernel = spec.getKernelSpec(rows);
  for (auto [name, scheme] :
       {std::pair{"A", &kernel.aScaling}, std::pair{"B", &kernel.bScaling}})
    if (spec.promoteK && scheme->hasLocalScales() &&
        scheme->blockCols < spec.promoteK)
      return runtime::invalidArgument(
          "promoteK=" + Twine(spec.promoteK) + " is coarser than operand " +
          name + "'s scaling block " + Twine(scheme->blockCols) + " (" +
          scheme->str() + ")");
  for (auto [name, scheme] :
       {std::pair{"A", &spec.aScaling}, std::pair{"B", &spec.bScaling}}) {
    if (scheme->hasLocalScales() && spec.k % scheme->blockCols != 0)
      return runtime::invalidArgument(
          "K=" + Twine(spec.k) + " is not a multiple of operand " + name +
          "'s scaling block " + Twine(scheme->blockCols) + " (" +
          scheme->str() + ")");
  }
  return Error::success();
}

Error moss::checkGemmSpec(const GemmSpec &spec) {
  return checkGemmSpecAt(spec, GemmSpec::kDynamic);
}

/// The output does not wrap around the address space and does not overlap
/// the operands' codes; C is either D itself (of the output's type: each
/// entry is read before it is written) or apart from it. `spec` is a
/// launch's (GemmSpec::atExtent).
static Error checkBufferRanges(const GemmSpec &spec,
                               const GemmBuffers &buffers) {
  const int64_t m = spec.m, rowsD = getGemmRowsD(spec, spec.m);
  struct Range {
    uint64_t begin, bytes;
    bool overlaps(const Range &o) const {
      return bytes && o.bytes && begin < o.begin + o.bytes &&
             o.begin < begin + bytes;
    }
  };
  auto range = [](CUdeviceptr p, int64_t rows, int64_t cols,
                  unsigned width) -> Expected<Range> {
    uint64_t bytes = uint64_t(rows) * uint64_t(cols) * width;
    if (p + bytes < p)
      return runtime::invalidArgument("a buffer at 0x" + Twine::utohexstr(p) +
                                      " of " + Twine(bytes) +
                                      " bytes wraps around the address space");
    return Range{p, bytes};
  };
  const unsigned outWidth = compiler::getByteWidth(spec.out);
  Expected<Range> d = range(buffers.d, rowsD, spec.n, outWidth);
  if (!d)
    return runtime::invalidArgument("buffers.d: " + toString(d.takeError()));
  Expected<Range> a = range(buffers.a.codes, m, spec.k, 1);
  Expected<Range> b = range(buffers.b.codes, getGemmRowsB(spec), spec.k, 1);
  if (!a || !b)
    return runtime::invalidArgument(
        "operand codes: " + toString(a ? b.takeError() : a.takeError()));
  if (d->overlaps(*a) || d->overlaps(*b))
    return runtime::invalidArgument(
        "buffers.d (the output) overlaps the codes of operand " +
        Twine(d->overlaps(*a) ? "A" : "B"));
  if (buffers.c && spec.accumulate) {
    if (buffers.c == buffers.d) {
      if (*spec.accumulate != spec.out)
        return runtime::invalidArgument(
            std::string("buffers.c is buffers.d, but C is ") +
            compiler::getName(*spec.accumulate) + " and D " +
            compiler::getName(spec.out) +
            "; C may be D only with the output's type");
    } else {
      Expected<Range> c = range(buffers.c, rowsD, spec.n,
                                compiler::getByteWidth(*spec.accumulate));
      if (!c)
        return runtime::invalidArgument("buffers.c: " +
                                        toString(c.takeError()));
      if (c->overlaps(*d))
        return runtime::invalidArgument(
            "buffers.c overlaps buffers.d without being it");
    }
  }
  return Error::success();
}

/// checkGemmSpecAt, and that `m` rows (a k-grouped GEMM: K = `m` columns)
/// can be launched with the spec.
Error moss::detail::checkGemmRows(const GemmSpec &spec, int64_t m) {
  if (Error e = checkGemmSpecAt(spec, spec.groupedK ? spec.m : m))
    return e;
  if (m < 0 || m > std::numeric_limits<int32_t>::max())
    return runtime::invalidArgument(
        Twine(spec.groupedK ? "K=" : "m=") + Twine(m) +
        " is out of range; expected 0 <= " + (spec.groupedK ? "K" : "m") +
        " < 2^31");
  if (spec.groupedK) {
    if (m % 128 != 0)
      return runtime::invalidArgument(
          "K=" + Twine(m) +
          " (the tokens of all experts of a k-grouped GEMM) is not a "
          "multiple of 128; pad each expert's tokens to a multiple of 128");
    // The output's rows, groups * M, are indexed in 32 bits.
    if (spec.groups * spec.m > std::numeric_limits<int32_t>::max())
      return runtime::invalidArgument(
          "the k-grouped GEMM's output has " + Twine(spec.groups) + " x " +
          Twine(spec.m) + " rows; expected fewer than 2^31");
    return Error::success();
  }
  if (!spec.isDynamicM() && m != spec.m)
    return runtime::invalidArgument(
        "m=" + Twine(m) + " but the spec is specialized to M=" + Twine(spec.m) +
        "; use a spec with a dynamic M (-1) to "
        "launch other row counts");
  if (spec.maskedGroups && m % spec.groups != 0)
    return runtime::invalidArgument(
        "m=" + Twine(m) + " is not a multiple of the " + Twine(spec.groups) +
        " experts of a masked grouped GEMM (m rows hold each expert's m / " +
        Twine(spec.groups) + ")");
  return Error::success();
}

Error moss::checkGemmLaunch(const GemmSpec &spec, int64_t m,
                            const GemmBuffers &buffers) {
  if (Error e = detail::checkGemmRows(spec, m))
    return e;

  const GemmSpec at = spec.atExtent(m);
  GemmScaleCounts counts = getGemmScaleCounts(spec, m);
  if (Error e = checkOperand(buffers.a, "a", spec.aScaling, at.m, counts.aLocal,
                             counts.aGlobal))
    return e;
  if (Error e = checkOperand(buffers.b, "b", spec.bScaling, getGemmRowsB(spec),
                             counts.bLocal, counts.bGlobal))
    return e;
  if (Error e = checkPointer(buffers.groupOffsets, spec.groups > 0, 4,
                             "buffers.groupOffsets",
                             "a grouped GEMM (spec.groups > 0)"))
    return e;
  if (Error e = checkPointer(buffers.d, true, 16, "buffers.d (the output)",
                             "every GEMM"))
    return e;
  if (Error e =
          checkPointer(buffers.bias, spec.bias.has_value(),
                       byteWidth(spec.bias), "buffers.bias", "the spec's bias"))
    return e;
  if (Error e = checkPointer(
          buffers.c, spec.accumulate.has_value(), byteWidth(spec.accumulate),
          "buffers.c (the accumulate operand)", "the spec's accumulate"))
    return e;
  if (Error e = checkPointer(buffers.amax, spec.amax, 4, "buffers.amax",
                             "the spec's amax output"))
    return e;
  return checkBufferRanges(at, buffers);
}
