//===- SassInfoTest.cpp - SASS listings read from nvdisasm ---------------===//
//
// Parses a fixed nvdisasm listing (no toolkit needed), then, where NVRTC and
// nvdisasm are both present, a kernel compiled and disassembled here; the
// latter is skipped, with the reason, without them.
//
//===----------------------------------------------------------------------===//

#include "SassInfo.h"

#include "moss/Runtime/Nvrtc/Nvrtc.h"

#include "gtest/gtest.h"

using namespace moss;
using namespace llvm;

namespace {

// Three functions as `nvdisasm -c` prints them: one without a loop (its
// last BRA jumps to itself), one with an outer loop holding an inner one,
// and one whose wait's retry sits past its exit and jumps back into its loop.
constexpr const char *kListing = R"sass(
	.target	sm_90a

//--------------------- .text.moss_small          --------------------------
	.section	.text.moss_small,"ax",@progbits
	.align	128
moss_small:
.text.moss_small:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   STG.E desc[UR4][R2.64], R7 ;
        /*0020*/                   EXIT ;
.L_x_0:
        /*0030*/                   BRA `(.L_x_0);
        /*0040*/                   NOP;
        /*0050*/                   NOP;
.L_x_9:

//--------------------- .text.moss_nested         --------------------------
	.section	.text.moss_nested,"ax",@progbits
moss_nested:
        /*0000*/                   S2R R3, SR_TID.X ;
        /*0010*/              @!P0 BRA `(.L_x_2) ;
.L_x_1:
        /*0020*/                   IADD3 R10, R10, 0x4, RZ ;
.L_x_3:
        /*0030*/                   FFMA R12, R17, R12, R0 ;
        /*0040*/                   NOP ;
        /*0050*/               @P1 BRA `(.L_x_3) ;
        /*0060*/                   ISETP.NE.AND P0, PT, R2, RZ, PT ;
        /*0070*/               @P0 BRA.U `(.L_x_1) ;
.L_x_2:
        /*0080*/                   EXIT ;

//--------------------- .text.moss_retry          --------------------------
	.section	.text.moss_retry,"ax",@progbits
moss_retry:
        /*0000*/                   S2R R3, SR_TID.X ;
.L_x_10:
        /*0010*/                   IADD3 R10, R10, 0x4, RZ ;
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0030*/              @!P0 BRA `(.L_x_12) ;
.L_x_11:
        /*0040*/                   FFMA R12, R17, R12, R0 ;
        /*0050*/               @P1 BRA `(.L_x_10) ;
        /*0060*/                   EXIT ;
.L_x_12:
        /*0070*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0080*/              @!P0 BRA `(.L_x_12) ;
        /*0090*/                   BRA `(.L_x_11) ;
)sass";

