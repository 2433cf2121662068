//===- GemmApiTest.cpp - Bad input to the GEMM API, without a GPU ---------===//
//
// checkGemmLaunch (C++) and moss_gemm_check / moss_gemm (C) reject every
// kind of bad argument before touching the GPU, naming it: null and
// misaligned pointers, pointers a spec does not use, scale tensors of the
// wrong size for the scheme, K not a multiple of 32 or of a scaling block,
// out-of-range shapes, unsupported schemes, bad enum values. A valid call is
// accepted, so each rejection is caused by the one field the case breaks.
//
//===----------------------------------------------------------------------===//

#include "moss/Gemm/Gemm.h"
#include "moss/moss.h"

#include "gtest/gtest.h"

#include <cstddef>
#include <functional>
#include <cmath>
#include <cstdint>
#include <string>

using namespace moss;
using compiler::FloatType;
using compiler::GemmSpec;
using numerics::BlockScaleFold;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

/// MOSS forward: A two-level (row global, 32) x B per-tensor, with bias, C
/// and amax, at M = 100, N = 256, K = 512.
GemmSpec forwardSpec() {
  GemmSpec spec;
  spec.n = 256;
  spec.k = 512;
  spec.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  spec.bScaling = ScalingScheme::perTensor();
  spec.bias = FloatType::F32;
  spec.accumulate = FloatType::F32;
  spec.beta = 0.5f;
  spec.amax = true;
  return spec;
}

constexpr int64_t kM = 100;

/// Buffers that fit forwardSpec() at M = kM (fake, aligned addresses).
GemmBuffers validBuffers() {
  GemmBuffers b;
  b.a = {0x10000, 0x20000, kM * 512 / 32, 0x30000, kM};
  b.b = {0x40000, 0, 0, 0x50000, 1};
  b.d = 0x60000;
  b.bias = 0x70000;
  b.c = 0x80000;
  b.amax = 0x90000;
  return b;
}

std::string check(const GemmSpec &spec, int64_t m, const GemmBuffers &b) {
  llvm::Error error = checkGemmLaunch(spec, m, b);
  return error ? llvm::toString(std::move(error)) : "";
}

TEST(GemmApi, AcceptsAValidCall) {
  EXPECT_EQ(check(forwardSpec(), kM, validBuffers()), "");
  EXPECT_EQ(check(forwardSpec(), 0,
                  [] {
                    GemmBuffers b = validBuffers();
                    b.a.localScaleCount = 0;
                    b.a.globalScaleCount = 0;
                    return b;
                  }()),
            "");
}

TEST(GemmApi, ScaleCountsFollowTheScheme) {
  GemmSpec spec = forwardSpec();
  spec.bScaling = ScalingScheme::perGroup(128, 128);
  GemmScaleCounts counts = getGemmScaleCounts(spec, 300);
  EXPECT_EQ(counts.aLocal, 300 * (512 / 32));
  EXPECT_EQ(counts.aGlobal, 300);
  EXPECT_EQ(counts.bLocal, (256 / 128) * (512 / 128));
  EXPECT_EQ(counts.bGlobal, 0);
  spec.aScaling = ScalingScheme::twoLevel(GlobalScope::Tensor, 32);
  spec.bScaling = ScalingScheme::mxfp8();
  counts = getGemmScaleCounts(spec, 7);
  EXPECT_EQ(counts.aGlobal, 1);
  EXPECT_EQ(counts.bLocal, 256 * 512 / 32);
  EXPECT_EQ(counts.bGlobal, 0);
}

struct BadCase {
  const char *name;
  std::function<void(GemmSpec &, int64_t &, GemmBuffers &)> breakIt;
  const char *expected; ///< a substring of the message
};

