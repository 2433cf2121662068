//===- KernelCacheTest.cpp - Kernel cache keys, files and races -----------===//
//
// The cache is exercised with a stub compiler (no NVRTC needed): it returns a
// PTX and a fake cubin derived from the source, and counts its calls, so
// every test can tell a hit from a rebuild.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Cache/KernelCache.h"

#include "moss/Runtime/Nvrtc/Templates.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace moss::runtime;
using namespace llvm;
namespace fs = llvm::sys::fs;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A fresh directory, deleted at the end of the test.
class TempDir {
public:
  TempDir() {
    std::error_code ec = fs::createUniqueDirectory("moss-cache-test", path);
    EXPECT_FALSE(ec) << ec.message();
    // Private whatever the umask: the cache loads only from such.
    EXPECT_FALSE(fs::setPermissions(path, fs::perms::owner_all));
  }
  ~TempDir() { fs::remove_directories(path); }
  std::string str() const { return std::string(path); }
  std::string sub(StringRef name) const {
    SmallString<256> p(path);
    sys::path::append(p, name);
    return std::string(p);
  }

private:
  SmallString<256> path;
};

/// Sets (or, with nullptr, unsets) an environment variable for a scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      saved = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved)
      ::setenv(name, saved->c_str(), 1);
    else
      ::unsetenv(name);
  }

private:
  const char *name;
  std::optional<std::string> saved;
};

std::string stubPtx(StringRef source, StringRef arch) {
  return ("// stub\n.target " + arch + "\n.entry " + source + "\n").str();
}

/// A fake cubin: "\x7fELF" and 2 KiB of bytes derived from the source.
std::string stubCubin(StringRef source) {
  std::string cubin = "\x7f"
                      "ELF";
  uint64_t state = hashBytes(source).low | 1;
  for (int i = 0; i < 2048; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    cubin += static_cast<char>(state >> 56);
  }
  return cubin;
}

/// A compiler that records its calls; `delay` widens race windows.
KernelCompiler makeStubCompiler(std::shared_ptr<std::atomic<int>> calls,
                                std::chrono::milliseconds delay = {}) {
  KernelCompiler compiler;
  compiler.version = "stub-1";
  compiler.compile =
      [calls, delay](StringRef source,
                     const CompileOptions &options) -> Expected<CompileResult> {
    ++*calls;
    if (delay.count())
      std::this_thread::sleep_for(delay);
    CompileResult result;
    result.ptx = stubPtx(source, options.arch);
    result.cubin = stubCubin(source);
    return result;
  };
  return compiler;
}

/// A compiler that always fails: anything returned came from a cache.
KernelCompiler makeFailingCompiler() {
  KernelCompiler compiler;
  compiler.version = "stub-1";
  compiler.compile = [](StringRef,
                        const CompileOptions &) -> Expected<CompileResult> {
    return createStringError(inconvertibleErrorCode(),
                             "the failing stub compiler was called");
  };
  return compiler;
}

CompileOptions sm90() {
  CompileOptions options;
  options.arch = "sm_90a";
  return options;
}

KernelCacheOptions cacheIn(const std::string &dir, KernelCompiler compiler,
                           size_t memoryCapacity = 16) {
  KernelCacheOptions options;
  options.directory = dir;
  options.compiler = std::move(compiler);
  options.memoryCapacity = memoryCapacity;
  return options;
}