TEST(SassInfoTest, ReadsFunctionsBranchesAndLoops) {
  Expected<std::vector<jit::SassFunction>> functions =
      jit::parseNvdisasm(kListing);
  ASSERT_TRUE(bool(functions)) << toString(functions.takeError());
  ASSERT_EQ(functions->size(), 3u);

  const jit::SassFunction &small = (*functions)[0];
  EXPECT_EQ(small.name, "moss_small");
  ASSERT_EQ(small.instructions.size(), 6u);
  EXPECT_EQ(small.countInstructions(), 4);
  EXPECT_EQ(small.instructions[1].opcode, "STG.E");
  EXPECT_EQ(small.instructions[3].branchTarget, std::optional<uint64_t>(0x30));
  EXPECT_FALSE(jit::findLargestLoop(small)) << "a branch to itself";

  const jit::SassFunction &nested = (*functions)[1];
  EXPECT_EQ(nested.name, "moss_nested");
  EXPECT_EQ(nested.instructions[1].opcode, "BRA");
  EXPECT_EQ(nested.instructions[1].text, "@!P0 BRA `(.L_x_2)");
  EXPECT_EQ(nested.instructions[1].branchTarget, std::optional<uint64_t>(0x80));
  EXPECT_EQ(nested.instructions[7].opcode, "BRA.U");
  std::optional<jit::SassLoop> loop = jit::findLargestLoop(nested);
  ASSERT_TRUE(loop);
  EXPECT_EQ(loop->begin, 0x20u);
  EXPECT_EQ(loop->end, 0x70u);
  EXPECT_EQ(loop->instructions, 5) << "the NOP is not counted";
  EXPECT_EQ(jit::findLoops(nested).size(), 2u);

  // The retry's jump back to 0x40 closes no loop: the loop is 0x10-0x50,
  // and the retry's own wait 0x70-0x80.
  const jit::SassFunction &retry = (*functions)[2];
  std::vector<jit::SassLoop> loops = jit::findLoops(retry);
  ASSERT_EQ(loops.size(), 2u);
  EXPECT_EQ(loops[0].begin, 0x10u);
  EXPECT_EQ(loops[1].begin, 0x70u);
  loop = jit::findLargestLoop(retry);
  ASSERT_TRUE(loop);
  EXPECT_EQ(loop->begin, 0x10u);
  EXPECT_EQ(loop->end, 0x50u);
  EXPECT_EQ(loop->instructions, 5);
}

TEST(SassInfoTest, UnknownLabelsAndEmptyListingsAreErrors) {
  Expected<std::vector<jit::SassFunction>> missing = jit::parseNvdisasm(
      "\t.section\t.text.k,\"ax\",@progbits\n"
      "        /*0000*/                   BRA `(.L_x_7) ;\n");
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(toString(missing.takeError()).find("'.L_x_7'"), std::string::npos);
  Expected<std::vector<jit::SassFunction>> empty =
      jit::parseNvdisasm("\t.target\tsm_90a\n");
  ASSERT_FALSE(bool(empty));
  consumeError(empty.takeError());
}

TEST(SassInfoTest, DisassemblesACompiledLoop) {
  if (!runtime::isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  Expected<std::string> nvdisasm = jit::findNvdisasm();
  if (!nvdisasm)
    GTEST_SKIP() << toString(nvdisasm.takeError());
  runtime::CompileOptions options;
  options.arch = "sm_90a";
  options.includeTemplates = false;
  Expected<runtime::CompileResult> result = runtime::compileCuda(R"cuda(
extern "C" __global__ void moss_sum(float *out, const float *in, int n) {
  float s = 0;
#pragma unroll 1
  for (int j = 0; j < n; ++j)
    s += in[j] * in[j + threadIdx.x];
  out[threadIdx.x] = s;
}
extern "C" __global__ void moss_one(float *out) { out[threadIdx.x] = 1.0f; }
)cuda",
                                                                 options);
  ASSERT_TRUE(bool(result)) << toString(result.takeError());
  Expected<std::vector<jit::SassFunction>> functions =
      jit::disassembleCubin(result->cubin, *nvdisasm);
  ASSERT_TRUE(bool(functions)) << toString(functions.takeError());
  ASSERT_EQ(functions->size(), 2u);
  for (const jit::SassFunction &function : *functions) {
    SCOPED_TRACE(function.name);
    EXPECT_GT(function.countInstructions(), 0);
    std::optional<jit::SassLoop> loop = jit::findLargestLoop(function);
    if (function.name == "moss_one") {
      EXPECT_FALSE(loop);
      continue;
    }
    ASSERT_EQ(function.name, "moss_sum");
    ASSERT_TRUE(loop);
    EXPECT_LT(loop->begin, loop->end);
    EXPECT_GT(loop->instructions, 2);
    EXPECT_LT(loop->instructions, function.countInstructions());
  }
  // Bytes that are not a cubin fail with nvdisasm's message.
  Expected<std::vector<jit::SassFunction>> bad =
      jit::disassembleCubin("not a cubin", *nvdisasm);
  ASSERT_FALSE(bool(bad));
  consumeError(bad.takeError());
}

} // namespace
