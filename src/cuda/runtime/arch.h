// src/cuda/runtime/arch.h: the architecture gate (internal).
//
// mxmoe's kernels are built for sm_90a only (wgmma, setmaxnreg): on any other compute capability
// they must never be launched. The gate reads each device's capability once (cached), and
// returns a Status naming the architecture otherwise. A test hook fakes the capability so that
// the refusal can be tested on the H200 itself.
#pragma once

#include "mxmoe/common.h"

namespace mxmoe::runtime {

// The (possibly faked) compute capability of `device`; the real one is read once and cached.
Status device_capability(int device, int* major, int* minor);
// Ok for 9.0; otherwise "unsupported architecture sm_XY: ...".
Status check_architecture(int major, int minor);

// Test hook: every later device_capability() call reports major.minor; (-1, -1) undoes it.
void set_fake_capability_for_testing(int major, int minor);

}  // namespace mxmoe::runtime
