//===- AutoScaleCommand.cpp - moss-jit autoscale-replay -------------------===//
//
// Replays a recorded training trace (the learning rate and the true amax of
// every weight after every optimizer step) through numerics::AutoScaler and
// prints, per weight, bound, interval and step, the predicted scale next to
// the JIT one. The automatic scaling study (docs/NUMERICS.md) checks its own
// simulation against this output.
//
// Input CSV: a header `step,lr,<weight>,<weight>,...`, then one row per step.
// The first row is step 0: the initial amax of every weight (its lr is
// ignored). Row t holds lr_t, the rate of step t, and the amax of W_t.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "moss/Numerics/AutoScale.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/LineIterator.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

cl::SubCommand autoScaleReplayCommand(
    "autoscale-replay",
    "Replay a (lr, weight amax) training trace through the AutoScaler");

namespace {
cl::OptionCategory category("autoscale-replay options");

cl::opt<std::string> input("in", cl::desc("Trace CSV: step,lr,<weights...>"),
                           cl::value_desc("trace.csv"), cl::Required,
                           cl::sub(autoScaleReplayCommand), cl::cat(category));
cl::list<int64_t> intervals("interval",
                            cl::desc("Rescale intervals in steps (default "
                                     "100,500,2000)"),
                            cl::CommaSeparated,
                            cl::sub(autoScaleReplayCommand), cl::cat(category));
cl::list<AdamBound> bounds(
    "bound", cl::desc("Adam update bounds c (default both)"),
    cl::CommaSeparated, cl::sub(autoScaleReplayCommand), cl::cat(category),
    cl::values(clEnumValN(AdamBound::Paper, "paper", "c = 1"),
               clEnumValN(AdamBound::Provable, "provable",
                          "c = (1-b1)/sqrt((1-b2)(1-b1^2/b2))")));
cl::opt<double> beta1("beta1", cl::desc("Adam beta1"), cl::init(0.9),
                      cl::sub(autoScaleReplayCommand), cl::cat(category));
cl::opt<double> beta2("beta2", cl::desc("Adam beta2"), cl::init(0.999),
                      cl::sub(autoScaleReplayCommand), cl::cat(category));
cl::opt<Fp8Format> fp8Format(
    "format", cl::desc("FP8 format of the cast"), cl::init(Fp8Format::E4M3),
    cl::sub(autoScaleReplayCommand), cl::cat(category),
    cl::values(clEnumValN(Fp8Format::E4M3, "e4m3", "E4M3, max 448"),
               clEnumValN(Fp8Format::E5M2, "e5m2", "E5M2, max 57344")));

/// The parsed trace: lr[t] and amax[w][t] for t = 0..steps.
struct Trace {
  std::vector<std::string> weights;
  std::vector<double> lr;
  std::vector<std::vector<float>> amax;
};
} // namespace

static Error traceError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(),
                           "'" + input + "': " + message);
}

static Expected<Trace> readTrace(StringRef path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(path);
  if (!buffer)
    return traceError("cannot read: " + buffer.getError().message());
  Trace trace;
  line_iterator line(**buffer, /*SkipBlanks=*/true);
  if (line.is_at_eof())
    return traceError("empty file, expected a header step,lr,<weights...>");
  SmallVector<StringRef> fields;
  SplitString(*line, fields, ",");
  if (fields.size() < 3 || fields[0].trim() != "step" ||
      fields[1].trim() != "lr")
    return traceError("the header must be step,lr,<weight>,... with at least "
                      "one weight");
  for (StringRef name : ArrayRef(fields).drop_front(2))
    trace.weights.push_back(name.trim().str());
  trace.amax.resize(trace.weights.size());
  for (++line; !line.is_at_eof(); ++line) {
    int64_t lineNo = line.line_number();
    SmallVector<StringRef> values;
    StringRef(*line).split(values, ',');
    if (values.size() != fields.size())
      return traceError("line " + Twine(lineNo) + " has " +
                        Twine(values.size()) + " fields, the header " +
                        Twine(fields.size()));
    int64_t step = 0;
    if (values[0].trim().getAsInteger(10, step) ||
        step != int64_t(trace.lr.size()))
      return traceError("line " + Twine(lineNo) + ": step '" + values[0] +
                        "', expected " + Twine(trace.lr.size()) +
                        " (steps count up from 0)");
    double lr = 0;
    if (values[1].trim().getAsDouble(lr))
      return traceError("line " + Twine(lineNo) + ": lr '" + values[1] +
                        "' is not a number");
    trace.lr.push_back(lr);
    for (size_t w = 0; w < trace.weights.size(); ++w) {
      double amax = 0;
      if (values[w + 2].trim().getAsDouble(amax))
        return traceError("line " + Twine(lineNo) + ": amax '" +
                          values[w + 2] + "' is not a number");
      trace.amax[w].push_back(float(amax));
    }
  }
  if (trace.lr.empty())
    return traceError("no steps after the header");
  return trace;
}

