//===- IssueOverlapBench.cpp - FFMA issue next to running FP8 wgmma -------===//
//
// How far CUDA-core FFMAs overlap with the tensor cores on one SM: the
// question behind MOSS two-level's speed (docs/GEMM-KERNEL.md). Its exact
// promotion issues one FFMA per accumulator per 32 of K, as many warp
// instructions per SM sub-partition as the tensor core needs cycles for the
// same work at its peak (1024 FP8 MACs per cycle), so it runs near cuBLASLt
// only if both go on at once.
//
//   moss-bench-overlap [--chunks N]
//
// One CTA per SM, each warpgroup with one role, all starting together:
//   W   m64nNk32 wgmmas from shared memory, one per commit group, at most
//       two in flight (the MOSS main loop without its FFMAs)
//   W4  the same in commit groups of four (the per-tensor main loop)
//   F   FFMAs only: acc += s * part, N/2 per thread per block
//   M   the MOSS main loop: issue block b+1, wait for block b, promote it
//   MA  the same with acc += part (FADD: a factor of 1, one operand less)
//   ML  the MOSS loop with the GEMM's factors: two per block (the thread's
//       two rows), each loaded from a shared table right before the wait
//   MP  the same factors as packed bf16 powers of two, one 16-byte load per
//       row per 8 blocks, each factor unpacked by one integer instruction
//   MI  the MOSS loop plus 16 integer instructions per block
//   M2  the MOSS loop with two factors (one per row) in registers
// Each warpgroup runs 16 blocks (one wgmma or one promotion each) per chunk.
// Per configuration it prints the cycles (clock64, median over the CTAs) and
// what they imply per sub-partition: the tensor pipe's busy share at 1024
// MACs per cycle, and the share of issue slots taken by FFMAs (or FADDs).
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/Module.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

using namespace moss::runtime;
using namespace llvm;

namespace {

// The kernels. Roles are template arguments, so each configuration gets the
// registers its own roles need.
const char *const kSource = R"cuda(
#include "moss/ptx/sync.cuh"
#include "moss/ptx/wgmma.cuh"
using namespace moss::ptx;

// The roles (enum Role: kIdle, kWgmma, ...) come ahead of this source, from
// the host's table.
constexpr int kBlocks = 16;
// Factor tables follow the tiles: f32 [block / 4][64 rows][4] (the GEMM's
// layout, 4 KiB), then bf16 [64 rows][16 blocks] (2 KiB).

template <int N> struct Registers {
  float part[2][N / 2];
  float acc[N / 2];
};

// The first step's scale-d is `first` (0: overwrite d), the others 1.
template <int N>
__device__ __forceinline__ void issue(float (&d)[N / 2], u64 descA, u64 descB,
                                      int block, int steps, u32 first) {
  wgmmaFence();
#pragma unroll
  for (int s = 0; s < steps; ++s) {
    // 32 bytes of K per step (2 descriptor units); the tiles hold 128.
    const u64 k = 2 * ((block * steps + s) & 3);
    WgmmaFp8<N>::template mma<kFp8E4M3, kFp8E4M3>(d, descA + k, descB + k,
                                                  s == 0 ? first : 1u);
  }
  wgmmaCommit();
}

template <int N>
__device__ __forceinline__ void fence(float (&d)[N / 2]) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    fenceOperand(d[i]);
}

template <int N>
__device__ __forceinline__ void promote(Registers<N> &r, int set, float s) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    r.acc[i] = __fmaf_rn(r.part[set][i], s, r.acc[i]);
}

template <int N>
__device__ __forceinline__ void promoteRows(Registers<N> &r, int set,
                                            float f0, float f1) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    r.acc[i] = __fmaf_rn(r.part[set][i], (i >> 1) & 1 ? f1 : f0, r.acc[i]);
}

template <int N>
__device__ __forceinline__ void promoteAdd(Registers<N> &r, int set) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    r.acc[i] += r.part[set][i];
}

