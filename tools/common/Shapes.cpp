//===- Shapes.cpp - The GEMMs moss-tune sweeps ----------------------------===//

#include "Shapes.h"

#include "ExpertRouting.h"
#include "SchemeOptions.h"

#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/TuningDatabase.h"
#include "moss/Gemm/Gemm.h"
#include "moss/Support/UntrustedInput.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"

#include <array>

using namespace llvm;
using namespace moss;
using namespace moss::tune;
using numerics::Fp8Format;

static Error error(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

std::string TuneShape::getShapeText() const {
  std::string text =
      (Twine(m) + "x" + Twine(spec.n) + "x" + Twine(spec.k)).str();
  if (spec.groups)
    text += (" " + Twine(spec.groups) + " experts (" + routing + ")").str();
  return text;
}

Expected<OperandScheme> tune::parseScheme(StringRef token, StringRef what) {
  Expected<jit::SchemeText> text = jit::parseSchemeText(token);
  if (!text)
    return error(what + " '" + token + "': " + toString(text.takeError()));
  OperandScheme result;
  if (text->format)
    result.format = *text->format;
  // moss-tune's moss default is the forward activations' per-row global.
  Expected<numerics::ScalingScheme> built =
      jit::makeScheme(*text, "", "", "", "row");
  if (!built)
    return error(what + " '" + token + "': " + toString(built.takeError()));
  result.scheme = *built;
  return result;
}

static TuneShape makeShape(int64_t m, int64_t n, int64_t k,
                           const OperandScheme &a, const OperandScheme &b,
                           const ShapeDefaults &defaults, std::string origin) {
  TuneShape shape;
  shape.m = m;
  shape.spec.groups = defaults.groups;
  if (defaults.groups)
    shape.routing = defaults.routing;
  shape.spec.m = compiler::GemmSpec::kDynamic;
  shape.spec.n = n;
  shape.spec.k = k;
  shape.spec.a = a.format;
  shape.spec.aScaling = a.scheme;
  shape.spec.b = b.format;
  shape.spec.bScaling = b.scheme;
  shape.spec.out = defaults.out;
  shape.spec.mma = defaults.mma;
  shape.spec.fold = defaults.fold;
  // What the runtime launches (its default: a pass folds the operands):
  // the database holds that kernel's tiling.
  shape.given = shape.spec;
  shape.spec = compiler::getPlannedKernelSpec(shape.spec, m,
                                              /*foldAInKernel=*/false);
  shape.origin = std::move(origin);
  return shape;
}

/// A positive dimension; `what` names it in errors.
static Expected<int64_t> parseDimension(StringRef text, StringRef name,
                                        const Twine &where) {
  int64_t value = 0;
  if (text.getAsInteger(10, value) || value < 1)
    return error(where + ": " + name + " '" + text +
                 "' is not a positive integer");
  return value;
}

/// M, N and K from their three texts, each checked by parseDimension.
static Expected<std::array<int64_t, 3>>
parseDimensions(std::array<StringRef, 3> texts, const std::string &where) {
  const char *names[3] = {"M", "N", "K"};
  std::array<int64_t, 3> dims;
  for (int i = 0; i < 3; ++i) {
    Expected<int64_t> value = parseDimension(texts[i], names[i], where);
    if (!value)
      return value.takeError();
    dims[i] = *value;
  }
  return dims;
}

Expected<TuneShape> tune::parseShapeFlag(StringRef text,
                                         const ShapeDefaults &defaults) {
  SmallVector<StringRef> parts;
  text.split(parts, 'x');
  std::string where = ("--shape " + text).str();
  if (parts.size() != 3)
    return error(where + ": expected MxNxK, e.g. 128x4096x4096");
  Expected<std::array<int64_t, 3>> dims =
      parseDimensions({parts[0], parts[1], parts[2]}, where);
  if (!dims)
    return dims.takeError();
  return makeShape((*dims)[0], (*dims)[1], (*dims)[2], defaults.a, defaults.b,
                   defaults, where);
}

/// One shape from its fields (M, N, K, then optional schemes, then
/// optional groups=G and routing=R) at `where`.
static Expected<TuneShape> shapeFromFields(ArrayRef<std::string> allFields,
                                           const ShapeDefaults &defaults,
                                           const std::string &where) {
  // The line's options override the defaults'.
  ShapeDefaults line = defaults;
  std::vector<std::string> fields;
  bool options = false;
  for (const std::string &field : allFields) {
    auto [name, value] = StringRef(field).split('=');
    if (!StringRef(field).contains('=')) {
      if (options)
        return error(where + ": '" + field +
                     "' follows an option; write M N K and the schemes "
                     "first, then groups=G and routing=R");
      fields.push_back(field);
      continue;
    }
    options = true;
    if (name == "groups") {
      if (value.getAsInteger(10, line.groups) || line.groups < 1 ||
          line.groups > 1024)
        return error(where + ": groups '" + value +
                     "' is not an expert count from 1 to 1024");
    } else if (name == "routing") {
      if (!jit::isTotalRouting(value))
        return error(where + ": routing '" + value +
                     "' is not uniform, random, skewed or sparse");
      line.routing = value.str();
    } else {
      return error(where + ": unknown option '" + field +
                   "'; expected groups=G or routing=R");
    }
  }
  if (fields.size() < 3 || fields.size() > 5)
    return error(where +
                 ": expected 'M N K [a-scheme] [b-scheme] [groups=G] "
                 "[routing=R]', got " +
                 Twine(fields.size()) + " fields");
  Expected<std::array<int64_t, 3>> dims =
      parseDimensions({fields[0], fields[1], fields[2]}, where);
  if (!dims)
    return dims.takeError();
  OperandScheme a = defaults.a, b = defaults.b;
  if (fields.size() > 3) {
    Expected<OperandScheme> parsed =
        parseScheme(fields[3], where + ": A scheme");
    if (!parsed)
      return parsed.takeError();
    a = *parsed;
  }
  if (fields.size() > 4) {
    Expected<OperandScheme> parsed =
        parseScheme(fields[4], where + ": B scheme");
    if (!parsed)
      return parsed.takeError();
    b = *parsed;
  }
  return makeShape((*dims)[0], (*dims)[1], (*dims)[2], a, b, line, where);
}

/// The line (1-based) where each element of the top-level JSON array
/// starts; strings and nesting are skipped.
static std::vector<int> elementLines(StringRef text) {
  std::vector<int> lines;
  int line = 1, depth = 0;
  bool inString = false, escaped = false, expectElement = false;
  for (char c : text) {
    if (c == '\n')
      ++line;
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (expectElement && !isSpace(c) && c != ']') {
      lines.push_back(line);
      expectElement = false;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth == 1 && c == '[')
        expectElement = true;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expectElement = true;
    }
  }
  return lines;
}

