//===- Progress.h - A progress bar on stderr --------------------*- C++ -*-===//
//
// "compile [#########-----------]  210/412  51%  0:12 elapsed, ETA 0:11",
// redrawn in place on a terminal (at most 10 times a second) and printed
// every 10% otherwise. Thread-safe: worker threads call advance().
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_MOSSTUNE_PROGRESS_H
#define MOSS_TOOLS_MOSSTUNE_PROGRESS_H

#include "llvm/ADT/StringRef.h"

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace moss::tune {

class Progress {
public:
  Progress(llvm::StringRef label, int64_t total);
  ~Progress();

  /// Counts `count` more steps done, with an optional note for the line.
  void advance(int64_t count = 1, llvm::StringRef note = "");
  /// Prints the final line (also done by the destructor).
  void finish();

  /// Seconds since the bar started.
  double getElapsedSeconds() const;

private:
  void draw(bool force);

  std::string label;
  int64_t total;
  int64_t done = 0;
  std::string note;
  std::chrono::steady_clock::time_point start, lastDraw;
  int lastDecile = -1;
  bool terminal;
  bool finished = false;
  std::mutex mutex;
};

/// "m:ss" or "h:mm:ss".
std::string formatDuration(double seconds);

} // namespace moss::tune

#endif // MOSS_TOOLS_MOSSTUNE_PROGRESS_H
