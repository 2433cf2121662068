//===- Progress.cpp - A progress bar on stderr ----------------------------===//

#include "Progress.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace moss;
using namespace moss::tune;

std::string tune::formatDuration(double seconds) {
  int64_t s = int64_t(seconds + 0.5);
  std::string text;
  raw_string_ostream os(text);
  if (s >= 3600)
    os << format("%lld:%02lld:%02lld", (long long)(s / 3600),
                 (long long)(s / 60 % 60), (long long)(s % 60));
  else
    os << format("%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return text;
}

Progress::Progress(StringRef label, int64_t total)
    : label(label.str()), total(total), start(std::chrono::steady_clock::now()),
      terminal(sys::Process::StandardErrIsDisplayed()) {
  draw(true);
}

Progress::~Progress() { finish(); }

double Progress::getElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

void Progress::advance(int64_t count, StringRef text) {
  std::lock_guard<std::mutex> lock(mutex);
  done += count;
  if (!text.empty())
    note = text.str();
  draw(false);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mutex);
  if (finished)
    return;
  finished = true;
  note.clear();
  draw(true);
  if (terminal)
    errs() << "\n";
}

void Progress::draw(bool force) {
  auto now = std::chrono::steady_clock::now();
  int decile = total > 0 ? int(done * 10 / total) : 10;
  if (!force) {
    if (terminal && now - lastDraw < std::chrono::milliseconds(100))
      return;
    if (!terminal && decile == lastDecile)
      return;
  }
  lastDraw = now;
  lastDecile = decile;
  double elapsed = std::chrono::duration<double>(now - start).count();
  constexpr int kWidth = 24;
  int filled = total > 0 ? int(done * kWidth / total) : kWidth;
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kWidth - filled), '-');
  std::string eta =
      done > 0 && done < total
          ? formatDuration(elapsed / double(done) * double(total - done))
      : done >= total ? "0:00"
                      : "?";
  std::string line;
  raw_string_ostream os(line);
  os << format("%-8s [%s] %5lld/%-5lld %3d%%  %s elapsed, ETA %s",
               label.c_str(), bar.c_str(), (long long)done, (long long)total,
               total > 0 ? int(done * 100 / total) : 100,
               formatDuration(elapsed).c_str(), eta.c_str());
  if (!note.empty())
    os << "  " << note;
  if (terminal) {
    // Clear to the end of the line: the note may have been longer.
    errs() << "\r" << line << "\x1b[K";
  } else {
    errs() << line << "\n";
  }
  errs().flush();
}