std::string readAll(const std::string &path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      MemoryBuffer::getFile(path, false, false, true);
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

void writeAll(const std::string &path, StringRef bytes) {
  std::error_code ec;
  raw_fd_ostream os(path, ec);
  ASSERT_FALSE(ec) << ec.message();
  os << bytes;
}

void setModified(const std::string &path, std::chrono::seconds ago) {
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec = ::time(nullptr) - ago.count();
  times[0].tv_nsec = times[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

/// Every regular file under `root`, with its size.
std::vector<std::pair<std::string, uint64_t>> listFiles(StringRef root) {
  std::vector<std::pair<std::string, uint64_t>> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end;
       it.increment(ec)) {
    ErrorOr<fs::basic_file_status> status = it->status();
    if (status && status->type() == fs::file_type::regular_file)
      files.emplace_back(it->path(), status->getSize());
  }
  return files;
}

void expectStubEntry(const KernelEntry &entry, StringRef source) {
  EXPECT_EQ(entry.getPtx(), stubPtx(source, "sm_90a"));
  EXPECT_EQ(entry.getCubin(), stubCubin(source));
}

//===----------------------------------------------------------------------===//
// Keys
//===----------------------------------------------------------------------===//

TEST(KernelCacheKeyTest, SameInputsSameKeyAcrossDirectoriesAndCwd) {
  TempDir a, b;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cacheA(cacheIn(a.str(), makeStubCompiler(calls)));
  KernelCache cacheB(cacheIn(b.str(), makeStubCompiler(calls)));

  SmallString<256> cwd;
  ASSERT_FALSE(fs::current_path(cwd));
  ASSERT_FALSE(fs::set_current_path(a.str()));
  Expected<CacheKey> keyA = cacheA.getKey("kernel", sm90());
  ASSERT_FALSE(fs::set_current_path(b.str()));
  Expected<CacheKey> keyB = cacheB.getKey("kernel", sm90());
  ASSERT_FALSE(fs::set_current_path(cwd));
  ASSERT_TRUE(bool(keyA)) << toString(keyA.takeError());
  ASSERT_TRUE(bool(keyB)) << toString(keyB.takeError());
  EXPECT_EQ(*keyA, *keyB);
  // The path under each root is the same relative path.
  EXPECT_EQ(StringRef(cacheA.getEntryPath(*keyA)).drop_front(a.str().size()),
            StringRef(cacheB.getEntryPath(*keyB)).drop_front(b.str().size()));
}

TEST(KernelCacheKeyTest, CopiedCacheStillHits) {
  TempDir a, b;
  auto calls = std::make_shared<std::atomic<int>>(0);
  {
    KernelCache cache(cacheIn(a.str(), makeStubCompiler(calls)));
    ASSERT_TRUE(bool(cache.getOrCompile("kernel", sm90())));
  }
  ASSERT_EQ(*calls, 1);
  // Copy the whole tree somewhere else, as a user shipping a cache would.
  for (auto &[path, size] : listFiles(a.str())) {
    std::string target = b.str() + path.substr(a.str().size());
    ASSERT_FALSE(fs::create_directories(sys::path::parent_path(target),
                                        /*IgnoreExisting=*/true,
                                        fs::perms::owner_all));
    ASSERT_FALSE(fs::copy_file(path, target));
  }
  KernelCache copy(cacheIn(b.str(), makeFailingCompiler()));
  Expected<std::shared_ptr<const KernelEntry>> entry =
      copy.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
  expectStubEntry(**entry, "kernel");
  EXPECT_EQ(copy.stats().diskHits, 1u);
}

TEST(KernelCacheKeyTest, EveryInputChangesTheKey) {
  std::vector<std::string> flags = {"-arch=sm_90a", "-std=c++17"};
  std::vector<HeaderFile> headers = {{"h.cuh", "int x;"}};
  CacheKeyInputs base;
  base.source = "source";
  base.templateHash = 0x1234;
  base.compilerVersion = "nvrtc-13.0";
  base.arch = "sm_90a";
  base.flags = flags;
  base.headers = headers;
  base.programName = "k.cu";
  CacheKey baseKey = computeCacheKey(base);
  EXPECT_EQ(computeCacheKey(base), baseKey);

  std::vector<std::string> otherFlags = {"-arch=sm_90a", "-std=c++17", "-G"};
  std::vector<std::string> splitFlags = {"-arch=sm_90a", "-std=c++", "17"};
  std::vector<HeaderFile> otherHeaders = {{"h.cuh", "int y;"}};
  std::vector<HeaderFile> renamedHeaders = {{"g.cuh", "int x;"}};
  std::vector<std::pair<const char *, CacheKeyInputs>> variants;
  auto add = [&](const char *what, auto change) {
    CacheKeyInputs inputs = base;
    change(inputs);
    variants.emplace_back(what, inputs);
  };
  add("source", [](CacheKeyInputs &i) { i.source = "source "; });
  add("template hash", [](CacheKeyInputs &i) { i.templateHash = 0x1235; });
  add("compiler", [](CacheKeyInputs &i) { i.compilerVersion = "nvrtc-13.1"; });
  add("arch", [](CacheKeyInputs &i) { i.arch = "sm_100a"; });
  add("flags", [&](CacheKeyInputs &i) { i.flags = otherFlags; });
  add("flag split", [&](CacheKeyInputs &i) { i.flags = splitFlags; });
  add("header text", [&](CacheKeyInputs &i) { i.headers = otherHeaders; });
  add("header name", [&](CacheKeyInputs &i) { i.headers = renamedHeaders; });
  add("no headers", [](CacheKeyInputs &i) { i.headers = {}; });
  add("program", [](CacheKeyInputs &i) { i.programName = "j.cu"; });
  for (auto &[what, inputs] : variants)
    EXPECT_NE(computeCacheKey(inputs), baseKey) << what;
}

TEST(KernelCacheKeyTest, OptionsThatReachTheCompilerChangeTheKey) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCacheOptions options;
  options.useDisk = false;
  options.compiler = makeStubCompiler(calls);
  KernelCache cache(options);
  auto key = [&](StringRef source, const CompileOptions &o) {
    Expected<CacheKey> k = cache.getKey(source, o);
    EXPECT_TRUE(bool(k));
    return k ? *k : CacheKey();
  };
  CacheKey base = key("k", sm90());
  CompileOptions o = sm90();
  o.arch = "sm_100a";
  EXPECT_NE(key("k", o), base);
  o = sm90();
  o.flags.push_back("-lineinfo");
  EXPECT_NE(key("k", o), base);
  o = sm90();
  o.minimal = false;
  EXPECT_NE(key("k", o), base);
  o = sm90();
  o.includeTemplates = false;
  EXPECT_NE(key("k", o), base);
  EXPECT_NE(key("k2", sm90()), base);
  // The template hash enters the key: it is the embedded set's.
  CacheKeyInputs inputs;
  std::vector<std::string> flags = {"-arch=sm_90a", "-std=c++17", "-minimal"};
  inputs.source = "k";
  inputs.templateHash = getTemplateHash();
  inputs.compilerVersion = "stub-1";
  inputs.arch = "sm_90a";
  inputs.flags = flags;
  inputs.programName = "moss_kernel.cu";
  EXPECT_EQ(computeCacheKey(inputs), base);
  inputs.templateHash ^= 1;
  EXPECT_NE(computeCacheKey(inputs), base);
}

TEST(KernelCacheKeyTest, InvalidArchIsAnError) {
  KernelCacheOptions options;
  options.useDisk = false;
  options.compiler = makeFailingCompiler();
  KernelCache cache(options);
  CompileOptions o;
  o.arch = "hopper";
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile("k", o);
  ASSERT_FALSE(bool(entry));
  std::string message = toString(entry.takeError());
  EXPECT_NE(message.find("invalid NVRTC arch 'hopper'"), std::string::npos)
      << message;
}

//===----------------------------------------------------------------------===//
// Memory and disk
//===----------------------------------------------------------------------===//

TEST(KernelCacheTest, CompilesOnceThenHitsMemoryThenDisk) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  Expected<std::shared_ptr<const KernelEntry>> first =
      cache.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(first)) << toString(first.takeError());
  expectStubEntry(**first, "kernel");
  Expected<std::shared_ptr<const KernelEntry>> second =
      cache.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(second));
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(*calls, 1);
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.memoryHits, 1u);
  EXPECT_EQ(stats.memoryMisses, 1u);
  EXPECT_EQ(stats.diskMisses, 1u);
  EXPECT_EQ(stats.compiles, 1u);
  EXPECT_EQ(stats.diskEntries, 1u);
  EXPECT_EQ(stats.memoryEntries, 1u);
  EXPECT_TRUE(fs::exists(cache.getEntryPath((*first)->getKey())));

  KernelCache fresh(cacheIn(dir.str(), makeFailingCompiler()));
  Expected<std::shared_ptr<const KernelEntry>> third =
      fresh.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(third)) << toString(third.takeError());
  expectStubEntry(**third, "kernel");
  EXPECT_EQ(fresh.stats().diskHits, 1u);
}

