//===- Commands.h - moss-jit subcommands ------------------------*- C++ -*-===//
//
// Each subcommand registers its options under its own llvm::cl::SubCommand
// and runs after parsing. A run returns the process exit code.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_MOSSJIT_COMMANDS_H
#define MOSS_TOOLS_MOSSJIT_COMMANDS_H

#include "llvm/Support/CommandLine.h"

namespace moss::jit {

extern llvm::cl::SubCommand quantizeCommand;
int runQuantize();

extern llvm::cl::SubCommand demoCommand;
int runDemo();

extern llvm::cl::SubCommand snrCommand;
int runSnr();

extern llvm::cl::SubCommand autoScaleReplayCommand;
int runAutoScaleReplay();

/// The GEMM commands (GemmSpecOptions.cpp), constructed on first use.
llvm::cl::SubCommand &getCompileCommand();
int runCompile();

llvm::cl::SubCommand &getRunCommand();
int runRun();

llvm::cl::SubCommand &getBenchCommand();
int runBench();

extern llvm::cl::SubCommand cacheCommand;
int runCache();

} // namespace moss::jit

#endif // MOSS_TOOLS_MOSSJIT_COMMANDS_H
