// Reference kernel of ai.kiln.FusedConv: the reference Conv (same kernel, same attributes), then
// the activation/residual tail. Semantics: docs/ops.md.
#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"

namespace kiln {
namespace {

class FusedConv : public Kernel {
 public:
  explicit FusedConv(kiln_ops::StandardOp conv) : conv_(std::move(conv)) {}

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
      return ctx.error("FusedConv needs X and W");
    if (ctx.input(0).dtype() != DType::kFloat32)
      return ctx.error("FusedConv supports float32 only");
    KILN_ASSIGN_OR_RETURN(Tensor y, conv_.run(ctx, {&ctx.value(0), &ctx.value(1),
                                                     ctx.has_input(2) ? &ctx.value(2) : nullptr}));
    KILN_RETURN_IF_ERROR(kiln_ops::apply_epilogue(ctx, y, 3));
    ctx.set_output(0, std::move(y));
    return Status::ok();
  }

 private:
  kiln_ops::StandardOp conv_;
};

Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return Status::error(node.describe() + ": " + act.status().message());
  KILN_ASSIGN_OR_RETURN(kiln_ops::StandardOp conv, kiln_ops::StandardOp::create("Conv", node));
  return std::unique_ptr<Kernel>(std::make_unique<FusedConv>(std::move(conv)));
}

const KernelRegistrar kRegistrar("ai.kiln", "FusedConv", "ref", create);

}  // namespace
}  // namespace kiln