/// find() answers from memory or disk and never compiles (the runtime's
/// tiered compile asks it whether the full kernel is there).
TEST(KernelCacheTest, FindNeverCompiles) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  Expected<std::shared_ptr<const KernelEntry>> missing =
      cache.find("kernel", sm90());
  ASSERT_TRUE(bool(missing)) << toString(missing.takeError());
  EXPECT_EQ(*missing, nullptr);
  EXPECT_EQ(*calls, 0);
  EXPECT_EQ(cache.stats().memoryEntries, 0u);

  Expected<std::shared_ptr<const KernelEntry>> built =
      cache.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(built)) << toString(built.takeError());
  Expected<std::shared_ptr<const KernelEntry>> inMemory =
      cache.find("kernel", sm90());
  ASSERT_TRUE(bool(inMemory)) << toString(inMemory.takeError());
  EXPECT_EQ(inMemory->get(), built->get());

  KernelCache fresh(cacheIn(dir.str(), makeFailingCompiler()));
  Expected<std::shared_ptr<const KernelEntry>> onDisk =
      fresh.find("kernel", sm90());
  ASSERT_TRUE(bool(onDisk)) << toString(onDisk.takeError());
  ASSERT_NE(*onDisk, nullptr);
  expectStubEntry(**onDisk, "kernel");
  EXPECT_EQ(fresh.stats().diskHits, 1u);
  Expected<std::shared_ptr<const KernelEntry>> other =
      fresh.find("another kernel", sm90());
  ASSERT_TRUE(bool(other)) << toString(other.takeError());
  EXPECT_EQ(*other, nullptr);
  EXPECT_EQ(*calls, 1);
}

TEST(KernelCacheTest, FileLayoutIsKeyHexWithFanOut) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(entry));
  std::string hex = (*entry)->getKey().toHex();
  std::string expected =
      dir.str() + "/kernels/" + hex.substr(0, 2) + "/" + hex + ".kernel";
  EXPECT_EQ(cache.getEntryPath((*entry)->getKey()), expected);
  std::string bytes = readAll(expected);
  ASSERT_EQ(bytes.size(), 64 + (*entry)->getSize());
  EXPECT_EQ(bytes.substr(0, 8), "MOSSKRNL");
  EXPECT_EQ(bytes.substr(64),
            (*entry)->getPtx().str() + (*entry)->getCubin().str());
  // Nothing else was left behind (no temporary files).
  EXPECT_EQ(listFiles(dir.str()).size(), 1u);
}

TEST(KernelCacheTest, MemoryLruKeepsTheRecentlyUsed) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCacheOptions options;
  options.useDisk = false;
  options.memoryCapacity = 2;
  options.compiler = makeStubCompiler(calls);
  KernelCache cache(options);
  for (const char *source : {"a", "b", "a", "c", "a", "b"})
    ASSERT_TRUE(bool(cache.getOrCompile(source, sm90())));
  // a, b compiled; a hit; c evicts b; a hit; b recompiled (evicting c).
  EXPECT_EQ(*calls, 4);
  EXPECT_EQ(cache.stats().memoryHits, 2u);
  EXPECT_EQ(cache.stats().memoryEntries, 2u);
}

TEST(KernelCacheTest, CompileErrorsPropagateAndAreNotCached) {
  TempDir dir;
  KernelCache cache(cacheIn(dir.str(), makeFailingCompiler()));
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile("kernel", sm90());
  ASSERT_FALSE(bool(entry));
  EXPECT_EQ(toString(entry.takeError()),
            "the failing stub compiler was called");
  EXPECT_TRUE(listFiles(dir.str()).empty());
  EXPECT_EQ(cache.stats().memoryEntries, 0u);
}

TEST(KernelCacheTest, ThreadsAskingForOneKeyCompileItOnce) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(
      dir.str(), makeStubCompiler(calls, std::chrono::milliseconds(100))));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      Expected<std::shared_ptr<const KernelEntry>> entry =
          cache.getOrCompile("kernel", sm90());
      if (entry && (*entry)->getCubin() == stubCubin("kernel"))
        ++ok;
      else if (!entry)
        consumeError(entry.takeError());
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(*calls, 1);
}