int runAutoScaleReplay() {
  auto fail = [](Error error) {
    errs() << "moss-jit autoscale-replay: error: " << toString(std::move(error))
           << "\n";
    return 1;
  };
  Expected<Trace> trace = readTrace(input);
  if (!trace)
    return fail(trace.takeError());
  SmallVector<int64_t, 4> intervalList(intervals.begin(), intervals.end());
  if (intervalList.empty())
    intervalList.append({100, 500, 2000});
  SmallVector<AdamBound, 2> boundList(bounds.begin(), bounds.end());
  if (boundList.empty())
    boundList.append({AdamBound::Paper, AdamBound::Provable});

  // Every option is checked before the first line is printed.
  for (int64_t interval : intervalList)
    for (AdamBound bound : boundList) {
      AutoScalerOptions options;
      options.bound = bound;
      options.beta1 = beta1;
      options.beta2 = beta2;
      options.interval = interval;
      if (Expected<AutoScaler> scaler = AutoScaler::create(options, 0.0f);
          !scaler)
        return fail(scaler.takeError());
    }

  raw_ostream &os = outs();
  os << "weight,bound,c,interval,step,lr,true_amax,pred_amax,pred_scale,"
        "jit_scale,rescaled,undershoot,saturated\n";
  float fp8Max = fp8MaxFinite(fp8Format);
  for (size_t w = 0; w < trace->weights.size(); ++w)
    for (AdamBound bound : boundList)
      for (int64_t interval : intervalList) {
        AutoScalerOptions options;
        options.bound = bound;
        options.beta1 = beta1;
        options.beta2 = beta2;
        options.interval = interval;
        const std::vector<float> &amax = trace->amax[w];
        Expected<AutoScaler> scaler = AutoScaler::create(options, amax[0]);
        if (!scaler)
          return fail(scaler.takeError());
        StringRef boundName = bound == AdamBound::Paper ? "paper" : "provable";
        for (size_t t = 1; t < amax.size(); ++t) {
          if (Error error = scaler->step(trace->lr[t]))
            return fail(std::move(error));
          bool rescaled = scaler->needsRescale();
          if (rescaled)
            if (Error error = scaler->rescale(amax[t]))
              return fail(std::move(error));
          float predAmax = scaler->predictedAmax();
          float predScale = scaler->predictedScale(fp8Format);
          float jitScale = amax[t] / fp8Max;
          if (jitScale == 0.0f)
            jitScale = 1.0f;
          // The weight's largest element saturates exactly when its scaled
          // magnitude does; the cast kernel would report a non-zero count.
          bool saturated = encodeFp8(amax[t] / predScale, fp8Format).saturated;
          scaler->reportSaturation(saturated ? 1 : 0);
          os << trace->weights[w] << "," << boundName << ","
             << format("%.17g", scaler->bound()) << "," << interval << ","
             << t << "," << format("%.17g", trace->lr[t]) << ","
             << format("%.9g", amax[t]) << "," << format("%.9g", predAmax)
             << "," << format("%.9g", predScale) << ","
             << format("%.9g", jitScale) << "," << (rescaled ? 1 : 0) << ","
             << (predAmax < amax[t] ? 1 : 0) << "," << (saturated ? 1 : 0)
             << "\n";
        }
      }
  return 0;
}

} // namespace moss::jit
