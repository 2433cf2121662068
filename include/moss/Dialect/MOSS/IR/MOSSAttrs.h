//===- MOSSAttrs.h - moss attributes ----------------------------*- C++ -*-===//

#ifndef MOSS_DIALECT_MOSS_IR_MOSSATTRS_H
#define MOSS_DIALECT_MOSS_IR_MOSSATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "moss/Dialect/MOSS/IR/MOSSEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moss/Dialect/MOSS/IR/MOSSAttrs.h.inc"

#endif // MOSS_DIALECT_MOSS_IR_MOSSATTRS_H