TEST(KernelCacheTest, DiskWriteFailureStillReturnsTheKernel) {
  TempDir dir;
  // A regular file where the cache directory should be.
  std::string blocker = dir.sub("not-a-directory");
  writeAll(blocker, "x");
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(blocker, makeStubCompiler(calls)));
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
  expectStubEntry(**entry, "kernel");
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.diskWriteFailures, 1u);
  EXPECT_NE(stats.lastDiskError.find("not-a-directory"), std::string::npos)
      << stats.lastDiskError;
}

//===----------------------------------------------------------------------===//
// Corruption: every damaged file is detected, deleted and rebuilt
//===----------------------------------------------------------------------===//

struct Damage {
  const char *name;
  std::function<std::string(const std::string &)> apply;
};

class KernelCacheCorruptionTest : public testing::TestWithParam<Damage> {};

TEST_P(KernelCacheCorruptionTest, IsDetectedDeletedAndRebuilt) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::string path;
  std::string good;
  {
    KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
    Expected<std::shared_ptr<const KernelEntry>> entry =
        cache.getOrCompile("kernel", sm90());
    ASSERT_TRUE(bool(entry));
    path = cache.getEntryPath((*entry)->getKey());
    good = readAll(path);
  }
  ASSERT_EQ(*calls, 1);
  std::string damaged = GetParam().apply(good);
  ASSERT_NE(damaged, good);
  writeAll(path, damaged);

  // A fresh process (fresh memory cache) must not load the damaged file.
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
  expectStubEntry(**entry, "kernel");
  EXPECT_EQ(*calls, 2) << "the damaged entry was not rebuilt";
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.corruptEntriesRemoved, 1u);
  EXPECT_EQ(stats.diskHits, 0u);
  EXPECT_NE(stats.lastDiskError.find("corrupt kernel cache file"),
            std::string::npos)
      << stats.lastDiskError;
  // The rebuilt file is whole again.
  EXPECT_EQ(readAll(path), good);
}

std::string flipByte(std::string bytes, size_t offset) {
  bytes[offset] ^= 0x20;
  return bytes;
}

INSTANTIATE_TEST_SUITE_P(
    Damages, KernelCacheCorruptionTest,
    testing::Values(
        Damage{"Empty", [](const std::string &) { return std::string(); }},
        Damage{"TruncatedHeader",
               [](const std::string &b) { return b.substr(0, 40); }},
        Damage{"TruncatedPayload",
               [](const std::string &b) { return b.substr(0, b.size() - 1); }},
        Damage{"TruncatedToHalf",
               [](const std::string &b) { return b.substr(0, b.size() / 2); }},
        Damage{"TrailingGarbage",
               [](const std::string &b) { return b + "garbage"; }},
        Damage{"FlippedPtxByte",
               [](const std::string &b) { return flipByte(b, 70); }},
        Damage{"FlippedCubinByte",
               [](const std::string &b) { return flipByte(b, b.size() - 5); }},
        Damage{"FlippedLength",
               [](const std::string &b) { return flipByte(b, 33); }},
        Damage{"FlippedChecksum",
               [](const std::string &b) { return flipByte(b, 50); }},
        Damage{"BadMagic", [](const std::string &b) { return flipByte(b, 0); }},
        Damage{"OtherVersion",
               [](const std::string &b) { return flipByte(b, 8); }},
        Damage{"OtherKey",
               [](const std::string &b) { return flipByte(b, 20); }},
        Damage{"GarbageHeader",
               [](const std::string &b) {
                 return std::string(64, '\xA5') + b.substr(64);
               }},
        Damage{
            "AllGarbage",
            [](const std::string &b) { return std::string(b.size(), 'Z'); }}),
    [](const testing::TestParamInfo<Damage> &info) {
      return std::string(info.param.name);
    });

TEST(KernelCacheTest, NewDirectoriesArePrivateAndEntriesOwnerWritable) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
  std::string file = cache.getEntryPath((*entry)->getKey());
  // Directories 0700; the file writable by its owner only.
  for (auto [path, others] :
       {std::pair{file, fs::group_write | fs::others_write},
        std::pair{std::string(sys::path::parent_path(file)),
                  fs::group_all | fs::others_all},
        std::pair{
            std::string(sys::path::parent_path(sys::path::parent_path(file))),
            fs::group_all | fs::others_all}}) {
    fs::file_status status;
    ASSERT_FALSE(fs::status(path, status));
    EXPECT_EQ(status.permissions() & others, 0) << path;
  }
}

