# The C++ libraries for C++ embedders, installed as components of the
# MOSSJIT CMake package (runtime/capi installs the C API, MOSSJIT::moss):
#
#   MOSSJIT::runtime   the MLIR-free JIT runtime: GPU quantizers, folds,
#                      weight scaler, kernel cache, NVRTC, and the host
#                      reference numerics (moss/Runtime, moss/Numerics,
#                      moss/Support)
#   MOSSJIT::compiler  the moss dialect, its passes and pipelines, and the
#                      registration entry points (moss/InitAll.h,
#                      moss-c/Dialects.h)
#   MOSSJIT::gemm      the GEMM runtime (moss/Gemm/Gemm.h), which joins
#                      the two
#
# They are static archives built against LLVM/MLIR 22 and the CUDA
# Toolkit's headers; MOSSJITConfig.cmake finds those when a component asks
# for them. Included by the top-level CMakeLists.txt after every library
# exists.

set(MOSS_RUNTIME_LIBRARIES MOSSNumerics MOSSSupport MOSSQuantizerSource
  MOSSRuntime)
set(MOSS_COMPILER_LIBRARIES MOSSCompilerCore MOSSDialect MOSSDialectUtils
  MOSSTransforms MOSSConversion MOSSTargetCuda MOSSCompiler MOSSInitAll
  MOSSCAPI)

foreach(component runtime compiler gemm)
  add_library(MOSSJIT_${component} INTERFACE)
  set_target_properties(MOSSJIT_${component} PROPERTIES
    EXPORT_NAME ${component})
  target_include_directories(MOSSJIT_${component} INTERFACE
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
endforeach()
target_link_libraries(MOSSJIT_runtime INTERFACE ${MOSS_RUNTIME_LIBRARIES})
target_link_libraries(MOSSJIT_compiler INTERFACE ${MOSS_COMPILER_LIBRARIES})
target_link_libraries(MOSSJIT_gemm INTERFACE MOSSGemm MOSSJIT_runtime
  MOSSJIT_compiler)

install(TARGETS ${MOSS_RUNTIME_LIBRARIES} ${MOSS_COMPILER_LIBRARIES} MOSSGemm
  MOSSJIT_runtime MOSSJIT_compiler MOSSJIT_gemm
  EXPORT MOSSJITCxxTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT MOSSJITCxxTargets NAMESPACE MOSSJIT::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/MOSSJIT)

# The headers, with the dialect's generated declarations (.inc) and the
# driver's entry list (.def).
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/moss"
  "${PROJECT_SOURCE_DIR}/include/moss-c"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
install(DIRECTORY "${PROJECT_BINARY_DIR}/include/moss"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h.inc" PATTERN "*.cpp.inc")