static Expected<std::vector<TuneShape>>
parseJsonShapes(StringRef text, StringRef name, const ShapeDefaults &defaults) {
  if (Error e = checkJsonNesting(text, compiler::kMaxJsonDepth))
    return error(name + ": " + toString(std::move(e)));
  Expected<json::Value> root = json::parse(text);
  if (!root)
    return error(name + ": not valid JSON: " + toString(root.takeError()));
  const json::Array *list = root->getAsArray();
  if (!list)
    return error(name + ":1: expected a JSON list of shapes");
  std::vector<int> lines = elementLines(text);
  std::vector<TuneShape> shapes;
  for (auto [index, value] : enumerate(*list)) {
    std::string where =
        (name + ":" + Twine(index < lines.size() ? lines[index] : 0) +
         " (shape " + Twine(index) + ")")
            .str();
    std::vector<std::string> fields;
    auto field = [&](const json::Value &v, StringRef what) -> Error {
      if (std::optional<int64_t> i = v.getAsInteger())
        fields.push_back(std::to_string(*i));
      else if (std::optional<StringRef> s = v.getAsString())
        fields.push_back(s->str());
      else
        return error(
            where + ": " + what +
            " must be an integer (M, N, K, groups) or a string (schemes, "
            "routing)");
      return Error::success();
    };
    if (const json::Array *array = value.getAsArray()) {
      for (const json::Value &v : *array)
        if (Error e = field(v, "an element"))
          return std::move(e);
    } else if (const json::Object *object = value.getAsObject()) {
      for (const auto &entry : *object)
        if (!is_contained(ArrayRef<StringRef>{"m", "n", "k", "a", "b", "groups",
                                              "routing"},
                          StringRef(entry.first)))
          return error(where + ": unknown key '" + entry.first.str() +
                       "'; expected m, n, k, a, b, groups, routing");
      for (StringRef key : {"m", "n", "k"}) {
        const json::Value *v = object->get(key);
        if (!v)
          return error(where + ": missing '" + key + "'");
        if (Error e = field(*v, "'" + key.str() + "'"))
          return std::move(e);
      }
      const json::Value *a = object->get("a");
      const json::Value *b = object->get("b");
      if (b && !a)
        return error(where + ": 'b' needs 'a' (give both schemes)");
      for (const json::Value *v : {a, b})
        if (v)
          if (Error e = field(*v, "a scheme"))
            return std::move(e);
      // The options as the text form writes them.
      for (StringRef key : {"groups", "routing"})
        if (const json::Value *v = object->get(key)) {
          if (Error e = field(*v, "'" + key.str() + "'"))
            return std::move(e);
          fields.back() = (key + "=" + fields.back()).str();
        }
    } else {
      return error(where + ": expected [M, N, K, ...] or {\"m\": ..., "
                           "\"n\": ..., \"k\": ...}");
    }
    Expected<TuneShape> shape = shapeFromFields(fields, defaults, where);
    if (!shape)
      return shape.takeError();
    shapes.push_back(std::move(*shape));
  }
  return shapes;
}