TEST(KernelCacheTest, EntriesOthersCouldHaveWrittenAreCompiledInstead) {
  TempDir dir;
  ASSERT_FALSE(fs::setPermissions(dir.str(), fs::perms::owner_all));
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::string file;
  {
    KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
    Expected<std::shared_ptr<const KernelEntry>> entry =
        cache.getOrCompile("kernel", sm90());
    ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
    file = cache.getEntryPath((*entry)->getKey());
  }
  auto lookUp = [&](int wantCalls, uint64_t wantSkipped) {
    KernelCache fresh(cacheIn(dir.str(), makeStubCompiler(calls)));
    Expected<std::shared_ptr<const KernelEntry>> entry =
        fresh.getOrCompile("kernel", sm90());
    ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
    expectStubEntry(**entry, "kernel");
    EXPECT_EQ(*calls, wantCalls);
    EXPECT_EQ(fresh.stats().untrustedEntriesSkipped, wantSkipped);
  };
  // A world-writable root, a group-writable fan-out directory, a
  // group-writable file: each means compiling, not loading.
  ASSERT_FALSE(fs::setPermissions(dir.str(), fs::perms::all_all));
  lookUp(2, 1);
  ASSERT_FALSE(fs::setPermissions(dir.str(), fs::perms::owner_all));
  ASSERT_FALSE(fs::setPermissions(sys::path::parent_path(file),
                                  fs::perms::owner_all | fs::group_write));
  lookUp(3, 1);
  ASSERT_FALSE(
      fs::setPermissions(sys::path::parent_path(file), fs::perms::owner_all));
  ASSERT_FALSE(fs::setPermissions(file, fs::perms::owner_read |
                                            fs::owner_write |
                                            fs::group_write));
  lookUp(4, 1);
  // Private again: the entry (rewritten by the last compile) loads.
  ASSERT_FALSE(fs::setPermissions(file, fs::perms::owner_read |
                                            fs::owner_write));
  lookUp(4, 0);
  // Owned by another user (only root can arrange that).
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
    lookUp(5, 1);
  }
}

TEST(KernelCacheTest, FileOfAnotherKeyIsNotLoaded) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls), 0));
  Expected<std::shared_ptr<const KernelEntry>> a =
      cache.getOrCompile("a", sm90());
  Expected<std::shared_ptr<const KernelEntry>> b =
      cache.getOrCompile("b", sm90());
  ASSERT_TRUE(a && b);
  // A whole, valid file under the wrong name.
  std::string pathB = cache.getEntryPath((*b)->getKey());
  writeAll(pathB, readAll(cache.getEntryPath((*a)->getKey())));
  Expected<std::shared_ptr<const KernelEntry>> again =
      cache.getOrCompile("b", sm90());
  ASSERT_TRUE(bool(again));
  expectStubEntry(**again, "b");
  EXPECT_EQ(cache.stats().corruptEntriesRemoved, 1u);
  EXPECT_EQ(*calls, 3);
}

//===----------------------------------------------------------------------===//
// Environment, read at call time
//===----------------------------------------------------------------------===//

TEST(KernelCacheEnvTest, CacheDirIsReadAtEveryCall) {
  TempDir a, b;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCacheOptions options;
  options.compiler = makeStubCompiler(calls);
  options.memoryCapacity = 0;
  ScopedEnv env("MOSS_CACHE_DIR", a.str().c_str());
  KernelCache cache(options); // Created while the variable names `a`.
  ASSERT_TRUE(bool(cache.getOrCompile("one", sm90())));
  EXPECT_EQ(cache.getDirectory(), a.str());
  EXPECT_EQ(listFiles(a.str()).size(), 1u);

  ::setenv("MOSS_CACHE_DIR", b.str().c_str(), 1);
  EXPECT_EQ(cache.getDirectory(), b.str());
  ASSERT_TRUE(bool(cache.getOrCompile("two", sm90())));
  EXPECT_EQ(listFiles(a.str()).size(), 1u);
  EXPECT_EQ(listFiles(b.str()).size(), 1u);
  // "one" is not in b: compiled again there.
  ASSERT_TRUE(bool(cache.getOrCompile("one", sm90())));
  EXPECT_EQ(*calls, 3);
  EXPECT_EQ(listFiles(b.str()).size(), 2u);
}

TEST(KernelCacheEnvTest, PrebuiltDirectoriesAreReadFirstAndNeverWritten) {
  TempDir prebuilt, writable;
  auto calls = std::make_shared<std::atomic<int>>(0);
  {
    KernelCache builder(cacheIn(prebuilt.str(), makeStubCompiler(calls)));
    ASSERT_TRUE(bool(builder.getOrCompile("shipped", sm90())));
  }
  ASSERT_EQ(*calls, 1);
  std::string list = prebuilt.str() + "::" + writable.str();
  ScopedEnv env("MOSS_CACHE_DIR", list.c_str());
  KernelCacheOptions options;
  options.compiler = makeStubCompiler(calls);
  options.memoryCapacity = 0;
  KernelCache cache(options);
  EXPECT_EQ(cache.getDirectory(), writable.str());
  EXPECT_EQ(cache.getReadOnlyDirectories(),
            std::vector<std::string>{prebuilt.str()});

  // The shipped kernel comes from the prebuilt directory, not compiled, and
  // nothing is written anywhere.
  Expected<std::shared_ptr<const KernelEntry>> shipped =
      cache.getOrCompile("shipped", sm90());
  ASSERT_TRUE(bool(shipped)) << toString(shipped.takeError());
  expectStubEntry(**shipped, "shipped");
  EXPECT_EQ(*calls, 1);
  EXPECT_EQ(cache.stats().diskHits, 1u);
  EXPECT_EQ(listFiles(writable.str()).size(), 0u);

  // A new kernel is compiled into the writable directory only.
  ASSERT_TRUE(bool(cache.getOrCompile("new", sm90())));
  EXPECT_EQ(*calls, 2);
  EXPECT_EQ(listFiles(prebuilt.str()).size(), 1u);
  EXPECT_EQ(listFiles(writable.str()).size(), 1u);

  // A damaged prebuilt entry is left as it is and compiled instead; clear()
  // empties only the writable directory.
  std::string file = listFiles(prebuilt.str()).begin()->first;
  {
    std::error_code ec;
    raw_fd_ostream os(file, ec);
    ASSERT_FALSE(ec);
    os << "damaged";
  }
  KernelCache fresh(options);
  ASSERT_TRUE(bool(fresh.getOrCompile("shipped", sm90())));
  EXPECT_EQ(*calls, 3);
  EXPECT_TRUE(fs::exists(file));
  ASSERT_FALSE(fresh.clear());
  EXPECT_EQ(listFiles(writable.str()).size(), 0u);
  EXPECT_EQ(listFiles(prebuilt.str()).size(), 1u);
}