TEST(GemmApi, RejectsEachBadArgumentByName) {
  const BadCase cases[] = {
      {"null A codes",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.a.codes = 0; },
       "buffers.a.codes is null"},
      {"misaligned B codes",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.b.codes += 8; },
       "buffers.b.codes must be 16-byte aligned"},
      {"null output", [](GemmSpec &, int64_t &, GemmBuffers &b) { b.d = 0; },
       "buffers.d (the output) is null"},
      {"misaligned output",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.d += 4; },
       "must be 16-byte aligned"},
      {"missing block scales",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.a.localScales = 0; },
       "buffers.a.localScales is null"},
      {"block scales a scheme lacks",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.b.localScales = 0x1000; },
       "buffers.b.localScales is given"},
      {"too few block scales",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.a.localScaleCount -= 1; },
       "expected 1600 block scales"},
      {"per-tensor global count",
       [](GemmSpec &, int64_t &, GemmBuffers &b) {
         b.b.globalScaleCount = 256;
       },
       "buffers.b.globalScaleCount=256"},
      {"per-row global count",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.a.globalScaleCount = 1; },
       "expected 100"},
      {"misaligned global scales",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.a.globalScales += 2; },
       "4-byte aligned"},
      {"bias without a bias type",
       [](GemmSpec &s, int64_t &, GemmBuffers &) { s.bias.reset(); },
       "buffers.bias is given"},
      {"missing C", [](GemmSpec &, int64_t &, GemmBuffers &b) { b.c = 0; },
       "buffers.c (the accumulate operand) is null"},
      {"missing amax",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.amax = 0; },
       "buffers.amax is null"},
      {"misaligned bias",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.bias += 1; },
       "buffers.bias must be"},
      {"misaligned C",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.c += 2; },
       "buffers.c (the accumulate operand) must be 4-byte aligned"},
      {"misaligned amax",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.amax += 2; },
       "buffers.amax must be 4-byte aligned"},
      {"K not a multiple of 32",
       [](GemmSpec &s, int64_t &, GemmBuffers &) { s.k = 100; },
       "K=100 is not a multiple of 32"},
      {"K not a multiple of the block",
       [](GemmSpec &s, int64_t &, GemmBuffers &) {
         s.aScaling = ScalingScheme::perGroup(1, 128);
         s.k = 96;
       },
       "is not a multiple of operand A's scaling block 128"},
      {"unsupported block",
       [](GemmSpec &s, int64_t &, GemmBuffers &) {
         s.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 16);
       },
       "scaling blocks of 32, 64 or 128"},
      {"negative m", [](GemmSpec &, int64_t &m, GemmBuffers &) { m = -3; },
       "m=-3 is out of range"},
      {"m past 2^31",
       [](GemmSpec &, int64_t &m, GemmBuffers &) { m = 1ll << 31; },
       "out of range"},
      {"N past 2^31",
       [](GemmSpec &s, int64_t &, GemmBuffers &) { s.n = 1ll << 32; },
       "below 2^31"},
      {"zero N", [](GemmSpec &s, int64_t &, GemmBuffers &) { s.n = 0; },
       "N=0 is not a valid size"},
      {"m differs from a static M",
       [](GemmSpec &s, int64_t &, GemmBuffers &) { s.m = 64; },
       "specialized to M=64"},
      {"promoteK not an interval",
       [](GemmSpec &s, int64_t &, GemmBuffers &) {
         s.aScaling = ScalingScheme::perTensor();
         s.promoteK = 48;
       },
       "promoteK=48 is not a promotion interval"},
      {"promoteK coarser than the block",
       [](GemmSpec &s, int64_t &, GemmBuffers &) {
         s.promoteK = 64;
         s.fold = moss::numerics::BlockScaleFold::None;
       },
       "promoteK=64 is coarser than operand A's scaling block 32"},
      {"promoteK coarser than the 128 fold's group",
       [](GemmSpec &s, int64_t &, GemmBuffers &) {
         s.promoteK = 128;
         s.fold = moss::numerics::BlockScaleFold::K128;
         s.k = 4096 + 64;
       },
       "K=4160"},
      {"a fold without E8M0 factors",
       [](GemmSpec &s, int64_t &, GemmBuffers &) {
         s.aScaling = ScalingScheme::perTensor();
         s.fold = moss::numerics::BlockScaleFold::Row;
       },
       "neither operand has them"},
      {"a NaN beta",
       [](GemmSpec &s, int64_t &, GemmBuffers &) { s.beta = NAN; },
       "beta=nan is not finite"},
      {"an infinite beta",
       [](GemmSpec &s, int64_t &, GemmBuffers &) { s.beta = INFINITY; },
       "is not finite"},
      {"D overlapping A's codes",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.d = b.a.codes + 256; },
       "buffers.d (the output) overlaps the codes of operand A"},
      {"D wrapping around the address space",
       [](GemmSpec &, int64_t &, GemmBuffers &b) {
         b.d = 0xFFFFFFFFFFFFFFF0ull;
       },
       "wraps around the address space"},
      {"C (f32) at D (bf16)",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.c = b.d; },
       "C may be D only with the output's type"},
      {"C overlapping D",
       [](GemmSpec &, int64_t &, GemmBuffers &b) { b.c = b.d + 1024; },
       "buffers.c overlaps buffers.d without being it"},
      {"K not a multiple of promoteK",
       [](GemmSpec &s, int64_t &, GemmBuffers &) {
         s.promoteK = 128;
         s.aScaling = ScalingScheme::perTensor();
         s.k = 480;
       },
       "K=480 is not a multiple of promoteK=128"},
      {"beta without C",
       [](GemmSpec &s, int64_t &, GemmBuffers &b) {
         s.accumulate.reset();
         b.c = 0;
       },
       "beta is set but the GEMM has no accumulate operand"},
  };
  for (const BadCase &c : cases) {
    GemmSpec spec = forwardSpec();
    int64_t m = kM;
    GemmBuffers buffers = validBuffers();
    c.breakIt(spec, m, buffers);
    std::string message = check(spec, m, buffers);
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.name << ": got \"" << message << "\", expected it to contain \""
        << c.expected << "\"";
  }
}

