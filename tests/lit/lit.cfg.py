# -*- Python -*-
# lit configuration for the moss dialect, passes and command-line tools.

import os
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "MOSS"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moss_obj_root, "tests", "lit")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.moss_tools_dir, append_path=True)

# The python that runs lit runs the test scripts too.
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%moss-opt", os.path.join(config.moss_tools_dir, "moss-opt")))
config.substitutions.append(("%moss-jit", os.path.join(config.moss_tools_dir, "moss-jit")))
config.substitutions.append(("%moss-translate", os.path.join(config.moss_tools_dir, "moss-translate")))
config.substitutions.append(("%moss-tune", os.path.join(config.moss_tools_dir, "moss-tune")))
# Debian's mlir-opt-22 (linked to the shared libMLIR) and the plugin for it.
config.substitutions.append(("%mlir-opt", os.path.join(config.llvm_tools_dir, "mlir-opt")))
config.substitutions.append(("%moss_plugin", config.moss_plugin))

llvm_config.add_tool_substitutions(["moss-opt", "moss-jit", "moss-translate", "moss-tune"],
                                   [config.moss_tools_dir])