TEST(KernelCacheEnvTest, FallsBackToXdgThenHome) {
  TempDir xdg, home;
  KernelCacheOptions options;
  options.compiler = makeFailingCompiler();
  KernelCache cache(options);
  ScopedEnv noDir("MOSS_CACHE_DIR", nullptr);
  {
    ScopedEnv xdgEnv("XDG_CACHE_HOME", xdg.str().c_str());
    EXPECT_EQ(cache.getDirectory(), xdg.sub("moss"));
  }
  ScopedEnv noXdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv homeEnv("HOME", home.str().c_str());
  EXPECT_EQ(cache.getDirectory(), home.str() + "/.cache/moss");
}

TEST(KernelCacheEnvTest, OptionDirectoryWinsOverEnvironment) {
  TempDir a, b;
  ScopedEnv env("MOSS_CACHE_DIR", a.str().c_str());
  KernelCache cache(cacheIn(b.str(), makeFailingCompiler()));
  EXPECT_EQ(cache.getDirectory(), b.str());
}

TEST(KernelCacheEnvTest, MaxBytesIsReadAtEveryCall) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls), 0));
  {
    ScopedEnv env("MOSS_CACHE_MAX_BYTES", "3M");
    EXPECT_EQ(cache.stats().maxDiskBytes, std::optional<uint64_t>(3u << 20));
  }
  // A bad value does not stop compiles: it warns and means the default.
  for (const char *bad : {"lots", "abc", "-1", "1P", "0x100",
                          "18446744073709551616"}) {
    ScopedEnv env("MOSS_CACHE_MAX_BYTES", bad);
    Expected<std::shared_ptr<const KernelEntry>> entry =
        cache.getOrCompile(std::string("k") + bad, sm90());
    ASSERT_TRUE(bool(entry)) << bad << ": " << toString(entry.takeError());
    CacheStats stats = cache.stats();
    EXPECT_EQ(stats.maxDiskBytes, std::optional<uint64_t>(1u << 30)) << bad;
    EXPECT_NE(stats.lastDiskError.find("MOSS_CACHE_MAX_BYTES: '" +
                                       std::string(bad) + "'"),
              std::string::npos)
        << stats.lastDiskError;
    EXPECT_NE(stats.lastDiskError.find("using the default of 1 GiB"),
              std::string::npos);
  }
  ScopedEnv unset("MOSS_CACHE_MAX_BYTES", nullptr);
  EXPECT_EQ(cache.stats().maxDiskBytes, std::optional<uint64_t>(1u << 30));
}

TEST(KernelCacheEnvTest, ParsesByteCounts) {
  auto parse = [](StringRef text) -> int64_t {
    Expected<uint64_t> v = parseByteCount(text);
    if (!v) {
      consumeError(v.takeError());
      return -1;
    }
    return static_cast<int64_t>(*v);
  };
  EXPECT_EQ(parse("1073741824"), 1073741824);
  EXPECT_EQ(parse("512M"), 512 << 20);
  EXPECT_EQ(parse("1G"), 1 << 30);
  EXPECT_EQ(parse("2GiB"), int64_t(2) << 30);
  EXPECT_EQ(parse("64kb"), 64 << 10);
  EXPECT_EQ(parse("1T"), int64_t(1) << 40);
  EXPECT_EQ(parse(""), -1);
  EXPECT_EQ(parse("M"), -1);
  EXPECT_EQ(parse("12Q"), -1);
  EXPECT_EQ(parse("-5"), -1);
  EXPECT_EQ(parse("99999999999999999999T"), -1);
}

//===----------------------------------------------------------------------===//
// Size cap and eviction
//===----------------------------------------------------------------------===//

TEST(KernelCacheTest, EvictsLeastRecentlyUsedFilesOverTheCap) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  // Memory off, so every lookup reads (and touches) the file.
  KernelCacheOptions options = cacheIn(dir.str(), makeStubCompiler(calls), 0);
  KernelCacheOptions probeOptions = options;
  probeOptions.useDisk = false; // Learns an entry's size, writes nothing.
  KernelCache probe(probeOptions);
  Expected<std::shared_ptr<const KernelEntry>> first =
      probe.getOrCompile("kernel-0", sm90());
  ASSERT_TRUE(bool(first));
  uint64_t fileSize = 64 + (*first)->getSize();
  options.maxDiskBytes = fileSize * 3 + fileSize / 2; // room for 3 files
  KernelCache cache(options);

  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) {
    std::string source = "kernel-" + std::to_string(i);
    Expected<std::shared_ptr<const KernelEntry>> entry =
        cache.getOrCompile(source, sm90());
    ASSERT_TRUE(bool(entry));
    paths.push_back(cache.getEntryPath((*entry)->getKey()));
  }
  // Distinct ages, oldest first; then a hit makes kernel-0 the newest.
  for (int i = 0; i < 3; ++i)
    setModified(paths[i], std::chrono::seconds(1000 - 100 * i));
  ASSERT_TRUE(bool(cache.getOrCompile("kernel-0", sm90())));
  EXPECT_EQ(cache.stats().diskHits, 1u);

  Expected<std::shared_ptr<const KernelEntry>> fourth =
      cache.getOrCompile("kernel-3", sm90());
  ASSERT_TRUE(bool(fourth));
  paths.push_back(cache.getEntryPath((*fourth)->getKey()));
  EXPECT_TRUE(fs::exists(paths[0])) << "the recently used entry was evicted";
  EXPECT_FALSE(fs::exists(paths[1])) << "the oldest entry was kept";
  EXPECT_TRUE(fs::exists(paths[2]));
  EXPECT_TRUE(fs::exists(paths[3])) << "the entry just written was evicted";
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.filesEvicted, 1u);
  EXPECT_EQ(stats.diskEntries, 3u);
  EXPECT_LE(stats.diskBytes, *options.maxDiskBytes);
}