/// The C API's version of forwardSpec() / validBuffers().
void cForward(moss_gemm_spec_t &spec, moss_gemm_buffers_t &buffers) {
  moss_gemm_spec_init(&spec);
  spec.n = 256;
  spec.k = 512;
  spec.bias = MOSS_TYPE_F32;
  spec.accumulate = MOSS_TYPE_F32;
  spec.beta = 0.5f;
  spec.amax = 1;
  buffers = moss_gemm_buffers_t{};
  buffers.a = {0x10000, 0x20000, kM * 512 / 32, 0x30000, kM};
  buffers.b = {0x40000, 0, 0, 0x50000, 1};
  buffers.d = 0x60000;
  buffers.bias = 0x70000;
  buffers.c = 0x80000;
  buffers.amax = 0x90000;
}

std::string cCheck(const moss_gemm_spec_t *spec, int64_t m,
                   const moss_gemm_buffers_t *buffers,
                   moss_error_code_t *code = nullptr) {
  moss_error_t error = moss_gemm_check(spec, m, buffers);
  std::string message = moss_error_message(error);
  if (code)
    *code = moss_error_code(error);
  moss_error_destroy(error);
  return message;
}

TEST(GemmCApi, ChecksWithoutAGpu) {
  moss_gemm_spec_t spec;
  moss_gemm_buffers_t buffers;
  cForward(spec, buffers);
  EXPECT_EQ(cCheck(&spec, kM, &buffers), "");

  moss_error_code_t code = MOSS_ERROR_NONE;
  EXPECT_EQ(cCheck(nullptr, kM, &buffers, &code), "spec is NULL");
  EXPECT_EQ(code, MOSS_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cCheck(&spec, kM, nullptr), "buffers is NULL");

  moss_gemm_spec_t bad = spec;
  bad.struct_size = 8;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("call moss_gemm_spec_init"),
            std::string::npos);
  // A caller built against version 1 (no mma) is still served.
  moss_gemm_spec_t version1 = spec;
  version1.struct_size = offsetof(moss_gemm_spec_t, mma);
  EXPECT_EQ(cCheck(&version1, kM, &buffers), "");
  version1.struct_size -= 4;
  EXPECT_NE(cCheck(&version1, kM, &buffers).find("smaller than version 1's"),
            std::string::npos);
  for (int32_t mma : {MOSS_MMA_FP8, MOSS_MMA_F16}) {
    moss_gemm_spec_t chosen = spec;
    chosen.mma = mma;
    EXPECT_EQ(cCheck(&chosen, kM, &buffers), "");
  }
  bad = spec;
  bad.mma = 3;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("spec->mma=3 is not"),
            std::string::npos);
  // Past the struct's end (a version 1 caller) it is not read.
  version1 = bad;
  version1.struct_size = offsetof(moss_gemm_spec_t, mma);
  EXPECT_EQ(cCheck(&version1, kM, &buffers), "");
  for (int32_t fold : {MOSS_FOLD_NONE, MOSS_FOLD_128, MOSS_FOLD_ROW}) {
    moss_gemm_spec_t chosen = spec;
    chosen.fold = fold;
    EXPECT_EQ(cCheck(&chosen, kM, &buffers), "") << "fold " << fold;
  }
  bad = spec;
  bad.fold = 4;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("spec->fold=4 is not"),
            std::string::npos);
  // A version 2 caller (no fold) is not read past its end.
  moss_gemm_spec_t version2 = bad;
  version2.struct_size = offsetof(moss_gemm_spec_t, fold);
  EXPECT_EQ(cCheck(&version2, kM, &buffers), "");
  bad = spec;
  bad.a.reserved = 1;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("spec->a.reserved must be 0"),
            std::string::npos);
  bad = spec;
  bad.struct_size = SIZE_MAX;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("built against a newer moss.h"),
            std::string::npos);
  bad = spec;
  bad.beta = INFINITY;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("spec->beta=inf is not finite"),
            std::string::npos);
  bad = spec;
  bad.a.scheme = 9;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("spec->a.scheme=9"),
            std::string::npos);
  bad = spec;
  bad.b.format = 3;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("spec->b.format=3"),
            std::string::npos);
  bad = spec;
  bad.out = MOSS_TYPE_NONE;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("spec->out=-1"), std::string::npos);
  bad = spec;
  bad.promote_k = 100;
  EXPECT_NE(cCheck(&bad, kM, &buffers).find("promoteK=100"), std::string::npos);
  bad = spec;
  bad.k = 500;
  EXPECT_NE(cCheck(&bad, kM, &buffers, &code).find("K=500"), std::string::npos);
  EXPECT_EQ(code, MOSS_ERROR_INVALID_ARGUMENT);

  moss_gemm_buffers_t badBuffers = buffers;
  badBuffers.a.local_scale_count = 7;
  EXPECT_NE(cCheck(&spec, kM, &badBuffers).find("localScaleCount=7"),
            std::string::npos);
  badBuffers = buffers;
  badBuffers.d = 0x60001;
  EXPECT_NE(cCheck(&spec, kM, &badBuffers).find("16-byte aligned"),
            std::string::npos);
}