/// Runs role kRole; returns a sum of its registers (to keep them live).
template <int N, int kRole>
__device__ float run(u64 descA, u64 descB, int chunks, float s, u32 zero,
                     const float *table, const uint4 *packed) {
  // This thread's two accumulator rows, as in the GEMM.
  const int row = (threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4;
  u32 extra = threadIdx.x;
  // Each role its own registers, so a configuration's count is its
  // largest role's.
  Registers<N> r;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    r.acc[i] = 0.0f;
    r.part[0][i] = s * (i + threadIdx.x);
    r.part[1][i] = s * (i - threadIdx.x);
  }
  // Scale-d of a block's first step. The MOSS loop, like the GEMM, uses a
  // constant 0 (the wgmma does not read d). Its results unread, the wgmma
  // role's would be dropped by ptxas at a constant 0, and reading one of
  // them makes ptxas serialize the wgmmas; so that role overwrites d with a
  // scale-d it cannot see (`zero`, 0 at run time), as do the groups of four.
  const u32 first = kRole == kWgmma ? zero : 0u;
  if constexpr (kRole == kWgmma || kRole == kMoss || kRole == kMossAdd ||
                kRole == kMossLoaded || kRole == kMossPacked ||
                kRole == kMossExtra || kRole == kMossTwo) {
#pragma unroll 1
    for (int c = 0; c < chunks; ++c) {
      issue<N>(r.part[0], descA, descB, 0, 1, first);
      uint4 codes[2];
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        if (b + 1 < kBlocks)
          issue<N>(r.part[(b + 1) & 1], descA, descB, b + 1, 1, first);
        // Two registers even for M2 (`zero` is 0 at run time).
        float f[2] = {s, s + zero};
        if constexpr (kRole == kMossLoaded) {
          const float *t = table + (b / 4) * 256 + row * 4 + b % 4;
          f[0] = t[0];
          f[1] = t[32];
        } else if constexpr (kRole == kMossPacked) {
          if (b % 8 == 0) {
            codes[0] = packed[row * 2 + b / 8];
            codes[1] = packed[(row + 8) * 2 + b / 8];
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const u32 word = (&codes[h].x)[(b % 8) / 2];
            f[h] = __uint_as_float(b % 2 ? word & 0xffff0000u : word << 16);
          }
        } else if constexpr (kRole == kMossExtra) {
#pragma unroll
          for (int i = 0; i < 16; ++i)
            asm volatile("add.u32 %0, %0, %1;" : "+r"(extra) : "r"(b));
        }
        if (b + 1 < kBlocks)
          wgmmaWait<1>();
        else
          wgmmaWait<0>();
        fence<N>(r.part[b & 1]);
        if constexpr (kRole == kMossAdd)
          promoteAdd<N>(r, b & 1);
        else if constexpr (kRole == kMossLoaded || kRole == kMossPacked ||
                           kRole == kMossTwo)
          promoteRows<N>(r, b & 1, f[0], f[1]);
        else if constexpr (kRole != kWgmma)
          promote<N>(r, b & 1, s);
      }
    }
  } else if constexpr (kRole == kWgmma4) {
#pragma unroll 1
    for (int c = 0; c < chunks; ++c) {
      issue<N>(r.part[0], descA, descB, 0, 4, first);
#pragma unroll
      for (int b = 0; b < kBlocks / 4; ++b) {
        if (b + 1 < kBlocks / 4) {
          issue<N>(r.part[(b + 1) & 1], descA, descB, b + 1, 4, first);
          wgmmaWait<1>();
        } else {
          wgmmaWait<0>();
        }
        fence<N>(r.part[b & 1]);
      }
    }
  } else if constexpr (kRole == kFfma) {
#pragma unroll 1
    for (int c = 0; c < chunks; ++c) {
      // One partial set: the registers fit three warpgroups at N = 128.
#pragma unroll
      for (int b = 0; b < kBlocks; ++b)
        promote<N>(r, 0, s);
      fence<N>(r.acc);
    }
  }
  float sum = __uint_as_float(extra);
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    sum += r.acc[i] + r.part[0][i] + r.part[1][i];
  return sum;
}

