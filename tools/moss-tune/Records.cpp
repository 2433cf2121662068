//===- Records.cpp - Every timed candidate: CSV and SVG -------------------===//

#include "Records.h"

#include "moss/Support/AtomicFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace llvm;
using namespace moss;
using namespace moss::tune;
using compiler::RasterOrder;

static Error error(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

Error tune::writeTextFile(StringRef path, StringRef text) {
  if (Error e = createParentDirectories(path))
    return e;
  return writeFileAtomically(path, ArrayRef<char>(text.data(), text.size()));
}

//===----------------------------------------------------------------------===//
// CSV
//===----------------------------------------------------------------------===//

static constexpr const char *kColumns[] = {
    "shape",   "label",  "arch",      "sm_count",  "a",      "b",
    "out",     "m",      "n",         "k",         "kind",   "tile_m",
    "tile_n",  "stages", "cluster_m", "cluster_n", "raster", "swizzle",
    "split_k", "status", "ms",        "tflops",    "role",   "note"};

static std::string quote(StringRef field) {
  if (field.find_first_of(",\"\n") == StringRef::npos)
    return field.str();
  std::string out = "\"";
  for (char c : field) {
    if (c == '"')
      out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

Error tune::writeCsv(StringRef path, ArrayRef<CandidateRecord> records) {
  std::string text;
  raw_string_ostream os(text);
  os << join(ArrayRef<const char *>(kColumns), ",") << "\n";
  for (const CandidateRecord &r : records) {
    const compiler::TileConfig &t = r.tiling;
    bool moss = r.kind == "moss";
    auto tile = [&](int64_t v) { return moss ? std::to_string(v) : ""; };
    std::vector<std::string> fields = {
        r.shape,
        r.label,
        r.arch,
        std::to_string(r.smCount),
        r.a,
        r.b,
        r.out,
        std::to_string(r.m),
        std::to_string(r.n),
        std::to_string(r.k),
        r.kind,
        tile(t.tileM),
        tile(t.tileN),
        tile(t.stages),
        tile(t.clusterM),
        tile(t.clusterN),
        moss ? (t.raster == RasterOrder::AlongM ? "along_m" : "along_n") : "",
        tile(t.swizzle),
        tile(t.splitK),
        r.status,
        r.status == "ok" ? formatv("{0:f6}", r.milliseconds).str() : "",
        r.status == "ok" ? formatv("{0:f2}", r.tflops).str() : "",
        r.roles,
        r.note};
    for (size_t i = 0; i < fields.size(); ++i)
      os << (i ? "," : "") << quote(fields[i]);
    os << "\n";
  }
  return writeTextFile(path, text);
}

/// Splits one CSV line (quoted fields allowed).
static std::vector<std::string> splitCsv(StringRef line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

Expected<std::vector<CandidateRecord>> tune::readCsv(StringRef path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(path);
  if (!buffer)
    return error("cannot read '" + path + "': " + buffer.getError().message());
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
  std::vector<CandidateRecord> records;
  const size_t columns = std::size(kColumns);
  // Files written before split-K was searched lack its column: split_k 1.
  const size_t splitKColumn =
      llvm::find(kColumns, StringRef("split_k")) - std::begin(kColumns);
  bool withoutSplitK = false;
  for (auto [index, line] : enumerate(lines)) {
    std::vector<std::string> f = splitCsv(line.rtrim("\r"));
    std::string where = (path + ":" + Twine(index + 1)).str();
    if (index == 0)
      withoutSplitK =
          f.size() == columns - 1 && llvm::find(f, "split_k") == f.end();
    if (withoutSplitK && f.size() == columns - 1)
      f.insert(f.begin() + splitKColumn, "");
    if (f.size() != columns)
      return error(where + ": expected " + Twine(columns) + " fields, got " +
                   Twine(f.size()));
    if (index == 0) {
      if (f[0] != "shape")
        return error(where + ": expected the header line 'shape,label,...'");
      continue;
    }
    CandidateRecord r;
    auto integer = [&](const std::string &text, int64_t &out) {
      return text.empty() || !StringRef(text).getAsInteger(10, out);
    };
    auto number = [&](const std::string &text, double &out) {
      return text.empty() || to_float(text, out);
    };
    int64_t sms = 0, tileM = 0, tileN = 0, stages = 0, cm = 1, cn = 1,
            swizzle = 1, splitK = 1;
    r.shape = f[0];
    r.label = f[1];
    r.arch = f[2];
    r.a = f[4];
    r.b = f[5];
    r.out = f[6];
    r.kind = f[10];
    r.status = f[19];
    r.roles = f[22];
    r.note = f[23];
    bool ok = integer(f[3], sms) && integer(f[7], r.m) && integer(f[8], r.n) &&
              integer(f[9], r.k) && integer(f[11], tileM) &&
              integer(f[12], tileN) && integer(f[13], stages) &&
              integer(f[14], cm) && integer(f[15], cn) &&
              integer(f[17], swizzle) && integer(f[18], splitK) &&
              number(f[20], r.milliseconds) && number(f[21], r.tflops);
    if (!ok)
      return error(where + ": a numeric field is not a number");
    r.smCount = unsigned(sms);
    r.tiling.tileM = tileM;
    r.tiling.tileN = tileN;
    r.tiling.stages = stages;
    r.tiling.clusterM = cm;
    r.tiling.clusterN = cn;
    r.tiling.raster =
        f[16] == "along_n" ? RasterOrder::AlongN : RasterOrder::AlongM;
    r.tiling.swizzle = swizzle;
    r.tiling.splitK = splitK;
    records.push_back(std::move(r));
  }
  return records;
}

//===----------------------------------------------------------------------===//
// SVG
//===----------------------------------------------------------------------===//

static std::string escape(StringRef text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

static bool hasRole(const CandidateRecord &r, StringRef role) {
  SmallVector<StringRef> roles;
  SplitString(r.roles, roles);
  return is_contained(roles, role);
}

Error tune::writeSvg(StringRef path, ArrayRef<CandidateRecord> records,
                     StringRef title) {
  // Shapes in order of first appearance.
  std::vector<std::string> shapes;
  std::map<std::string, size_t> column;
  std::map<std::string, std::string> labels;
  double low = INFINITY, high = 0;
  for (const CandidateRecord &r : records) {
    if (!column.count(r.shape)) {
      column[r.shape] = shapes.size();
      shapes.push_back(r.shape);
      labels[r.shape] = r.label;
    }
    if (r.status == "ok" && r.tflops > 0) {
      low = std::min(low, r.tflops);
      high = std::max(high, r.tflops);
    }
  }
  if (shapes.empty() || high <= 0) {
    low = 1;
    high = 1000;
  }
  double lowDecade = std::floor(std::log10(low));
  double highDecade = std::ceil(std::log10(high));
  if (highDecade <= lowDecade)
    highDecade = lowDecade + 1;

  const double left = 70, right = 180, top = 40, bottom = 150;
  const double columnWidth = 48;
  const double plotWidth = std::max<double>(columnWidth * shapes.size(), 300);
  const double plotHeight = 420;
  const double width = left + plotWidth + right;
  const double height = top + plotHeight + bottom;
  auto y = [&](double tflops) {
    double t = (std::log10(tflops) - lowDecade) / (highDecade - lowDecade);
    return top + plotHeight * (1 - t);
  };
  auto x = [&](size_t shape, double offset) {
    return left + columnWidth * (double(shape) + 0.5 + offset);
  };

  std::string text;
  raw_string_ostream os(text);
  os << format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
               "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\">\n",
               width, height);
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << format("<text x=\"%.0f\" y=\"22\" font-size=\"14\">", left)
     << escape(title) << "</text>\n";
  // Axes and grid: 1, 2, 5 per decade.
  for (double decade = lowDecade; decade <= highDecade; ++decade)
    for (double step : {1.0, 2.0, 5.0}) {
      double value = step * std::pow(10.0, decade);
      if (std::log10(value) > highDecade + 1e-9)
        continue;
      double py = y(value);
      os << format("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"%s\"/>\n",
                   left, left + plotWidth, py, py,
                   step == 1.0 ? "#bbb" : "#eee");
      os << format(
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
          left - 6, py + 4, value);
    }
  os << format("<text transform=\"translate(18,%.0f) rotate(-90)\" "
               "text-anchor=\"middle\">TFLOPS (log scale)</text>\n",
               top + plotHeight / 2);
  os << format("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
               "fill=\"none\" stroke=\"#333\"/>\n",
               left, top, plotWidth, plotHeight);
  for (size_t i = 0; i < shapes.size(); ++i)
    os << format("<text transform=\"translate(%.1f,%.1f) rotate(-60)\" "
                 "text-anchor=\"end\">",
                 x(i, 0) + 4, top + plotHeight + 12)
       << escape(labels[shapes[i]]) << "</text>\n";

  // Candidates: a column of dots per shape, spread sideways.
  std::map<std::string, int> seen, total;
  for (const CandidateRecord &r : records)
    if (r.kind == "moss" && r.status == "ok")
      ++total[r.shape];
  std::vector<std::string> marks;
  for (const CandidateRecord &r : records) {
    if (r.kind != "moss" || r.status != "ok" || r.tflops <= 0)
      continue;
    int index = seen[r.shape]++;
    double offset = total[r.shape] > 1
                        ? -0.35 + 0.7 * index / double(total[r.shape] - 1)
                        : 0;
    double px = x(column[r.shape], offset), py = y(r.tflops);
    os << format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#4a7ab7\" "
                 "fill-opacity=\"0.6\"><title>",
                 px, py)
       << escape(r.label) << ": " << format("%.1f", r.tflops)
       << " TFLOPS</title></circle>\n";
    std::string mark;
    raw_string_ostream ms(mark);
    if (hasRole(r, "heuristic"))
      ms << format("<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" "
                   "fill=\"none\" stroke=\"#2a9d3a\" stroke-width=\"1.5\"/>\n",
                   px - 4, py - 4);
    if (hasRole(r, "best"))
      ms << format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5.5\" fill=\"none\" "
                   "stroke=\"#d62728\" stroke-width=\"2\"/>\n",
                   px, py);
    marks.push_back(mark);
  }
  for (const std::string &mark : marks)
    os << mark;

  // cuBLASLt: a line through its point on each shape that has one.
  std::string points;
  for (const CandidateRecord &r : records)
    if (r.kind == "cublaslt" && r.status == "ok" && r.tflops > 0)
      points += formatv("{0:f1},{1:f1} ", x(column[r.shape], 0), y(r.tflops));
  if (!points.empty())
    os << "<polyline points=\"" << points
       << "\" fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>\n";

  // Legend.
  double lx = left + plotWidth + 16, ly = top + 10;
  os << format("<circle cx=\"%.0f\" cy=\"%.0f\" r=\"3\" fill=\"#4a7ab7\"/>"
               "<text x=\"%.0f\" y=\"%.0f\">candidate</text>\n",
               lx, ly, lx + 12, ly + 4);
  os << format("<circle cx=\"%.0f\" cy=\"%.0f\" r=\"5.5\" fill=\"none\" "
               "stroke=\"#d62728\" stroke-width=\"2\"/><text x=\"%.0f\" "
               "y=\"%.0f\">best (database)</text>\n",
               lx, ly + 20, lx + 12, ly + 24);
  os << format("<rect x=\"%.0f\" y=\"%.0f\" width=\"8\" height=\"8\" "
               "fill=\"none\" stroke=\"#2a9d3a\" stroke-width=\"1.5\"/>"
               "<text x=\"%.0f\" y=\"%.0f\">heuristic</text>\n",
               lx - 4, ly + 36, lx + 12, ly + 44);
  os << format("<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" "
               "stroke=\"#ff7f0e\" stroke-width=\"2\"/><text x=\"%.0f\" "
               "y=\"%.0f\">cuBLASLt FP8 per-tensor</text>\n",
               lx - 6, lx + 6, ly + 60, ly + 60, lx + 12, ly + 64);
  os << "</svg>\n";
  return writeTextFile(path, text);
}