TEST(GemmCApi, NullContextFailsBeforeAnyWork) {
  moss_gemm_spec_t spec;
  moss_gemm_buffers_t buffers;
  cForward(spec, buffers);
  moss_error_t error = moss_gemm(nullptr, &spec, kM, &buffers, nullptr);
  EXPECT_EQ(moss_error_code(error), MOSS_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(moss_error_message(error), "context is NULL");
  moss_error_destroy(error);
}

TEST(GemmCApi, PlanCallsCheckTheirHandlesFirst) {
  moss_gemm_spec_t spec;
  moss_gemm_buffers_t buffers;
  cForward(spec, buffers);
  auto expectInvalid = [](moss_error_t error, const char *message) {
    EXPECT_EQ(moss_error_code(error), MOSS_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(moss_error_message(error), message);
    moss_error_destroy(error);
  };
  expectInvalid(moss_gemm_plan_create(nullptr, &spec, nullptr),
                "plan is NULL");
  // A failed creation leaves no plan behind, whatever *plan held.
  moss_gemm_plan_t plan = reinterpret_cast<moss_gemm_plan_t>(uintptr_t(1));
  expectInvalid(moss_gemm_plan_create(nullptr, &spec, &plan),
                "context is NULL");
  EXPECT_EQ(plan, nullptr);
  expectInvalid(moss_gemm_plan_launch(nullptr, kM, &buffers, nullptr),
                "plan is NULL");
  moss_gemm_plan_destroy(nullptr);
}

} // namespace

namespace {

/// forwardSpec() as an m-grouped GEMM of 4 experts: B [4 * 256, 512] with a
/// global per expert, bias [4, 256]; valid buffers for it at M = kM.
GemmSpec groupedSpec() {
  GemmSpec spec = forwardSpec();
  spec.groups = 4;
  return spec;
}

GemmBuffers validGroupedBuffers() {
  GemmBuffers b = validBuffers();
  b.b.globalScaleCount = 4;
  b.d = 0x200000; // past B's 4 * 256 * 512 bytes of codes at 0x40000
  b.groupOffsets = 0xA0000;
  return b;
}

TEST(GemmApi, GroupedGemmsTakeOffsetsAndAnExpertsB) {
  EXPECT_EQ(check(groupedSpec(), kM, validGroupedBuffers()), "");
  // Each expert's B: its global, and per row its block scales.
  GemmScaleCounts counts = getGemmScaleCounts(groupedSpec(), kM);
  EXPECT_EQ(counts.bGlobal, 4);
  GemmSpec perGroup = groupedSpec();
  perGroup.bScaling = ScalingScheme::perGroup(128, 128);
  counts = getGemmScaleCounts(perGroup, kM);
  EXPECT_EQ(counts.bLocal, 4 * (256 / 128) * (512 / 128));
  EXPECT_EQ(counts.bGlobal, 0);
  GemmSpec perRow = groupedSpec();
  perRow.bScaling = ScalingScheme::perRow();
  EXPECT_EQ(getGemmScaleCounts(perRow, kM).bGlobal, 4 * 256);

  GemmBuffers noOffsets = validGroupedBuffers();
  noOffsets.groupOffsets = 0;
  EXPECT_NE(check(groupedSpec(), kM, noOffsets).find("buffers.groupOffsets"),
            std::string::npos);
  GemmBuffers misaligned = validGroupedBuffers();
  misaligned.groupOffsets = 0xA0002;
  EXPECT_NE(check(groupedSpec(), kM, misaligned).find("4-byte aligned"),
            std::string::npos);
  GemmBuffers plainWithOffsets = validBuffers();
  plainWithOffsets.groupOffsets = 0xA0000;
  EXPECT_NE(check(forwardSpec(), kM, plainWithOffsets)
                .find("buffers.groupOffsets is given"),
            std::string::npos);
  GemmBuffers oneGlobal = validGroupedBuffers();
  oneGlobal.b.globalScaleCount = 1;
  EXPECT_NE(check(groupedSpec(), kM, oneGlobal).find("expected 4"),
            std::string::npos);
  // The output may not overlap any expert's B.
  GemmBuffers overlapping = validGroupedBuffers();
  overlapping.d = 0x60000;
  EXPECT_NE(check(groupedSpec(), kM, overlapping).find("overlaps"),
            std::string::npos);
  // The rows are known at launch only.
  GemmSpec staticM = groupedSpec();
  staticM.m = kM;
  EXPECT_NE(check(staticM, kM, validGroupedBuffers()).find("dynamic M"),
            std::string::npos);
  GemmSpec tooMany = groupedSpec();
  tooMany.groups = GemmSpec::kMaxGroups + 1;
  EXPECT_NE(check(tooMany, kM, validGroupedBuffers()).find("expert count"),
            std::string::npos);
}

TEST(GemmApi, MaskedGroupedGemmsHoldEachExpertsRowsAlike) {
  GemmSpec masked = groupedSpec();
  masked.maskedGroups = true;
  // kM rows are 4 experts' kM / 4 each.
  ASSERT_EQ(kM % 4, 0);
  EXPECT_EQ(check(masked, kM, validGroupedBuffers()), "");
  EXPECT_NE(check(masked, kM - 2, validGroupedBuffers())
                .find("is not a multiple of the 4 experts of a masked"),
            std::string::npos);
  GemmSpec plain = forwardSpec();
  plain.maskedGroups = true;
  EXPECT_NE(check(plain, kM, validBuffers()).find("expected groups > 0"),
            std::string::npos);
  EXPECT_NE(masked.str().find("4 experts (m-grouped, masked)"),
            std::string::npos);
}

/// A k-grouped GEMM of 4 experts: D_g [64, 256] over the experts' columns
/// of A [64, K] and B [256, K], MOSS x per-row, f32 output with C.
GemmSpec kGroupedSpec() {
  GemmSpec spec;
  spec.m = 64;
  spec.n = 256;
  spec.k = GemmSpec::kDynamic;
  spec.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  spec.bScaling = ScalingScheme::perRow();
  spec.out = FloatType::F32;
  spec.accumulate = FloatType::F32;
  spec.groups = 4;
  spec.groupedK = true;
  return spec;
}

/// Buffers that fit kGroupedSpec() at K = 1024.
GemmBuffers validKGroupedBuffers() {
  GemmBuffers b;
  b.a = {0x10000, 0x30000, 64 * 1024 / 32, 0x40000, 64};
  b.b = {0x50000, 0, 0, 0x90000, 256};
  b.d = 0x100000; // 4 * 64 * 256 f32 = 256 KiB
  b.c = 0x200000;
  b.groupOffsets = 0xA0000;
  return b;
}

TEST(GemmApi, KGroupedGemmsLaunchWithKAndTheirExpertsOutputs) {
  EXPECT_EQ(check(kGroupedSpec(), 1024, validKGroupedBuffers()), "");
  // Scale counts follow the launch's K; B is shared by the experts.
  GemmScaleCounts counts = getGemmScaleCounts(kGroupedSpec(), 1024);
  EXPECT_EQ(counts.aLocal, 64 * 1024 / 32);
  EXPECT_EQ(counts.aGlobal, 64);
  EXPECT_EQ(counts.bGlobal, 256);
  EXPECT_EQ(getGemmRowsB(kGroupedSpec()), 256);
  EXPECT_EQ(getGemmRowsD(kGroupedSpec(), 64), 4 * 64);
  // No tokens at all: zeros (times the epilogue) for every expert.
  GemmBuffers empty = validKGroupedBuffers();
  empty.a.localScaleCount = 0;
  EXPECT_EQ(check(kGroupedSpec(), 0, empty), "");

  EXPECT_NE(check(kGroupedSpec(), 1000, validKGroupedBuffers())
                .find("not a multiple of 128"),
            std::string::npos);
  EXPECT_NE(check(kGroupedSpec(), 1024 + 128, validKGroupedBuffers())
                .find("buffers.a.localScaleCount=2048"),
            std::string::npos);
  // The output is 4 experts' [64, 256]: C at 0x100000 + 128 KiB overlaps.
  GemmBuffers overlapping = validKGroupedBuffers();
  overlapping.c = 0x120000;
  EXPECT_NE(check(kGroupedSpec(), 1024, overlapping).find("overlaps"),
            std::string::npos);
  GemmBuffers noOffsets = validKGroupedBuffers();
  noOffsets.groupOffsets = 0;
  EXPECT_NE(check(kGroupedSpec(), 1024, noOffsets).find("groupOffsets"),
            std::string::npos);

  // The spec: a static M, a dynamic K, no bias, no fold, contiguous.
  GemmSpec dynamicM = kGroupedSpec();
  dynamicM.m = GemmSpec::kDynamic;
  GemmSpec staticK = kGroupedSpec();
  staticK.k = 1024;
  GemmSpec withBias = kGroupedSpec();
  withBias.bias = FloatType::F32;
  GemmSpec folded = kGroupedSpec();
  folded.fold = BlockScaleFold::Row;
  GemmSpec masked = kGroupedSpec();
  masked.maskedGroups = true;
  GemmSpec noGroups = kGroupedSpec();
  noGroups.groups = 0;
  for (auto [bad, expected] :
       {std::pair{dynamicM, "static M and a dynamic K"},
        std::pair{staticK, "static M and a dynamic K"},
        std::pair{withBias, "takes no bias"}, std::pair{folded, "no fold"},
        std::pair{masked, "contiguous layout"},
        std::pair{noGroups, "groups > 0"}}) {
    llvm::Error error = checkGemmSpec(bad);
    ASSERT_TRUE(bool(error)) << expected;
    const std::string text = llvm::toString(std::move(error));
    EXPECT_NE(text.find(expected), std::string::npos) << text;
  }
}

} // namespace

namespace {

TEST(GemmCApi, GroupedSpecsLaunchThroughAPlanWithOffsets) {
  moss_gemm_spec_t spec;
  moss_gemm_buffers_t buffers;
  cForward(spec, buffers);
  EXPECT_EQ(spec.groups, 0);
  spec.groups = 4;
  // moss_gemm_check and moss_gemm take no offsets.
  EXPECT_NE(cCheck(&spec, kM, &buffers)
                .find("spec->groups=4: a grouped GEMM launches through a "
                      "plan, with its offsets "
                      "(moss_gemm_plan_launch_grouped)"),
            std::string::npos);
  // A caller built before the field is served a plain GEMM.
  spec.struct_size = offsetof(moss_gemm_spec_t, groups);
  EXPECT_EQ(cCheck(&spec, kM, &buffers), "");
  moss_error_t error =
      moss_gemm_plan_launch_grouped(nullptr, kM, &buffers, 0x1000, nullptr);
  ASSERT_NE(error, nullptr);
  EXPECT_STREQ(moss_error_message(error), "plan is NULL");
  moss_error_destroy(error);

  // The masked layout: a layout the enum has, on a grouped spec.
  spec.struct_size = sizeof(spec);
  spec.group_layout = 7;
  EXPECT_NE(cCheck(&spec, kM, &buffers).find("spec->group_layout=7"),
            std::string::npos);
  spec.groups = 0;
  spec.group_layout = MOSS_GROUPS_MASKED;
  EXPECT_NE(cCheck(&spec, kM, &buffers).find("expected groups > 0"),
            std::string::npos);
  // The k-grouped layout converts to GemmSpec::groupedK.
  spec.group_layout = MOSS_GROUPS_ALONG_K;
  EXPECT_NE(
      cCheck(&spec, kM, &buffers).find("a k-grouped GEMM needs groups > 0"),
      std::string::npos);
  // A caller built before the field gets the contiguous layout.
  spec.struct_size = offsetof(moss_gemm_spec_t, group_layout);
  EXPECT_EQ(cCheck(&spec, kM, &buffers), "");
}

} // namespace

namespace {

// The output types' rounding allowances, and where each rounds to infinity
// (the largest finite value plus half its spacing).
TEST(GemmOutputRounding, EachTypeOverflowsPastItsLargestValue) {
  EXPECT_EQ(compiler::getOutputRounding(FloatType::F16).overflow,
            65504.0 + 16.0);
  EXPECT_EQ(compiler::getOutputRounding(FloatType::BF16).overflow,
            std::ldexp(255.5, 120));
  EXPECT_EQ(compiler::getOutputRounding(FloatType::F32).overflow,
            std::ldexp(double((1 << 24) - 1) + 0.5, 104));
  EXPECT_EQ(compiler::getOutputRounding(FloatType::BF16).relative,
            std::ldexp(1.0, -8));
}

} // namespace