static Expected<std::vector<TuneShape>>
parseTextShapes(StringRef text, StringRef name, const ShapeDefaults &defaults) {
  std::vector<TuneShape> shapes;
  SmallVector<StringRef> lines;
  text.split(lines, '\n');
  for (auto [index, rawLine] : enumerate(lines)) {
    StringRef line = rawLine.split('#').first.trim();
    if (line.empty())
      continue;
    SmallVector<StringRef> words;
    SplitString(line, words);
    std::vector<std::string> fields;
    for (StringRef word : words)
      fields.push_back(word.str());
    Expected<TuneShape> shape = shapeFromFields(
        fields, defaults, (name + ":" + Twine(index + 1)).str());
    if (!shape)
      return shape.takeError();
    shapes.push_back(std::move(*shape));
  }
  return shapes;
}

Expected<std::vector<TuneShape>>
tune::parseShapesFile(StringRef text, StringRef name,
                      const ShapeDefaults &defaults) {
  Expected<std::vector<TuneShape>> shapes =
      text.ltrim().starts_with("[") ? parseJsonShapes(text, name, defaults)
                                    : parseTextShapes(text, name, defaults);
  // An empty JSON list is no more a shapes file than an empty text one.
  if (shapes && shapes->empty())
    return error(name + ": no shapes (expected lines 'M N K [a-scheme] "
                        "[b-scheme]' or a JSON list)");
  return shapes;
}

StringRef tune::getPresetNames() { return "llama7b"; }

Expected<std::vector<TuneShape>>
tune::getPreset(StringRef preset, const ShapeDefaults &defaults) {
  if (preset != "llama7b")
    return error("--preset " + preset + ": unknown preset; expected " +
                 getPresetNames());
  struct Projection {
    const char *name;
    int64_t n, k;
  };
  // hidden 4096, FFN 11008, fused QKV 3 * 4096.
  const Projection projections[] = {{"qkv", 12288, 4096},
                                    {"attn-out", 4096, 4096},
                                    {"ffn-up", 11008, 4096},
                                    {"ffn-down", 4096, 11008}};
  std::vector<TuneShape> shapes;
  for (const Projection &p : projections)
    for (int64_t m : {1, 16, 128, 2048, 16384}) {
      TuneShape shape = makeShape(m, p.n, p.k, defaults.a, defaults.b, defaults,
                                  "--preset " + preset.str());
      shape.name = p.name;
      shapes.push_back(std::move(shape));
    }
  return shapes;
}

Error tune::checkShapes(const std::vector<TuneShape> &shapes) {
  for (size_t i = 0; i < shapes.size(); ++i) {
    const TuneShape &shape = shapes[i];
    // An m-grouped kernel takes a dynamic M only.
    compiler::GemmSpec atM = shape.spec;
    if (!atM.groups)
      atM.m = shape.m;
    if (Error e = checkGemmSpec(atM))
      return error(shape.origin + ": " + shape.getShapeText() + " " +
                   shape.spec.str() + ": " + toString(std::move(e)));
    if (shape.spec.groups && shape.given.aScaling.hasGlobalScales() &&
        !shape.given.aScaling.globalPerRow())
      return error(shape.origin + ": " + shape.getShapeText() +
                   ": the experts' rows are quantized apart, so A needs a "
                   "global per row (moss:row, per-row, per-group or mxfp8), "
                   "not " +
                   shape.given.aScaling.str());
    for (size_t j = 0; j < i; ++j) {
      const TuneShape &other = shapes[j];
      compiler::TargetInfo any;
      if (compiler::TuningKey::get(shape.spec, any, shape.m) ==
          compiler::TuningKey::get(other.spec, any, other.m))
        return error(shape.origin + ": " + shape.getShapeText() +
                     " is in the same database entry (M bucket <= " +
                     Twine(compiler::getRowsBucket(shape.m)) + ") as " +
                     other.getShapeText() + " from " + other.origin +
                     "; the database keeps one entry per M bucket");
    }
  }
  return Error::success();
}
