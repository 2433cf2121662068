//===- SassInfo.cpp - A cubin's SASS, read with nvdisasm ------------------===//

#include "SassInfo.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace llvm;

namespace moss::jit {

namespace {

Error failure(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// A function being read: its instructions, its labels' addresses, and the
/// label each branch names, resolved when the function ends.
struct FunctionReader {
  SassFunction function;
  StringMap<uint64_t> labels;
  std::vector<std::string> pendingLabels;
  std::vector<std::pair<size_t, std::string>> branchLabels;

  Error finish() {
    // Labels after the last instruction mark the function's end.
    const uint64_t end = function.instructions.empty()
                             ? 0
                             : function.instructions.back().address + 1;
    for (const std::string &label : pendingLabels)
      labels[label] = end;
    for (const auto &[index, label] : branchLabels) {
      auto it = labels.find(label);
      if (it == labels.end())
        return failure("SASS of '" + function.name + "': a branch at 0x" +
                       Twine::utohexstr(function.instructions[index].address) +
                       " jumps to '" + label +
                       "', which the function does not define");
      function.instructions[index].branchTarget = it->second;
    }
    return Error::success();
  }
};

/// Reads "/*0150*/  @!P0 BRA `(.L_x_3) ;" into `reader`; false when the line
/// is not an instruction.
bool readInstruction(StringRef line, FunctionReader &reader) {
  if (!line.consume_front("/*"))
    return false;
  size_t close = line.find("*/");
  uint64_t address = 0;
  if (close == StringRef::npos ||
      line.take_front(close).getAsInteger(16, address))
    return false;
  StringRef text = line.drop_front(close + 2).trim();
  // Data directives (.byte, .word) are not instructions.
  if (text.empty() || text.starts_with("."))
    return false;
  text = text.rtrim(';').rtrim();
  SassInstruction instruction;
  instruction.address = address;
  instruction.text = text.str();
  StringRef rest = text;
  if (rest.starts_with("@"))
    rest = rest.split(' ').second.ltrim();
  instruction.opcode = rest.split(' ').first.str();
  StringRef opcode = instruction.opcode;
  if (opcode == "BRA" || opcode.starts_with("BRA.")) {
    size_t open = rest.find("`(");
    if (open != StringRef::npos) {
      StringRef label = rest.drop_front(open + 2);
      label = label.take_front(label.find(')'));
      reader.branchLabels.push_back(
          {reader.function.instructions.size(), label.str()});
    }
  }
  for (const std::string &label : reader.pendingLabels)
    reader.labels[label] = address;
  reader.pendingLabels.clear();
  reader.function.instructions.push_back(std::move(instruction));
  return true;
}

} // namespace

int SassFunction::countInstructions(uint64_t begin, uint64_t end) const {
  return int(std::count_if(instructions.begin(), instructions.end(),
                           [&](const SassInstruction &instruction) {
                             return instruction.address >= begin &&
                                    instruction.address <= end &&
                                    !instruction.isNop();
                           }));
}

std::vector<SassLoop> findLoops(const SassFunction &function) {
  std::vector<SassLoop> edges;
  for (const SassInstruction &instruction : function.instructions)
    if (instruction.branchTarget &&
        *instruction.branchTarget < instruction.address)
      edges.push_back({*instruction.branchTarget, instruction.address, 0});
  std::vector<SassLoop> loops;
  for (const SassLoop &edge : edges) {
    const bool outOfLine = llvm::any_of(edges, [&](const SassLoop &other) {
      return other.begin < edge.begin && edge.begin <= other.end &&
             other.end < edge.end;
    });
    if (outOfLine)
      continue;
    SassLoop loop = edge;
    loop.instructions = function.countInstructions(loop.begin, loop.end);
    loops.push_back(loop);
  }
  return loops;
}

std::optional<SassLoop> findLargestLoop(const SassFunction &function) {
  std::optional<SassLoop> largest;
  for (const SassLoop &loop : findLoops(function))
    if (!largest || loop.instructions > largest->instructions)
      largest = loop;
  return largest;
}

Expected<std::vector<SassFunction>> parseNvdisasm(StringRef text) {
  std::vector<SassFunction> functions;
  std::optional<FunctionReader> reader;
  auto finishFunction = [&]() -> Error {
    if (!reader)
      return Error::success();
    if (Error error = reader->finish())
      return error;
    functions.push_back(std::move(reader->function));
    reader.reset();
    return Error::success();
  };
  SmallVector<StringRef> lines;
  text.split(lines, '\n');
  for (StringRef line : lines) {
    line = line.trim();
    if (line.consume_front(".section")) {
      if (Error error = finishFunction())
        return std::move(error);
      StringRef section = line.ltrim().split(',').first;
      if (section.consume_front(".text.")) {
        reader.emplace();
        reader->function.name = section.str();
      }
      continue;
    }
    if (!reader || line.empty())
      continue;
    if (readInstruction(line, *reader))
      continue;
    if (line.ends_with(":") && !line.starts_with("/*"))
      reader->pendingLabels.push_back(line.drop_back().str());
  }
  if (Error error = finishFunction())
    return std::move(error);
  if (functions.empty())
    return failure("the nvdisasm listing holds no code section");
  return functions;
}

Expected<std::string> findNvdisasm() {
  if (std::optional<std::string> path = sys::Process::GetEnv("MOSS_NVDISASM")) {
    if (sys::fs::can_execute(*path))
      return *path;
    return failure("MOSS_NVDISASM=" + *path + " is not an executable file");
  }
  std::vector<std::string> places;
  if (std::optional<std::string> home = sys::Process::GetEnv("CUDA_HOME"))
    places.push_back(*home + "/bin");
  if (!llvm::is_contained(places, "/usr/local/cuda/bin"))
    places.push_back("/usr/local/cuda/bin");
  for (const std::string &place : places) {
    SmallString<256> path(place);
    sys::path::append(path, "nvdisasm");
    if (sys::fs::can_execute(path))
      return std::string(path);
  }
  if (ErrorOr<std::string> path = sys::findProgramByName("nvdisasm"))
    return *path;
  return failure("nvdisasm not found: MOSS_NVDISASM is unset, and neither " +
                 join(places, ", ") + " nor $PATH holds it");
}

Expected<std::vector<SassFunction>> disassembleCubin(StringRef cubin,
                                                     StringRef program) {
  int fd = -1;
  SmallString<128> cubinPath, outPath, errPath;
  if (std::error_code ec =
          sys::fs::createTemporaryFile("moss-sass", "cubin", fd, cubinPath))
    return failure("cannot create a temporary file: " + ec.message());
  FileRemover removeCubin(cubinPath);
  {
    raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << cubin;
    os.close();
    if (os.has_error())
      return failure("cannot write " + cubinPath + ": " + os.error().message());
  }
  if (std::error_code ec =
          sys::fs::createTemporaryFile("moss-sass", "txt", outPath))
    return failure("cannot create a temporary file: " + ec.message());
  FileRemover removeOut(outPath);
  if (std::error_code ec =
          sys::fs::createTemporaryFile("moss-sass", "err", errPath))
    return failure("cannot create a temporary file: " + ec.message());
  FileRemover removeErr(errPath);

  const std::optional<StringRef> redirects[] = {StringRef(""), outPath.str(),
                                                errPath.str()};
  std::string message;
  int rc = sys::ExecuteAndWait(program, {program, "-c", cubinPath.str()},
                               std::nullopt, redirects, /*SecondsToWait=*/0,
                               /*MemoryLimit=*/0, &message);
  if (rc != 0) {
    std::string detail = message;
    if (ErrorOr<std::unique_ptr<MemoryBuffer>> err =
            MemoryBuffer::getFile(errPath))
      detail += (*err)->getBuffer().trim().str();
    return failure(program + " failed (exit " + Twine(rc) + "): " + detail);
  }
  ErrorOr<std::unique_ptr<MemoryBuffer>> listing =
      MemoryBuffer::getFile(outPath);
  if (!listing)
    return failure("cannot read " + outPath + ": " +
                   listing.getError().message());
  return parseNvdisasm((*listing)->getBuffer());
}

} // namespace moss::jit
