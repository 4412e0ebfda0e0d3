// -O3 fusion of a Concat read only by a FusedElementwise chain (as its X0, of the chain's output
// shape) into one ai.kiln.ConcatElementwise, which reads X0 from the Concat's inputs: the
// concatenation is never written. DenseNet's layers are Concat(features so far) -> BN -> ReLU ->
// conv: its Concats wrote 36 MB a run that the BN-ReLU chains read back. Runs after the layout
// pass, so that a blocked Concat and its blocked chain fuse alike.
#include "passes/fusions/epilogue_match.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using epilogue::Rewrites;
using epilogue::Types;

class ConcatElementwiseFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    return epilogue::fuse_sweep(model, ctx, [](const ir::Graph&, const GraphIndex& idx,
                                               const Types& types, const ir::Node& n, Rewrites& rw) {
      if (n.domain != "ai.kiln" || n.op_type != "FusedElementwise" || n.inputs.empty() ||
          n.outputs.size() != 1)
        return;
      const std::string& x0 = n.inputs[0];
      const ir::Node* concat = idx.producer(x0);
      if (!is_onnx_op(concat, "Concat") || rw.drop.count(concat) || concat->outputs.size() != 1 ||
          concat->inputs.empty() || idx.sole_consumer(x0) != &n)
        return;
      for (const std::string& in : concat->inputs)
        if (in.empty() || !types.is_float32(in)) return;
      // X0 must not broadcast: the kernel walks the parts in the output's own order.
      if (!types.same_float_shape(x0, n.outputs[0])) return;
      const auto t = types.of(x0);
      const int64_t rank = static_cast<int64_t>(t->shape.size());
      int64_t axis = concat->attr_int("axis", 0);
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank) return;
      ir::Node f = n;
      f.op_type = "ConcatElementwise";
      f.inputs = concat->inputs;
      f.inputs.insert(f.inputs.end(), n.inputs.begin() + 1, n.inputs.end());
      f.attrs.push_back(ir::Attribute::of_int("x0_parts", static_cast<int64_t>(concat->inputs.size())));
      f.attrs.push_back(ir::Attribute::of_int("x0_axis", axis));
      rw.replace({concat, &n}, std::move(f));
    });
  }
};

}  // namespace

KILN_REGISTER_PASS(ConcatElementwiseFusion, "concat-elementwise", 3, kLayout, 20, false);

}  // namespace kiln::passes
