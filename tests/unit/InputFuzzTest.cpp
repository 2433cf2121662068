//===- InputFuzzTest.cpp - Mutated untrusted input never crashes ----------===//
//
// Seeded mutation fuzzing of what reads untrusted input: the .npy reader,
// the tuning database and the moss IR parser with the GEMM pipeline behind
// it. Each mutant must give a value or an error that says something; a
// crash, a hang or a silent empty error fails the test. The seeds are fixed,
// so a failure reproduces; set MOSS_FUZZ_ITERATIONS to run longer.
//
//===----------------------------------------------------------------------===//

#include "GemmSpecs.h"

#include "moss/Compiler/TuningDatabase.h"
#include "moss/InitAll.h"
#include "moss/Support/Npy.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

int iterations(int fallback) {
  const char *env = std::getenv("MOSS_FUZZ_ITERATIONS");
  return env ? std::max(1, std::atoi(env)) : fallback;
}

/// One to four random edits of `seed`: byte flips, inserted bytes, numbers
/// at their extremes, deleted, duplicated or truncated ranges.
std::string mutate(const std::string &seed, std::mt19937 &rng) {
  static const char *const kTokens[] = {
      "0", "-1", "4294967296", "9223372036854775807", "1e308", "nan",
      "-0", "[", "]", "{", "}", ",", "\"", ":", "<", ">", "?", "x",
      "99999999999999999999999", "\n", "\\u0000", "%", "#moss."};
  std::string s = seed;
  int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    size_t at = rng() % s.size();
    switch (rng() % 6) {
    case 0:
      s[at] = char(rng() & 0xFF);
      break;
    case 1:
      s.insert(at, 1, char(rng() & 0xFF));
      break;
    case 2:
      s.insert(at, kTokens[rng() % (sizeof(kTokens) / sizeof(*kTokens))]);
      break;
    case 3:
      s.erase(at, 1 + rng() % 16);
      break;
    case 4:
      s.insert(at, s.substr(at, 1 + rng() % 32));
      break;
    case 5:
      s.resize(at);
      break;
    }
  }
  return s;
}

/// `seed` with one to three of its numbers replaced by edge values: what
/// reaches the shape, block and tiling checks instead of the lexer.
std::string mutateNumbers(const std::string &seed, std::mt19937 &rng) {
  static const char *const kValues[] = {
      "0", "1", "2", "3", "7", "16", "31", "32", "33", "64", "96", "127",
      "128", "129", "192", "255", "256", "4095", "65536", "2147483647",
      "2147483648", "4294967297", "9223372036854775807", "99999999999999999999"};
  std::vector<std::pair<size_t, size_t>> numbers;
  for (size_t i = 0; i < seed.size();) {
    if (std::isdigit(static_cast<unsigned char>(seed[i]))) {
      size_t j = i;
      while (j < seed.size() && std::isdigit(static_cast<unsigned char>(seed[j])))
        ++j;
      numbers.push_back({i, j - i});
      i = j;
    } else {
      ++i;
    }
  }
  std::string s = seed;
  int edits = 1 + int(rng() % 3);
  // Right to left, so that earlier offsets stay valid.
  std::vector<size_t> picks;
  for (int e = 0; e < edits; ++e)
    picks.push_back(rng() % numbers.size());
  std::sort(picks.rbegin(), picks.rend());
  picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
  for (size_t p : picks)
    s.replace(numbers[p].first, numbers[p].second,
              kValues[rng() % (sizeof(kValues) / sizeof(*kValues))]);
  return s;
}

TEST(InputFuzzTest, NpyReaderGivesAMatrixOrAnError) {
  std::vector<float> values(15);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = float(i) * 0.25f - 1.0f;
  std::vector<char> bytes = moss::serializeNpy({3, 5}, values);
  const std::string seed(bytes.begin(), bytes.end());
  std::mt19937 rng(20261202);
  int parsed = 0;
  for (int i = 0, n = iterations(4000); i < n; ++i) {
    std::string input = mutate(seed, rng);
    llvm::Expected<moss::NpyMatrix> m = moss::parseNpyMatrix(input);
    if (m) {
      ++parsed;
      EXPECT_EQ(size_t(m->rows * m->cols), m->data.size()) << "mutant " << i;
    } else {
      EXPECT_FALSE(llvm::toString(m.takeError()).empty()) << "mutant " << i;
    }
  }
  // The mutations keep some inputs valid: the readers are exercised on both
  // sides.
  EXPECT_GT(parsed, 0);
  std::printf("%d of %d mutated .npy files parsed\n", parsed, iterations(4000));
}

