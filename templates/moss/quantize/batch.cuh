// moss/quantize/batch.cuh - one slice of a batched launch: G casts of one
// shape, each with its own scale, in one grid (QuantizeSpec::batched). The
// kernel wrapper passes batchSlice(args) to the quantize pass, whose code
// is the same as an unbatched launch's.
#pragma once

#include "moss/quantize/args.cuh"

namespace moss::quantize {

/// `p` advanced by `bytes`; null stays null (an output the launch lacks).
template <class T>
__device__ __forceinline__ T *advanceBytes(T *p, long long bytes) {
  return p ? reinterpret_cast<T *>(reinterpret_cast<char *>(p) + bytes) : p;
}
template <class T>
__device__ __forceinline__ const T *advanceBytes(const T *p, long long bytes) {
  return p ? reinterpret_cast<const T *>(reinterpret_cast<const char *>(p) +
                                         bytes)
           : p;
}

/// The arguments of slice blockIdx.z: every sliced pointer advanced by its
/// stride times the slice.
__device__ __forceinline__ Args batchSlice(const Args &args) {
  const long long z = blockIdx.z;
  const BatchStrides &b = args.batch;
  Args a = args;
  a.x = advanceBytes(a.x, z * b.x);
  a.q = advanceBytes(a.q, z * b.q);
  a.global = advanceBytes(a.global, z * b.global);
  a.scaleIn = advanceBytes(a.scaleIn, z * b.scaleIn);
  a.saturated = advanceBytes(a.saturated, z * b.counters);
  a.nonFinite = advanceBytes(a.nonFinite, z * b.counters);
  a.row.q = advanceBytes(a.row.q, z * b.rowQ);
  a.row.global = advanceBytes(a.row.global, z * b.rowGlobal);
  a.row.saturated = advanceBytes(a.row.saturated, z * b.rowCounters);
  a.row.nonFinite = advanceBytes(a.row.nonFinite, z * b.rowCounters);
  a.adamw.grad = advanceBytes(a.adamw.grad, z * b.grad);
  a.adamw.expAvg = advanceBytes(a.adamw.expAvg, z * b.expAvg);
  a.adamw.expAvgSq = advanceBytes(a.adamw.expAvgSq, z * b.expAvgSq);
  return a;
}

} // namespace moss::quantize
