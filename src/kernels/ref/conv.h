// What conv.cc's reference kernels lend to the fast ones that fall back on them.
#pragma once

#include "kernels/kernel.h"

namespace kiln {

// QLinearConv on the reference path (any group, rank and type; int32 sums from gemm_s16).
Status qlinear_conv_reference(KernelContext& ctx);

}  // namespace kiln