TEST(KernelCacheTest, StaleTemporaryFilesAreRemoved) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile("kernel", sm90());
  ASSERT_TRUE(bool(entry));
  std::string path = cache.getEntryPath((*entry)->getKey());
  std::string stale = path + ".tmp-abc123";
  std::string fresh = path + ".tmp-def456";
  writeAll(stale, "half a fi");
  writeAll(fresh, "half a fi");
  setModified(stale, std::chrono::seconds(2 * 3600));
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.diskEntries, 1u);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh)) << "a live writer's file was deleted";
}

//===----------------------------------------------------------------------===//
// clear() and stats
//===----------------------------------------------------------------------===//

TEST(KernelCacheTest, ClearRemovesOnlyCacheFiles) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  for (const char *source : {"a", "b", "c"})
    ASSERT_TRUE(bool(cache.getOrCompile(source, sm90())));
  // Files that are not ours, even inside kernels/, survive.
  writeAll(dir.sub("notes.txt"), "mine");
  ASSERT_FALSE(fs::create_directories(dir.sub("kernels/zz")));
  writeAll(dir.sub("kernels/zz/keep.kernel"), "mine");
  Expected<std::shared_ptr<const KernelEntry>> a =
      cache.getOrCompile("a", sm90());
  ASSERT_TRUE(bool(a));
  std::string foreign =
      sys::path::parent_path(cache.getEntryPath((*a)->getKey())).str() +
      "/README";
  writeAll(foreign, "mine");

  ASSERT_FALSE(bool(cache.clear()));
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.diskEntries, 0u);
  EXPECT_EQ(stats.memoryEntries, 0u);
  EXPECT_TRUE(fs::exists(dir.sub("notes.txt")));
  EXPECT_TRUE(fs::exists(dir.sub("kernels/zz/keep.kernel")));
  EXPECT_TRUE(fs::exists(foreign));
  EXPECT_EQ(listFiles(dir.str()).size(), 3u);
  ASSERT_TRUE(bool(cache.getOrCompile("a", sm90())));
  EXPECT_EQ(*calls, 4);
}

TEST(KernelCacheTest, FormatStatsNamesDirectoryAndCounters) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  ASSERT_TRUE(bool(cache.getOrCompile("a", sm90())));
  ASSERT_TRUE(bool(cache.getOrCompile("a", sm90())));
  std::string text;
  raw_string_ostream os(text);
  cache.formatStats(os);
  os.flush();
  EXPECT_NE(text.find(dir.str()), std::string::npos) << text;
  EXPECT_NE(text.find("entries:    1 ("), std::string::npos) << text;
  EXPECT_NE(text.find("1 memory hits, 1 misses; 0 disk hits, 1 misses; 1 "
                      "compiles"),
            std::string::npos)
      << text;
}

//===----------------------------------------------------------------------===//
// Several processes filling one directory at once
//===----------------------------------------------------------------------===//

/// The child's side of the race: returns a nonzero exit code on any failure.
int raceChild(const std::string &dir, int keys, int rounds,
              std::optional<uint64_t> cap, int readFd) {
  char go;
  if (::read(readFd, &go, 1) < 0) // Wait for the start signal.
    return 10;
  auto calls = std::make_shared<std::atomic<int>>(0);
  KernelCacheOptions options =
      cacheIn(dir, makeStubCompiler(calls, std::chrono::milliseconds(1)), 0);
  options.maxDiskBytes = cap;
  KernelCache cache(options);
  std::mt19937 rng(::getpid());
  std::vector<int> order;
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < keys; ++k)
      order.push_back(k);
  std::shuffle(order.begin(), order.end(), rng);
  for (int k : order) {
    std::string source = "kernel-" + std::to_string(k);
    Expected<std::shared_ptr<const KernelEntry>> entry =
        cache.getOrCompile(source, sm90());
    if (!entry) {
      consumeError(entry.takeError());
      return 1;
    }
    if ((*entry)->getPtx() != stubPtx(source, "sm_90a") ||
        (*entry)->getCubin() != stubCubin(source))
      return 2;
  }
  CacheStats stats = cache.stats();
  if (stats.corruptEntriesRemoved != 0)
    return 3; // Saw a torn or foreign file.
  if (stats.diskWriteFailures != 0)
    return 4;
  return 0;
}

/// Forks `processes` children running raceChild at once; expects all to
/// succeed.
void runRace(const std::string &dir, int processes, int keys, int rounds,
             std::optional<uint64_t> cap) {
  int pipeFds[2];
  ASSERT_EQ(::pipe(pipeFds), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < processes; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(pipeFds[1]);
      ::_exit(raceChild(dir, keys, rounds, cap, pipeFds[0]));
    }
    children.push_back(pid);
  }
  ::close(pipeFds[0]);
  ::close(pipeFds[1]); // EOF releases every child at once.
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << "child " << pid << " crashed";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid << " failed";
  }
}