TEST(InputFuzzTest, TuningDatabaseGivesEntriesOrAnError) {
  const std::string seed = R"json({
  "format": "moss-tuning-db",
  "version": 1,
  "entries": [
    {
      "arch": "sm_90a", "sm_count": 132,
      "a": "e4m3 two-level(row, 32)", "b": "e4m3 per-tensor", "out": "bf16",
      "n": 11008, "k": 4096, "m_bucket": 4096, "m": 4096,
      "best": {
        "tiling": {"tile_m": 256, "tile_n": 64, "stages": 5, "cluster_m": 2,
                   "cluster_n": 1, "raster": "along_n", "swizzle": 4,
                   "split_k": 1},
        "ms": 0.9, "tflops": 410.5
      },
      "candidates_timed": 30, "device": "NVIDIA H200",
      "date": "2026-12-01T10:00:00Z"
    }
  ]
})json";
  {
    llvm::Expected<moss::compiler::TuningDatabase> db =
        moss::compiler::TuningDatabase::parse(seed, "seed");
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
  }
  std::mt19937 rng(20261203);
  int parsed = 0;
  for (int i = 0, n = iterations(4000); i < n; ++i) {
    std::string input = i % 2 ? mutateNumbers(seed, rng) : mutate(seed, rng);
    llvm::Expected<moss::compiler::TuningDatabase> db =
        moss::compiler::TuningDatabase::parse(input, "mutant.json");
    if (db) {
      // A parsed entry still goes through the tiling checks on lookup.
      ++parsed;
      (void)db->lookup(moss::compiler::test::mossForward(),
                       moss::compiler::TargetInfo(), 4096, nullptr);
    } else {
      EXPECT_FALSE(llvm::toString(db.takeError()).empty()) << "mutant " << i;
    }
  }
  EXPECT_GT(parsed, 0);
  std::printf("%d of %d mutated databases parsed\n", parsed, iterations(4000));
}

TEST(InputFuzzTest, IrParserAndPipelineGiveKernelsOrDiagnostics) {
  const std::string seed = R"mlir(
func.func @forward(%a: tensor<?x4096xf8E4M3FN>, %al: tensor<?x128xf8E8M0FNU>,
                   %ag: tensor<?xf32>, %b: tensor<11008x4096xf8E4M3FN>,
                   %bg: tensor<1xf32>, %bias: tensor<11008xf32>) -> tensor<?x11008xbf16> {
  %c = moss.gemm %a scaling<two_level 32, global = row> local(%al) global(%ag),
                 %b scaling<per_tensor> global(%bg) bias(%bias)
      {tiling = #moss.tiling<tile_m = 128, tile_n = 128, stages = 6, source = heuristic>}
      : (tensor<?x4096xf8E4M3FN>, tensor<?x128xf8E8M0FNU>, tensor<?xf32>,
         tensor<11008x4096xf8E4M3FN>, tensor<1xf32>, tensor<11008xf32>) -> tensor<?x11008xbf16>
  return %c : tensor<?x11008xbf16>
}
)mlir";
  mlir::DialectRegistry registry;
  mlir::moss::registerAllDialects(registry);
  mlir::moss::registerAllPasses();
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  int diagnostics = 0;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    EXPECT_FALSE(d.str().empty());
    ++diagnostics;
    return mlir::success();
  });
  std::mt19937 rng(20261204);
  int verified = 0, lowered = 0;
  for (int i = 0, n = iterations(1500); i < n; ++i) {
    std::string input = i == 0       ? seed
                        : i % 2 == 1 ? mutateNumbers(seed, rng)
                                     : mutate(seed, rng);
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(input, &context);
    if (!module || mlir::failed(mlir::verify(*module)))
      continue;
    ++verified;
    mlir::PassManager pm(&context);
    std::string errors;
    llvm::raw_string_ostream os(errors);
    ASSERT_TRUE(
        mlir::succeeded(mlir::parsePassPipeline("moss-gemm-pipeline", pm, os)))
        << errors;
    if (mlir::succeeded(pm.run(*module)))
      ++lowered;
  }
  EXPECT_GT(lowered, 0); // the seed lowers
  EXPECT_GT(diagnostics, 0);
  std::printf("%d of %d mutated programs verified, %d lowered\n", verified,
              iterations(1500), lowered);
}

} // namespace
