//===- SassInfo.h - A cubin's SASS, read with nvdisasm ----------*- C++ -*-===//
//
// Disassembles a cubin with the CUDA toolkit's nvdisasm and reads its
// listing into functions of instructions, each with its address and, for a
// branch, the address it jumps to. A loop is what a backward branch closes:
// a BRA whose target lies below its own address spans [target, branch].
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_SASSINFO_H
#define MOSS_TOOLS_COMMON_SASSINFO_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moss::jit {

/// One SASS instruction.
struct SassInstruction {
  /// Byte offset in its function.
  uint64_t address = 0;
  /// The mnemonic with its modifiers and without a predicate, e.g. "BRA",
  /// "LDG.E.128", "NOP".
  std::string opcode;
  /// The whole instruction as nvdisasm prints it, predicate included,
  /// without the trailing ';'.
  std::string text;
  /// A BRA's target address (a branch to a label of its own function).
  std::optional<uint64_t> branchTarget;

  bool isNop() const { return opcode == "NOP"; }
};

/// The instructions of one kernel (or device function), in address order.
struct SassFunction {
  std::string name;
  std::vector<SassInstruction> instructions;

  /// The instructions in [begin, end], NOPs excluded.
  int countInstructions(uint64_t begin, uint64_t end) const;
  /// All of the function's instructions, NOPs (the alignment padding)
  /// excluded.
  int countInstructions() const { return countInstructions(0, UINT64_MAX); }
};

/// A loop closed by a backward branch: the instructions from the branch's
/// target to the branch itself.
struct SassLoop {
  uint64_t begin = 0;
  uint64_t end = 0;
  /// Instructions in [begin, end], NOPs excluded.
  int instructions = 0;
};

/// The loops of `function`, one per backward branch, in address order of
/// their branches. A backward branch whose target lies inside a loop that
/// closes before the branch is left out: it is a jump back from code placed
/// after that loop (ptxas moves rarely taken paths, such as a barrier wait's
/// retry, past the kernel's exit), not a loop of its own.
std::vector<SassLoop> findLoops(const SassFunction &function);

/// The loop of findLoops with the most instructions (the first among
/// equals); none when there is no loop.
std::optional<SassLoop> findLargestLoop(const SassFunction &function);

/// Reads the listing of `nvdisasm -c` (code sections only). Fails when a
/// branch names a label its function does not define, or when the text
/// holds no function.
llvm::Expected<std::vector<SassFunction>> parseNvdisasm(llvm::StringRef text);

/// The nvdisasm to run: $MOSS_NVDISASM, else bin/ of $CUDA_HOME and of
/// /usr/local/cuda, else the one on $PATH. Fails, naming the places looked
/// at, when there is none.
llvm::Expected<std::string> findNvdisasm();

/// Disassembles `cubin` (ELF bytes) with the nvdisasm at `program` (through
/// a temporary file, removed afterwards) and parses the listing. The error
/// holds nvdisasm's own message when it fails.
llvm::Expected<std::vector<SassFunction>>
disassembleCubin(llvm::StringRef cubin, llvm::StringRef program);

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_SASSINFO_H
