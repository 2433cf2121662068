// A C++ consumer of the installed libraries (find_package(MOSSJIT
// COMPONENTS compiler runtime)): quantizes an LLM-like activation with the
// host reference, then compiles the MOSS GEMM that takes it through the
// pipeline to CUDA source for an H200. Neither step needs a GPU.
#include "moss/Compiler/Compile.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"

#include "llvm/Support/Error.h"

#include <cstdio>

using namespace moss;

int main() {
  const int64_t rows = 256, cols = 4096;
  std::vector<float> x = numerics::llmActivationSample(rows, cols, 42);
  numerics::QuantizeOptions options;
  options.scheme = numerics::ScalingScheme::twoLevel(numerics::GlobalScope::Row);
  llvm::Expected<numerics::QuantizedTensor> q =
      numerics::quantize(x, rows, cols, options);
  if (!q) {
    std::fprintf(stderr, "quantize: %s\n",
                 llvm::toString(q.takeError()).c_str());
    return 1;
  }
  std::printf("quantized %lldx%lld as %s: %zu codes, %zu block scales\n",
              (long long)rows, (long long)cols, options.scheme.str().c_str(),
              q->codes.size(), q->localE8M0.size());

  compiler::GemmSpec spec;
  spec.m = compiler::GemmSpec::kDynamic;
  spec.n = 11008;
  spec.k = cols;
  spec.aScaling = options.scheme;
  spec.bScaling = numerics::ScalingScheme::perTensor();
  llvm::Expected<compiler::KernelSource> kernel =
      compiler::compileGemm(spec, compiler::TargetInfo::h200());
  if (!kernel) {
    std::fprintf(stderr, "compile: %s\n",
                 llvm::toString(kernel.takeError()).c_str());
    return 1;
  }
  std::printf("kernel %s: %zu bytes of CUDA\n", kernel->kernelName.c_str(),
              kernel->source.size());
  return 0;
}
