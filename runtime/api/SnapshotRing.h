//===- SnapshotRing.h - Page-locked slots for device snapshots --*- C++ -*-===//
//
// A weight scaler's device words and its way of hearing back from the GPU
// without waiting: each step copies the device words into the next
// page-locked slot and records that slot's event; later steps take the slots
// whose events completed, in order. WeightScaler and ExpertWeightScalers each
// own one ring.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_SNAPSHOTRING_H
#define MOSS_RUNTIME_API_SNAPSHOTRING_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <cuda.h>

namespace moss::runtime {

class SnapshotRing {
public:
  /// The GPU may lag this many steps behind the host before the ring is
  /// full.
  static constexpr int kSlots = 8;

  SnapshotRing() = default;
  /// Waits for the outstanding slots' copies (not on the per-step path),
  /// then frees the device words, the slots and the events.
  ~SnapshotRing();
  SnapshotRing(const SnapshotRing &) = delete;
  SnapshotRing &operator=(const SnapshotRing &) = delete;

  /// Allocates `deviceBytes` of device words, kSlots page-locked slots of
  /// `slotBytes` and their events in the current context.
  llvm::Error allocate(size_t deviceBytes, size_t slotBytes);

  /// The device words the scaler's kernels count into.
  CUdeviceptr device() const { return words; }

  bool full() const { return count == kSlots; }
  /// The slot the next step fills.
  int nextIndex() const { return (oldest + count) % kSlots; }
  char *slot(int index) const { return memory + index * bytes; }

  /// Retires each outstanding slot whose copy has landed, oldest first,
  /// handing its index to `observe` (its bytes stay until the slot is
  /// filled again); stops at the first still in flight, since the events of
  /// one stream complete in order. Never waits.
  llvm::Error takeLanded(llvm::function_ref<llvm::Error(int index)> observe);
  /// Waits for the oldest outstanding slot's copy.
  llvm::Error waitOldest() const;
  /// Retires the oldest outstanding slot unread.
  void popOldest();
  /// Records the event of nextIndex() on `stream` (after the step queued
  /// its copy into that slot) and makes the slot outstanding.
  llvm::Error push(CUstream stream);

private:
  CUdeviceptr words = 0;
  char *memory = nullptr;
  size_t bytes = 0;
  CUevent events[kSlots] = {};
  int oldest = 0;
  int count = 0;
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_API_SNAPSHOTRING_H
