//===- TuneRecordsTest.cpp - moss-tune's candidate CSV --------------------===//
//
// What a sweep writes is what a resumed sweep reads back: every tiling
// field (split_k included), status, times and roles; and a CSV written
// before split_k was a column still reads, as split_k 1.
//
//===----------------------------------------------------------------------===//

#include "../../tools/moss-tune/Records.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <random>

using namespace moss;
using namespace moss::tune;

namespace {

/// A temporary file path, removed at the end of the test.
struct TempPath {
  llvm::SmallString<128> path;
  TempPath() {
    int fd = -1;
    EXPECT_FALSE(
        llvm::sys::fs::createTemporaryFile("tune-records", "csv", fd, path));
    llvm::sys::Process::SafelyCloseFileDescriptor(fd);
  }
  ~TempPath() { llvm::sys::fs::remove(path); }
};

CandidateRecord randomRecord(std::mt19937 &rng) {
  auto pick = [&](std::initializer_list<int64_t> values) {
    return *(values.begin() + rng() % values.size());
  };
  CandidateRecord r;
  r.shape = "sm_90a/132 SMs: ?x4096x11008 M=" + std::to_string(rng() % 64);
  r.label = "llama7b ffn-down, \"quoted\"";
  r.arch = "sm_90a";
  r.smCount = 132;
  r.a = "e4m3:twolevel(row,32)";
  r.b = "e4m3:tensor";
  r.out = "bf16";
  r.m = int64_t(rng() % 128) + 1;
  r.n = 4096;
  r.k = 11008;
  r.tiling.tileM = pick({64, 128, 256});
  r.tiling.tileN = pick({32, 64, 96, 128});
  r.tiling.stages = pick({2, 5, 8});
  r.tiling.clusterM = pick({1, 2});
  r.tiling.raster =
      rng() % 2 ? compiler::RasterOrder::AlongN : compiler::RasterOrder::AlongM;
  r.tiling.swizzle = pick({1, 2, 4, 8});
  r.tiling.splitK = pick({1, 2, 4, 8});
  r.milliseconds = double(rng() % 100000) / 1e6;
  r.tflops = double(rng() % 100000) / 100;
  r.roles = rng() % 2 ? "best heuristic" : "";
  return r;
}

TEST(TuneRecordsTest, WhatIsWrittenReadsBack) {
  std::mt19937 rng(std::random_device{}());
  std::vector<CandidateRecord> written;
  for (int i = 0; i < 20; ++i)
    written.push_back(randomRecord(rng));
  TempPath file;
  ASSERT_FALSE(bool(writeCsv(file.path, written)));
  llvm::Expected<std::vector<CandidateRecord>> read = readCsv(file.path);
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  ASSERT_EQ(read->size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    const CandidateRecord &w = written[i], &r = (*read)[i];
    EXPECT_EQ(r.shape, w.shape);
    EXPECT_EQ(r.label, w.label);
    EXPECT_EQ(r.m, w.m);
    EXPECT_EQ(r.tiling.tileM, w.tiling.tileM);
    EXPECT_EQ(r.tiling.tileN, w.tiling.tileN);
    EXPECT_EQ(r.tiling.stages, w.tiling.stages);
    EXPECT_EQ(r.tiling.clusterM, w.tiling.clusterM);
    EXPECT_EQ(r.tiling.raster, w.tiling.raster);
    EXPECT_EQ(r.tiling.swizzle, w.tiling.swizzle);
    EXPECT_EQ(r.tiling.splitK, w.tiling.splitK);
    EXPECT_NEAR(r.milliseconds, w.milliseconds, 1e-6);
    EXPECT_NEAR(r.tflops, w.tflops, 0.01);
    EXPECT_EQ(r.roles, w.roles);
  }
}

TEST(TuneRecordsTest, OlderFilesWithoutSplitKRead) {
  TempPath file;
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(file.path, ec);
    ASSERT_FALSE(ec);
    os << "shape,label,arch,sm_count,a,b,out,m,n,k,kind,tile_m,tile_n,stages,"
          "cluster_m,cluster_n,raster,swizzle,status,ms,tflops,role,note\n"
       << "s,l,sm_90a,132,a,b,bf16,16,4096,4096,moss,128,32,8,1,1,along_m,1,"
          "ok,0.011000,195.23,best,\n";
  }
  llvm::Expected<std::vector<CandidateRecord>> read = readCsv(file.path);
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0].tiling.tileN, 32);
  EXPECT_EQ((*read)[0].tiling.splitK, 1);
  EXPECT_EQ((*read)[0].status, "ok");
  EXPECT_EQ((*read)[0].roles, "best");
}

TEST(TuneRecordsTest, AShortLineIsAnError) {
  TempPath file;
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(file.path, ec);
    ASSERT_FALSE(ec);
    os << "shape,label\nonly,two\n";
  }
  llvm::Expected<std::vector<CandidateRecord>> read = readCsv(file.path);
  ASSERT_FALSE(bool(read));
  EXPECT_NE(llvm::toString(read.takeError()).find("fields"), std::string::npos);
}

} // namespace
