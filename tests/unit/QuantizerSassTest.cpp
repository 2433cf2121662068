//===- QuantizerSassTest.cpp - The training step's quantizers' SASS -------===//
//
// No GPU needed: each quantizer the FP8 training step runs is generated
// (generateQuantizerSource), compiled with NVRTC for sm_90a, and its cubin
// disassembled with nvdisasm. For each of its kernels (the quantize pass and,
// where there is one, the reduce pass or the column pass) the test
//   - fails on local memory (a stack frame or spills in the ptxas report);
//   - reports the registers per thread read from the cubin and the warps per
//     SM those registers, the threads per CTA and the static shared memory
//     allow (getSm90Occupancy, the one model of it here);
//   - reports the SASS instructions per element of the main loop;
//   - fails when the registers or the instructions per element exceed the
//     limits of its case (the figures of today's kernels plus about 10%).
// The table goes to standard output and each figure to a test property.
// Skipped, with the reason, without NVRTC or nvdisasm (findNvdisasm).
//
// Instructions per element, computed the same way for every kernel:
//   - The main loop is, but for the column pass, the backward branch of
//     the kernel with the most
//     instructions between its target and itself (a BRA at address B to
//     T < B spans [T, B]; a jump back from code placed after a loop into
//     it closes no loop, see jit::findLoops); its instructions are those
//     in [T, B], NOPs excluded, each counted once: an inner loop that is
//     not unrolled
//     (the transposed kernel's loop over a lane's two BF16 columns) counts
//     once though it runs more often.
//   - Its elements are the input values one thread takes per iteration,
//     from the kernel's configuration: the row-wise kernel's loop takes one
//     row (segment) per iteration, VecsPerThread 16-byte vectors a thread
//     (RowwiseConfig::kVecsPerThread: ceil(Seg / VecElems / Threads), with
//     the threads and segment of chooseQuantizerVariant); the transposed and
//     one-kernel dual-layout kernels' loop takes one tile of
//     kColumnwiseTileRows rows by kColumnwiseTileBytes bytes of columns,
//     shared by kColumnwiseThreads threads. The column pass (a dual
//     layout in two kernels): its main loop is its first (the larger ones
//     after it re-read only the columns that hold NaN or Inf), and it
//     takes a word of column maxima per global load in it (ptxas unrolls
//     it: 16 at sm_90 with NVRTC 13.0).
//   - Instructions per element = loop instructions / elements. A kernel
//     without a backward branch takes its whole instruction count instead
//     (NOPs excluded), over the same elements; the table says so.
//
//===----------------------------------------------------------------------===//

#include "CubinInfo.h"
#include "SassInfo.h"

#include "moss/Compiler/QuantizerSource.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"
#include "moss/Runtime/Nvrtc/Resources.h"
#include "moss/quantize/geometry.cuh"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <string>
#include <vector>

using namespace moss;
using namespace moss::numerics;
using namespace moss::runtime;
using namespace llvm;
using namespace moss::compiler;