TEST(KernelCacheRaceTest, ProcessesFillOneDirectoryConcurrently) {
  TempDir dir;
  constexpr int kKeys = 24;
  runRace(dir.str(), /*processes=*/8, kKeys, /*rounds=*/3, std::nullopt);

  // Every file verifies: a cache that cannot compile serves all keys.
  KernelCache verify(cacheIn(dir.str(), makeFailingCompiler(), 0));
  for (int k = 0; k < kKeys; ++k) {
    std::string source = "kernel-" + std::to_string(k);
    Expected<std::shared_ptr<const KernelEntry>> entry =
        verify.getOrCompile(source, sm90());
    ASSERT_TRUE(bool(entry)) << source << ": " << toString(entry.takeError());
    expectStubEntry(**entry, source);
  }
  CacheStats stats = verify.stats();
  EXPECT_EQ(stats.diskHits, uint64_t(kKeys));
  EXPECT_EQ(stats.corruptEntriesRemoved, 0u);
  EXPECT_EQ(stats.diskEntries, uint64_t(kKeys));
  // No temporary file survived.
  EXPECT_EQ(listFiles(dir.str()).size(), size_t(kKeys));
}

TEST(KernelCacheRaceTest, ProcessesRaceWithEvictionUnderATinyCap) {
  TempDir dir;
  uint64_t fileSize = 64 + stubPtx("kernel-00", "sm_90a").size() +
                      stubCubin("kernel-00").size();
  uint64_t cap = fileSize * 4;
  runRace(dir.str(), /*processes=*/6, /*keys=*/16, /*rounds=*/2, cap);

  KernelCache verify(cacheIn(dir.str(), makeFailingCompiler(), 0));
  CacheStats stats = verify.stats();
  // The last eviction pass saw every file renamed before it started.
  EXPECT_LE(stats.diskBytes, cap) << "the cap was not enforced";
  EXPECT_GE(stats.diskEntries, 1u);
  // Whatever survived verifies.
  for (int k = 0; k < 16; ++k) {
    std::string source = "kernel-" + std::to_string(k);
    Expected<CacheKey> key = verify.getKey(source, sm90());
    ASSERT_TRUE(bool(key));
    if (!fs::exists(verify.getEntryPath(*key)))
      continue;
    Expected<std::shared_ptr<const KernelEntry>> entry =
        verify.getOrCompile(source, sm90());
    ASSERT_TRUE(bool(entry)) << source << ": " << toString(entry.takeError());
  }
  EXPECT_EQ(verify.stats().corruptEntriesRemoved, 0u);
}

} // namespace

// What sits at an entry's name that is not a regular file (a FIFO would
// block a read, a link to /dev/zero would never end it, a directory never
// reads) is removed and the kernel rebuilt; clear() removes such items too,
// never what a link points to.
TEST(KernelCacheDiskTest, SpecialFilesAtAnEntryAreRemovedAndRebuilt) {
  TempDir dir;
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::string outside = dir.str() + "/outside.bin";
  writeAll(outside, "not a cache file");
  for (const char *kind : {"fifo", "symlink", "directory"}) {
    SCOPED_TRACE(kind);
    KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
    std::string source = std::string("kernel-") + kind;
    Expected<CacheKey> key = cache.getKey(source, sm90());
    ASSERT_TRUE(bool(key)) << toString(key.takeError());
    std::string path = cache.getEntryPath(*key);
    ASSERT_FALSE(sys::fs::create_directories(sys::path::parent_path(path)));
    std::string kindName = kind;
    if (kindName == "fifo")
      ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    else if (kindName == "symlink")
      ASSERT_FALSE(sys::fs::create_link("/dev/zero", path));
    else
      ASSERT_FALSE(sys::fs::create_directories(path + "/inside"));
    int before = *calls;
    Expected<std::shared_ptr<const KernelEntry>> entry =
        cache.getOrCompile(source, sm90());
    ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
    EXPECT_EQ(*calls, before + 1);
    CacheStats stats = cache.stats();
    EXPECT_EQ(stats.corruptEntriesRemoved, 1u);
    EXPECT_NE(stats.lastDiskError.find("not a regular cache file"),
              std::string::npos)
        << stats.lastDiskError;
    // The rebuilt entry is a regular file again, and a fresh cache hits it.
    sys::fs::file_status status;
    ASSERT_FALSE(sys::fs::status(path, status, /*follow=*/false));
    EXPECT_EQ(status.type(), sys::fs::file_type::regular_file);
    KernelCache again(cacheIn(dir.str(), makeStubCompiler(calls)));
    ASSERT_TRUE(bool(again.getOrCompile(source, sm90())));
    EXPECT_EQ(*calls, before + 1);
  }
  // clear() removes a planted link, not its target.
  KernelCache cache(cacheIn(dir.str(), makeStubCompiler(calls)));
  Expected<CacheKey> key = cache.getKey("planted", sm90());
  ASSERT_TRUE(bool(key));
  std::string planted = cache.getEntryPath(*key);
  ASSERT_FALSE(sys::fs::create_directories(sys::path::parent_path(planted)));
  ASSERT_FALSE(sys::fs::create_link(outside, planted));
  ASSERT_FALSE(bool(cache.clear()));
  EXPECT_FALSE(sys::fs::exists(planted));
  sys::fs::file_status status;
  EXPECT_TRUE(bool(sys::fs::status(planted, status, /*follow=*/false)))
      << "the link is gone";
  EXPECT_EQ(readAll(outside), "not a cache file");
}
