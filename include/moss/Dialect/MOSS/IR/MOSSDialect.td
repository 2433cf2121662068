//===- MOSSDialect.td - The moss dialect -------------------*- tablegen -*-===//

#ifndef MOSS_DIALECT_TD
#define MOSS_DIALECT_TD

include "mlir/IR/OpBase.td"

def MOSS_Dialect : Dialect {
  let name = "moss";
  let cppNamespace = "::mlir::moss";
  let summary = "Block-scaled FP8 GEMMs and the quantizers that feed them";
  let description = [{
    The moss dialect describes FP8 GEMMs whose operands carry scaling
    schemes (per-tensor, per-row, per-group, MXFP8 and MOSS two-level
    microscaling), their epilogues, and the quantizers that produce such
    operands. Operands are K-major: the last dimension of both GEMM operands
    is the reduction dimension K, and every block scale runs along it.
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Adds the attributes; defined beside their storage classes.
    void registerAttributes();
  }];
}

class MOSS_Op<string mnemonic, list<Trait> traits = []>
    : Op<MOSS_Dialect, mnemonic, traits>;

#endif // MOSS_DIALECT_TD
