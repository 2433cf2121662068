//===- MOSSDialect.h - The moss dialect -------------------------*- C++ -*-===//

#ifndef MOSS_DIALECT_MOSS_IR_MOSSDIALECT_H
#define MOSS_DIALECT_MOSS_IR_MOSSDIALECT_H

#include "mlir/IR/Dialect.h"

#include "moss/Dialect/MOSS/IR/MOSSDialect.h.inc"

#endif // MOSS_DIALECT_MOSS_IR_MOSSDIALECT_H