namespace {

/// Resident CTAs and warps per SM of a kernel on sm_90.
struct Occupancy {
  int ctas = 0;
  int warps = 0;
  double percent = 0;
};

/// sm_90's occupancy, modelled on its per-SM limits: 64 warps, 32 CTAs,
/// 65536 registers handed out per warp in units of 256 (a warp of R
/// registers per thread takes roundUp(32 R, 256)), and 228 KiB of shared
/// memory of which each CTA takes its own rounded up to 128 bytes plus 1 KiB
/// reserved. `sharedBytes` is the static shared memory; the row-wise kernel's
/// dynamic stages are left out (GpuQuantizer sizes them to the CTAs the
/// registers allow).
Occupancy getSm90Occupancy(int threads, int registers, int sharedBytes) {
  constexpr int kMaxWarps = 64, kMaxCtas = 32, kRegisters = 65536,
                kRegisterUnit = 256, kSharedBytes = 228 * 1024,
                kSharedUnit = 128, kReservedShared = 1024;
  const int warpsPerCta = int(divideCeil(threads, 32));
  const int registersPerCta =
      warpsPerCta * int(alignTo(uint64_t(registers) * 32, kRegisterUnit));
  const int sharedPerCta =
      int(alignTo(uint64_t(sharedBytes), kSharedUnit)) + kReservedShared;
  Occupancy o;
  o.ctas = std::min({kMaxCtas, kMaxWarps / warpsPerCta,
                     kRegisters / std::max(registersPerCta, 1),
                     kSharedBytes / sharedPerCta});
  o.warps = o.ctas * warpsPerCta;
  o.percent = 100.0 * o.warps / kMaxWarps;
  return o;
}

/// The static shared memory of `kernel` in the ptxas report
/// ("Used 40 registers, ..., 520 bytes smem, ...").
int getStaticSharedBytes(StringRef log, StringRef kernel) {
  bool inKernel = false;
  SmallVector<StringRef> lines;
  log.split(lines, '\n');
  for (StringRef line : lines) {
    if (line.contains("Function properties for "))
      inKernel = line.trim().ends_with(" " + kernel.str());
    if (!inKernel || !line.contains(" bytes smem"))
      continue;
    StringRef before = line.substr(0, line.find(" bytes smem"));
    int bytes = 0;
    before.substr(before.find_last_of(' ') + 1).getAsInteger(10, bytes);
    return bytes;
  }
  return 0;
}

/// The input values one thread takes per iteration of the kernel's main
/// loop (see the file comment).
int getElementsPerIteration(const QuantizeSpec &spec, bool withScale) {
  const QuantizerVariant v = chooseQuantizerVariant(spec, withScale);
  const int elementBytes = spec.input == InputType::F32 ? 4 : 2;
  if (v.family == QuantizerVariant::Family::AdamW)
    return quantize::kAdamWTileRows * quantize::kAdamWTileCols /
           quantize::kAdamWThreads;
  if (v.family == QuantizerVariant::Family::Columnwise)
    return quantize::kColumnwiseTileRows *
           (quantize::kColumnwiseTileBytes / elementBytes) /
           quantize::kColumnwiseThreads;
  const int vecElements = 16 / elementBytes;
  const int vecsPerThread = int(divideCeil(v.segment / vecElements, v.threads));
  return vecsPerThread * vecElements;
}

/// What a kernel may use at most.
struct Limits {
  int registers = 0;
  double instructionsPerElement = 0;
};

struct Case {
  /// Short and unique: the test properties' prefix.
  const char *id;
  const char *what;
  QuantizeSpec spec;
  bool withScale = false;
  Limits quantize;
  /// The second kernel's, where the case has one: the reduce pass, or the
  /// column pass of a dual-layout quantize in two kernels.
  Limits second;
};

QuantizeSpec makeSpec(int64_t rows, int64_t cols, InputType input,
                      ScalingScheme scheme, bool transpose, BlockScaleFold fold,
                      bool bothLayouts = false) {
  QuantizeSpec spec;
  spec.rows = rows;
  spec.cols = cols;
  spec.input = input;
  spec.options = {scheme, Fp8Format::E4M3, transpose, fold};
  spec.bothLayouts = bothLayouts;
  return spec;
}

/// The quantizers of moss_jit.nn.Linear's step (E4M3, MOSS blocks of 32
/// with a global per row, folded per row), on activations of 16384 tokens
/// and weights of a 4096 / 11008 MLP. The limits are today's figures
/// (docs/PERFORMANCE.md, "Static check (CPU)") plus about 10%: registers
/// rounded up, instructions per element up to the next half.
std::vector<Case> getTrainingStepCases() {
  const ScalingScheme moss = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  const ScalingScheme perTensor = ScalingScheme::perTensor();
  const ScalingScheme perRow = ScalingScheme::perRow();
  const auto bf16 = InputType::BF16, f32 = InputType::F32;
  const auto none = BlockScaleFold::None, row = BlockScaleFold::Row;
  std::vector<Case> cases;
  auto add = [&](const char *id, const char *what, QuantizeSpec spec,
                 bool withScale, Limits quantize, Limits second = {}) {
    cases.push_back({id, what, spec, withScale, quantize, second});
  };
  add("moss_k4096", "MOSS row-major",
      makeSpec(16384, 4096, bf16, moss, false, row), false, {62, 76.0});
  add("moss_k11008", "MOSS row-major",
      makeSpec(16384, 11008, bf16, moss, false, row), false, {62, 83.5});
  // The transposed kernels' source does not depend on the shape.
  add("moss_t_k4096", "MOSS transposed",
      makeSpec(16384, 4096, bf16, moss, true, row), false, {106, 47.5},
      {80, 9.0});
  add("moss_t_k11008", "MOSS transposed",
      makeSpec(16384, 11008, bf16, moss, true, row), false, {106, 47.5},
      {80, 9.0});
  // In two kernels: the row-wise one with column maxima and the column
  // pass; the transposed quantize pass (above) follows.
  add("moss_dual_k4096", "MOSS both layouts",
      makeSpec(16384, 4096, bf16, moss, false, row, /*bothLayouts=*/true),
      false, {80, 76.0}, {53, 4.5});
  add("moss_dual_k11008", "MOSS both layouts",
      makeSpec(16384, 11008, bf16, moss, false, row, /*bothLayouts=*/true),
      false, {70, 85.0}, {53, 4.5});
  // moss_cast_with_scale of FP32 master weights [out, in].
  add("cast_k4096", "per-tensor cast, given scale",
      makeSpec(11008, 4096, f32, perTensor, false, none), true, {66, 59.5});
  add("cast_k11008", "per-tensor cast, given scale",
      makeSpec(4096, 11008, f32, perTensor, false, none), true, {48, 67.5});
  add("cast_t_k11008", "per-tensor cast, given scale, transposed",
      makeSpec(4096, 11008, f32, perTensor, true, none), true, {103, 82.5});
  add("tensor_k4096", "per-tensor, reduce pass",
      makeSpec(16384, 4096, bf16, perTensor, false, none), false, {56, 55.0},
      {27, 5.5});
  add("tensor_k11008", "per-tensor, reduce pass",
      makeSpec(16384, 11008, bf16, perTensor, false, none), false, {54, 58.5},
      {36, 4.5});
  add("row_k4096", "per-row", makeSpec(16384, 4096, bf16, perRow, false, none),
      false, {58, 59.0});
  add("row_k11008", "per-row",
      makeSpec(16384, 11008, bf16, perRow, false, none), false, {53, 64.0});
  // A mixture-of-experts dispatch: the MOSS row-major quantizer reading
  // each output row from a token index (a variant of its own).
  QuantizeSpec gathered = makeSpec(16384, 4096, bf16, moss, false, row);
  gathered.gather = true;
  add("moss_gather_k4096", "MOSS row-major, gathered rows", gathered, false,
      {70, 76.0});
  // The kernel for any K of 2049 to 4096 BF16 values, at K = 4096: the
  // row-major MOSS quantizer's (moss_k4096) with K read at run time.
  QuantizeSpec anyK = makeSpec(16384, 4096, bf16, moss, false, row);
  anyK.anyK = true;
  add("moss_anyk_k4096", "MOSS row-major, any K", anyK, false, {70, 78.5});
  // The weight gradient's operand of a mixture-of-experts layer: the
  // experts' tokens, each expert's padded by zero rows, transposed.
  QuantizeSpec gatheredT = makeSpec(16384, 4096, bf16, moss, true, row);
  gatheredT.gather = true;
  add("moss_t_gather_k4096", "MOSS transposed, gathered rows", gatheredT,
      false, {106, 47.5}, {80, 9.0});
  // A mixture of experts' FP32 weights [G, 1536, 4096] cast in both layouts
  // with their predicted scales: one expert's cast, and all experts' in one
  // launch (the same pass on its slice's arguments).
  QuantizeSpec expertCast =
      makeSpec(1536, 4096, f32, perTensor, false, none, /*bothLayouts=*/true);
  add("cast_dual_k4096", "per-tensor cast, scale, both layouts", expertCast,
      true, {128, 94.0});
  expertCast.batched = true;
  add("cast_dual_batched_k4096", "per-tensor cast, scale, both, batched",
      expertCast, true, {128, 94.0});
  // The fused optimizer step: AdamW updates the FP32 weight, then the same
  // read casts it (QuantizeSpec::adamw), row-major or in both layouts, one
  // weight or all experts' in one launch.
  QuantizeSpec adamw = makeSpec(11008, 4096, f32, perTensor, false, none);
  adamw.adamw = true;
  add("adamw_k4096", "AdamW step + cast, scale", adamw, true, {124, 128.5});
  adamw.bothLayouts = true;
  add("adamw_dual_k4096", "AdamW step + cast, scale, both", adamw, true,
      {128, 144.0});
  QuantizeSpec expertAdamW = expertCast;
  expertAdamW.adamw = true;
  add("adamw_dual_batched_k4096", "AdamW step + cast, both, batched",
      expertAdamW, true, {128, 145.5});
  return cases;
}

std::string getDtypeName(InputType input) {
  return input == InputType::F32 ? "f32" : "bf16";
}

TEST(QuantizerSassTest, TrainingStepQuantizersStayWithinTheirLimits) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  Expected<std::string> nvdisasm = jit::findNvdisasm();
  if (!nvdisasm)
    GTEST_SKIP() << toString(nvdisasm.takeError());