template <int N, int R0, int R1, int R2, int R3>
__device__ void overlap(unsigned long long *cycles, int chunks, float s,
                        int zero) {
  extern __shared__ __align__(1024) unsigned char smemRaw[];
  // 128-byte swizzle wants 1024-byte aligned tiles: A 64x128 B, B Nx128 B.
  // (An offset from smemRaw, so the compiler knows the tables are shared
  // memory and loads them with LDS, as the GEMM does.)
  unsigned char *tiles = smemRaw + ((1024 - (smemAddress(smemRaw) & 1023)) & 1023);
  const int bytes = (64 + N) * 128;
  for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x) // finite e4m3
    reinterpret_cast<u32 *>(tiles)[i] = (i * 2654435761u) & 0x77777777u;
  // Factors 1 and 2, as FP32 and as packed bf16.
  float *table = reinterpret_cast<float *>(tiles + bytes);
  for (int i = threadIdx.x; i < 1024; i += blockDim.x)
    table[i] = 1.0f + (i & 1);
  uint4 *packed = reinterpret_cast<uint4 *>(tiles + bytes + 4096);
  for (int i = threadIdx.x; i < 128; i += blockDim.x)
    packed[i] = make_uint4(0x40003f80u, 0x40003f80u, 0x40003f80u, 0x40003f80u);
  fenceProxyAsyncShared();
  __syncthreads();

  const u64 descA = makeSmemDescriptorSw128(smemAddress(tiles));
  const u64 descB = makeSmemDescriptorSw128(smemAddress(tiles + 64 * 128));
  const int wg = threadIdx.x / 128;
  const long long start = clock64();
  float sum;
  if (wg == 0)
    sum = run<N, R0>(descA, descB, chunks, s, zero, table, packed);
  else if (wg == 1)
    sum = run<N, R1>(descA, descB, chunks, s, zero, table, packed);
  else if (wg == 2)
    sum = run<N, R2>(descA, descB, chunks, s, zero, table, packed);
  else
    sum = run<N, R3>(descA, descB, chunks, s, zero, table, packed);
  const long long stop = clock64();
  if (threadIdx.x % 128 == 0)
    cycles[blockIdx.x * 4 + wg] = stop - start;
  if (zero) // never at run time: keeps the registers live
    cycles[gridDim.x * 4 + threadIdx.x] = __float_as_uint(sum);
}
)cuda";

enum Role {
  kIdle,
  kWgmma,
  kWgmma4,
  kFfma,
  kMoss,
  kMossAdd,
  kMossLoaded,
  kMossPacked,
  kMossExtra,
  kMossTwo
};

/// The kernels' factor tables, behind their tiles.
constexpr int kTableBytes = 4096 + 2048;

struct Config {
  const char *name;
  int n;
  std::vector<Role> roles; // one per warpgroup, at most four
};

/// Each role's identifier in the kernel source and its short name.
struct RoleNames {
  const char *identifier, *name;
};
constexpr RoleNames kRoleNames[] = {
    {"kIdle", "-"},        {"kWgmma", "W"},       {"kWgmma4", "W4"},
    {"kFfma", "F"},        {"kMoss", "M"},        {"kMossAdd", "MA"},
    {"kMossLoaded", "ML"}, {"kMossPacked", "MP"}, {"kMossExtra", "MI"},
    {"kMossTwo", "M2"}};
static_assert(std::size(kRoleNames) == kMossTwo + 1, "one entry per role");

const char *roleName(Role role) { return kRoleNames[role].name; }

/// The roles as an enum of the kernel source.
std::string roleEnum() {
  std::string text = "enum Role {";
  for (size_t r = 0; r < std::size(kRoleNames); ++r)
    text += std::string(r ? ", " : " ") + kRoleNames[r].identifier + " = " +
            std::to_string(r);
  return text + " };\n";
}

