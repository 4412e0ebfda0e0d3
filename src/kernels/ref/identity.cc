// Identity: passes its input through (tensor, sequence or optional), sharing storage.
#include "kernels/fast_path.h"
#include "kernels/kernel.h"

namespace kiln {
namespace {

Status identity(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("Identity needs its input");
  ctx.outputs[0] = ctx.value(0);
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "Identity", identity);

KILN_REGISTER_FAST_PATH("", "Identity", always_fast);

}  // namespace kiln