  // Sources that do not depend on the shape (the transposed kernels) are
  // compiled once.
  struct Compiled {
    CompileResult result;
    std::vector<jit::SassFunction> sass;
  };
  StringMap<Compiled> compiled;

  const char *kRow = "{0,-40} {1,-17} {2,-6} {3,7} {4,4} {5,6} {6,8} {7,4} "
                     "{8,6} {9,5} {10,8}\n";
  std::string table =
      formatv(kRow, "variant", "shape", "pass", "threads", "regs", "smem",
              "warps/SM", "occ%", "loop", "elems", "instr/el")
          .str();
  // The rows so far are printed however the test ends.
  const std::string nvrtc = getNvrtcVersion()->toString();
  scope_exit printTable([&] {
    outs() << "SASS of the training step's quantizers (sm_90a, NVRTC " << nvrtc
           << "); loop = instructions of the main loop, * = no loop: the "
              "whole kernel\n"
           << table;
    outs().flush();
  });
  for (const Case &c : getTrainingStepCases()) {
    SCOPED_TRACE(c.id);
    Expected<QuantizerSource> source =
        generateQuantizerSource(c.spec, c.withScale);
    ASSERT_TRUE(bool(source)) << toString(source.takeError());
    auto [entry, isNew] = compiled.try_emplace(source->source);
    if (isNew) {
      CompileOptions options;
      options.arch = "sm_90a";
      options.flags.push_back(kPtxasVerboseFlag);
      Expected<CompileResult> result = compileCuda(source->source, options);
      ASSERT_TRUE(bool(result)) << toString(result.takeError());
      entry->second.result = std::move(*result);
      Expected<std::vector<jit::SassFunction>> sass =
          jit::disassembleCubin(entry->second.result.cubin, *nvdisasm);
      ASSERT_TRUE(bool(sass)) << toString(sass.takeError());
      entry->second.sass = std::move(*sass);
    }
    const Compiled &kernels = entry->second;
    std::vector<KernelResources> reported =
        parsePtxasResources(kernels.result.log);

    struct Pass {
      const char *name;
      std::string kernel;
      Limits limits;
      int threads;
      int elements;
      /// The column pass: its main loop is its first, not its largest, and
      /// `elements` are the values of each of the loop's global loads
      /// (ptxas unrolls it).
      bool column = false;
    };
    const int elements = getElementsPerIteration(c.spec, c.withScale);
    std::vector<Pass> passes = {{"quant", source->quantizeKernel, c.quantize,
                                 int(source->threads), elements}};
    if (!source->reduceKernel.empty())
      passes.push_back({"reduce", source->reduceKernel, c.second,
                        int(source->threads), elements});
    // The column pass's loop takes words of maxima, a load each. Its first
    // loop is the main one: the larger loops after it re-read the columns
    // that hold NaN or Inf, and only those.
    if (!source->columnKernel.empty())
      passes.push_back({"column", source->columnKernel, c.second,
                        quantize::kColumnMaxThreads,
                        c.spec.input == InputType::F32 ? 1 : 2,
                        /*column=*/true});
    for (const Pass &pass : passes) {
      SCOPED_TRACE(pass.kernel);
      auto resources = std::find_if(
          reported.begin(), reported.end(),
          [&](const KernelResources &k) { return k.name == pass.kernel; });
      ASSERT_NE(resources, reported.end()) << kernels.result.log;
      EXPECT_FALSE(resources->usesLocalMemory())
          << resources->stackFrameBytes << " bytes stack, "
          << resources->spillStoreBytes << " bytes spilled";
      Expected<int> registers =
          jit::getCubinRegisterCount(kernels.result.cubin, pass.kernel);
      ASSERT_TRUE(bool(registers)) << toString(registers.takeError());
      EXPECT_EQ(*registers, resources->registers);
      const int shared = getStaticSharedBytes(kernels.result.log, pass.kernel);
      const Occupancy occupancy =
          getSm90Occupancy(pass.threads, *registers, shared);

      auto function = std::find_if(
          kernels.sass.begin(), kernels.sass.end(),
          [&](const jit::SassFunction &f) { return f.name == pass.kernel; });
      ASSERT_NE(function, kernels.sass.end());
      std::optional<jit::SassLoop> loop;
      int elements = pass.elements;
      if (!pass.column) {
        loop = jit::findLargestLoop(*function);
      } else if (std::vector<jit::SassLoop> loops = jit::findLoops(*function);
                 !loops.empty()) {
        loop = loops.front();
        elements *= int(llvm::count_if(
            function->instructions, [&](const jit::SassInstruction &i) {
              return i.address >= loop->begin && i.address <= loop->end &&
                     StringRef(i.opcode).starts_with("LDG");
            }));
      }
      ASSERT_GT(elements, 0) << "no global load in the column pass's loop";
      const int instructions =
          loop ? loop->instructions : function->countInstructions();
      const double perElement = double(instructions) / elements;

      const std::string shape = formatv("{0}x{1} {2}", c.spec.rows, c.spec.cols,
                                        getDtypeName(c.spec.input));
      table += formatv(kRow, c.what, shape, pass.name, pass.threads, *registers,
                       shared, formatv("{0}/64", occupancy.warps).str(),
                       formatv("{0:F0}", occupancy.percent).str(),
                       std::to_string(instructions) + (loop ? "" : "*"),
                       elements, formatv("{0:F2}", perElement).str())
                   .str();
      const std::string key = std::string(c.id) + "_" + pass.name;
      ::testing::Test::RecordProperty(key + "_registers", *registers);
      ::testing::Test::RecordProperty(key + "_warps_per_sm", occupancy.warps);
      ::testing::Test::RecordProperty(key + "_loop_instructions", instructions);
      ::testing::Test::RecordProperty(key + "_elements_per_iteration",
                                      elements);
      ::testing::Test::RecordProperty(key + "_instructions_per_element",
                                      formatv("{0:F2}", perElement).str());

      EXPECT_LE(*registers, pass.limits.registers)
          << "registers per thread above the limit";
      EXPECT_LE(perElement, pass.limits.instructionsPerElement)
          << "SASS instructions per element above the limit";
    }
  }
}

} // namespace
