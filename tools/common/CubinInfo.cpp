//===- CubinInfo.cpp - What a cubin says about its kernels ----------------===//

#include "CubinInfo.h"

#include "llvm/Object/ELF.h"
#include "llvm/Support/Endian.h"

using namespace llvm;
using namespace llvm::object;

namespace moss::jit {

namespace {
// The `.nv.info` records: a format byte, an attribute byte, then for the
// EIFMT_SVAL format a 16-bit payload size and the payload. EIATTR_REGCOUNT's
// payload is the symbol index and the count, 32 bits each.
constexpr uint8_t kFormatSizedValue = 0x04;
constexpr uint8_t kFormatHalfValue = 0x03;
constexpr uint8_t kAttributeRegisterCount = 0x2F;

Error notACubin(const Twine &why) {
  return createStringError(inconvertibleErrorCode(), "not a cubin: " + why);
}
} // namespace

Expected<int> getCubinRegisterCount(StringRef cubin, StringRef kernel) {
  Expected<ELF64LEFile> elf = ELF64LEFile::create(cubin);
  if (!elf)
    return notACubin(toString(elf.takeError()));
  Expected<ELF64LEFile::Elf_Shdr_Range> sections = elf->sections();
  if (!sections)
    return notACubin(toString(sections.takeError()));

  // The kernel's index in the symbol table.
  std::optional<uint32_t> symbolIndex;
  const ELF64LEFile::Elf_Shdr *info = nullptr;
  for (const ELF64LEFile::Elf_Shdr &section : *sections) {
    Expected<StringRef> name = elf->getSectionName(section);
    if (name && *name == ".nv.info")
      info = &section;
    if (section.sh_type != ELF::SHT_SYMTAB)
      continue;
    Expected<ELF64LEFile::Elf_Sym_Range> symbols = elf->symbols(&section);
    Expected<StringRef> names = elf->getStringTableForSymtab(section);
    if (!symbols || !names) {
      consumeError(symbols.takeError());
      consumeError(names.takeError());
      return notACubin("unreadable symbol table");
    }
    for (const auto &[index, symbol] : enumerate(*symbols)) {
      Expected<StringRef> symbolName = symbol.getName(*names);
      if (symbolName && *symbolName == kernel)
        symbolIndex = uint32_t(index);
      else
        consumeError(symbolName.takeError());
    }
  }
  if (!symbolIndex)
    return createStringError(inconvertibleErrorCode(),
                             "the cubin has no kernel '" + kernel + "'");
  if (!info)
    return notACubin("no .nv.info section");
  Expected<ArrayRef<uint8_t>> contents = elf->getSectionContents(*info);
  if (!contents)
    return notACubin(toString(contents.takeError()));

  ArrayRef<uint8_t> bytes = *contents;
  while (bytes.size() >= 4) {
    const uint8_t format = bytes[0], attribute = bytes[1];
    if (format == kFormatHalfValue) {
      bytes = bytes.drop_front(4);
      continue;
    }
    if (format != kFormatSizedValue)
      break;
    const uint16_t size = support::endian::read16le(bytes.data() + 2);
    if (bytes.size() < 4u + size)
      break;
    if (attribute == kAttributeRegisterCount && size == 8 &&
        support::endian::read32le(bytes.data() + 4) == *symbolIndex)
      return int(support::endian::read32le(bytes.data() + 8));
    bytes = bytes.drop_front(4u + size);
  }
  return notACubin("no register count for '" + kernel + "'");
}

} // namespace moss::jit
