//===- MOSSDialect.cpp - The moss dialect ---------------------------------===//

#include "moss/Dialect/MOSS/IR/MOSSDialect.h"
#include "moss/Dialect/MOSS/IR/MOSSAttrs.h"
#include "moss/Dialect/MOSS/IR/MOSSOps.h"


using namespace mlir;
using namespace mlir::moss;

#include "moss/Dialect/MOSS/IR/MOSSDialect.cpp.inc"

void MOSSDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "moss/Dialect/MOSS/IR/MOSSOps.cpp.inc"
      >();
}
