// moss/common/version.cuh - the version of the device template set.
//
// Kernel sources include templates by their path under templates/, e.g.
// #include "moss/common/version.cuh"; the runtime hands NVRTC every template
// under that name, so no include path on disk is needed.
#pragma once

#define MOSS_TEMPLATES_VERSION_MAJOR 0
#define MOSS_TEMPLATES_VERSION_MINOR 1