std::string kernelName(const Config &config) {
  std::string name = "overlap_n" + std::to_string(config.n);
  for (Role role : config.roles)
    name += std::string("_") + roleName(role);
  return name;
}

/// An extern "C" entry point per configuration.
std::string entryPoint(const Config &config) {
  std::string args = std::to_string(config.n);
  for (size_t w = 0; w < 4; ++w)
    args += ", " +
            std::to_string(w < config.roles.size() ? config.roles[w] : kIdle);
  return "extern \"C\" __global__ void __launch_bounds__(" +
         std::to_string(128 * config.roles.size()) + ", 1) " +
         kernelName(config) +
         "(unsigned long long *cycles, int chunks, float s, int zero) {\n"
         "  overlap<" +
         args + ">(cycles, chunks, s, zero);\n}\n";
}

[[noreturn]] void die(Error error) {
  errs() << "moss-bench-overlap: " << toString(std::move(error)) << "\n";
  std::exit(1);
}

template <class T> T orDie(Expected<T> value) {
  if (!value)
    die(value.takeError());
  return std::move(*value);
}

void check(CUresult result, const char *what) {
  if (Error error = checkCuda(result, what))
    die(std::move(error));
}

} // namespace

namespace {
cl::opt<int> chunksOpt("chunks", cl::desc("Work chunks per warp"),
                       cl::init(4000));
} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(
      argc, argv,
      "moss-bench-overlap: FFMA issue next to running FP8 wgmma\n");
  int chunks = chunksOpt;
  if (chunks < 1) {
    errs() << "moss-bench-overlap: --chunks must be positive\n";
    return 2;
  }

  const std::vector<Config> configs = {
      {"tensor pipe, one warp per sub-partition", 128, {kWgmma}},
      {"tensor pipe, two warps", 128, {kWgmma, kWgmma}},
      {"tensor pipe, commit groups of 4", 128, {kWgmma4, kWgmma4}},
      {"FFMA, one warp", 128, {kFfma}},
      {"FFMA, two warps", 128, {kFfma, kFfma}},
      {"wgmma next to FFMA", 128, {kWgmma, kFfma}},
      {"wgmma (groups of 4) next to FFMA", 128, {kWgmma4, kFfma}},
      {"two wgmma warps next to FFMA", 128, {kWgmma, kWgmma, kFfma}},
      {"MOSS loop, one warp", 128, {kMoss}},
      {"MOSS loop, two warps", 128, {kMoss, kMoss}},
      {"MOSS loop with FADD, two warps", 128, {kMossAdd, kMossAdd}},
      {"MOSS loop, two factors", 128, {kMossTwo, kMossTwo}},
      {"MOSS loop, factors loaded per block", 128, {kMossLoaded, kMossLoaded}},
      {"MOSS loop, packed bf16 factors", 128, {kMossPacked, kMossPacked}},
      {"MOSS loop, 16 more instructions a block",
       128,
       {kMossExtra, kMossExtra}},
      {"MOSS loop n64, two warps", 64, {kMoss, kMoss}},
      {"MOSS loop n64, three warps", 64, {kMoss, kMoss, kMoss}},
      {"MOSS loop n64, four warps", 64, {kMoss, kMoss, kMoss, kMoss}},
  };

  // Compiled first (for device 0's arch, else sm_90a), so that compile
  // errors and ptxas's advisories show even without a GPU: a wgmma that
  // ptxas serializes voids its configuration's figures.
  std::string source = roleEnum() + kSource;
  for (const Config &config : configs)
    source += entryPoint(config);
  CompileOptions options;
  options.programName = "moss_overlap_bench.cu";
  options.flags = {"--ptxas-options=-v"};
  CompileResult compiled = orDie(compileCuda(source, options));
  SmallVector<StringRef> lines;
  StringRef(compiled.log).split(lines, '\n');
  for (StringRef line : lines)
    if (line.contains("Potential Performance Loss") ||
        line.contains("warning") || line.contains("error"))
      outs() << "NVRTC: " << line << "\n";

  Device device = orDie(Device::open(0));
  if (Error error = device.makeCurrent())
    die(std::move(error));
  const DriverApi &api = orDie(getDriverApi());
  const int sms = device.getSmCount();
  outs() << "device: " << device.getName() << " (" << device.getArch() << ", "
         << sms << " SMs), " << chunks << " chunks of 16 blocks\n";
  Module module = orDie(Module::load(compiled.cubin));

  CUdeviceptr cycles = 0;
  check(api.memAlloc(&cycles, (sms * 4 + 512) * sizeof(uint64_t)),
        "cuMemAlloc");
  outs() << format("\n%-42s %-12s %10s %8s %8s %6s  %s\n", "configuration",
                   "roles", "cycles", "tensor", "FFMA", "regs",
                   "Mcycles per warpgroup");
  for (const Config &config : configs) {
    CUfunction function = orDie(module.getFunction(kernelName(config)));
    int regs = 0;
    check(api.funcGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, function),
          "cuFuncGetAttribute");
    LaunchConfig launch;
    launch.grid[0] = sms;
    launch.block[0] = 128 * config.roles.size();
    launch.sharedMemoryBytes = (64 + config.n) * 128 + 1024 + kTableBytes;
    float s = 0.5f;
    int zero = 0; // the kernels' run-time zero
    std::vector<uint64_t> all;
    std::vector<std::vector<uint64_t>> perWarpgroup(config.roles.size());
    for (int rep = 0; rep < 3; ++rep) { // the first warms up
      void *args[] = {&cycles, &chunks, &s, &zero};
      if (Error error = launchKernel(function, launch, args))
        die(std::move(error));
      check(api.streamSynchronize(nullptr), "cuStreamSynchronize");
      std::vector<uint64_t> host(sms * 4);
      check(api.memcpyDtoH(host.data(), cycles, host.size() * 8),
            "cuMemcpyDtoH");
      if (rep == 0)
        continue;
      // A CTA's time is its slowest warpgroup's.
      for (int cta = 0; cta < sms; ++cta) {
        uint64_t slowest = 0;
        for (size_t w = 0; w < config.roles.size(); ++w) {
          slowest = std::max(slowest, host[cta * 4 + w]);
          perWarpgroup[w].push_back(host[cta * 4 + w]);
        }
        all.push_back(slowest);
      }
    }
    auto median = [](std::vector<uint64_t> v) {
      std::sort(v.begin(), v.end());
      return double(v[v.size() / 2]);
    };
    const double cyclesAll = median(all);
    // Per sub-partition: an m64nN k32 wgmma is 16 x N x 32 MACs of its
    // warp; a promotion block is N/2 FFMA instructions of the warp.
    double tensorCycles = 0, ffmas = 0;
    for (Role role : config.roles) {
      const bool moss = role == kMoss || role == kMossAdd ||
                        role == kMossLoaded || role == kMossPacked ||
                        role == kMossExtra || role == kMossTwo;
      if (role == kWgmma || role == kWgmma4 || moss)
        tensorCycles += 16.0 * chunks * (16.0 * config.n * 32 / 1024);
      if (role == kFfma || moss)
        ffmas += 16.0 * chunks * (config.n / 2);
    }
    std::string roles;
    for (Role role : config.roles)
      roles += std::string(roles.empty() ? "" : " ") + roleName(role);
    std::string each;
    for (const std::vector<uint64_t> &cycles : perWarpgroup)
      each += formatv(" {0:f2}", median(cycles) / 1e6).str();
    outs() << format("%-42s %-12s %10.0f %7.1f%% %7.1f%% %6d ", config.name,
                     roles.c_str(), cyclesAll, 100 * tensorCycles / cyclesAll,
                     100 * ffmas / cyclesAll, regs)
           << each << "\n";
  }
  api.memFree(cycles);
  return 0;
}
