// Trims the kernel rows and columns of a Conv that never touch its input: with a dilation as
// large as the input, a tap can land in the padding for every output pixel (DeepLabV3's ASPP at
// output stride 16: rates 12, 24 and 36 on a 33x33 map; at rate 36 only the centre tap reads
// the input, and the 3x3 conv is a 1x1). The weights keep the taps that some output reads and
// the pads shrink by the dilation times the taps cut, so the output's size and every value are
// the same (the taps cut only ever multiplied padding zeros). Needs the input's spatial size
// and constant weights; explicit pads only (auto_pad NOTSET).
#include <algorithm>
#include <vector>

#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/conv_util.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// The kernel taps [k0, k1) along spatial axis a that some output position reads inside the input.
std::pair<int64_t, int64_t> taps_read(const conv_util::Geometry& g, int64_t a) {
  auto reads = [&](int64_t k) {
    int64_t lo, hi;  // the outputs whose tap k lands inside
    conv_util::indices_inside(g.out[a], g.in[a], g.strides[a], k * g.dilations[a] - g.pads[a], &lo, &hi);
    return lo < hi;
  };
  int64_t k0 = 0, k1 = g.kernel[a];
  while (k0 < k1 && !reads(k0)) ++k0;
  while (k1 > k0 && !reads(k1 - 1)) --k1;
  return {k0, k1};
}

class ConvKernelTrim : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ir::Graph& g = model.graph;
    const GraphIndex idx(g);
    const ValueTypes& types = ctx.types();
    int64_t rewrites = 0;
    for (ir::Node& n : g.nodes) {
      if (!n.domain.empty() || n.op_type != "Conv" || n.inputs.size() < 2 || !n.has_input(0) ||
          n.attr_string("auto_pad", "NOTSET") != "NOTSET")
        continue;
      const Tensor* w = idx.constant(n.inputs[1]);
      const ir::TypeInfo* x = types.tensor(n.inputs[0]);
      if (!w || w->dtype() != DType::kFloat32 || w->rank() < 3 || !x || !x->has_shape ||
          static_cast<int64_t>(x->shape.size()) != w->rank())
        continue;
      const int64_t axes = w->rank() - 2;
      Shape in(static_cast<size_t>(axes)), kernel(w->shape().begin() + 2, w->shape().end());
      for (int64_t a = 0; a < axes; ++a) in[a] = x->shape[a + 2].value;
      auto geometry = conv_util::read_geometry(n, in, kernel);
      if (!geometry || std::any_of(in.begin(), in.end(), [](int64_t v) { return v < 1; })) continue;
      conv_util::Geometry& geo = *geometry;
      if (geo.kernel != kernel || !conv_util::compute_output(geo, "NOTSET", false).is_ok() ||
          std::any_of(geo.out.begin(), geo.out.end(), [](int64_t v) { return v < 1; }))
        continue;
      Shape begin(static_cast<size_t>(axes)), end(static_cast<size_t>(axes));
      bool trims = false, ok = true;
      for (int64_t a = 0; a < axes && ok; ++a) {
        std::tie(begin[a], end[a]) = taps_read(geo, a);
        // No tap reads the input: the output is the bias alone; left as it is.
        ok = begin[a] < end[a] && geo.pads[a] - begin[a] * geo.dilations[a] >= 0 &&
             geo.pads[a + axes] - (kernel[a] - end[a]) * geo.dilations[a] >= 0;
        trims |= begin[a] > 0 || end[a] < kernel[a];
      }
      if (!ok || !trims) continue;
      // W's taps [begin, end) on each spatial axis: a strided view of it.
      Shape trimmed = w->shape();
      const Shape strides = strides_of(w->shape());
      int64_t offset = 0;
      for (int64_t a = 0; a < axes; ++a) {
        geo.pads[a] -= begin[a] * geo.dilations[a];
        geo.pads[a + axes] -= (kernel[a] - end[a]) * geo.dilations[a];
        trimmed[a + 2] = end[a] - begin[a];
        offset += begin[a] * strides[a + 2];
      }
      Tensor wt = Tensor::make(DType::kFloat32, trimmed).value();
      KILN_RETURN_IF_ERROR(copy_strided(*w, offset, strides, &wt, nullptr));
      const std::string name = fresh_name(g, n.inputs[1] + "_trimmed");
      g.initializers[name] = std::move(wt);
      n.inputs[1] = name;
      std::erase_if(n.attrs, [](const ir::Attribute& at) { return at.name == "pads" || at.name == "kernel_shape"; });
      n.attrs.push_back(ir::Attribute::of_ints("pads", geo.pads));
      n.attrs.push_back(ir::Attribute::of_ints("kernel_shape", Shape(trimmed.begin() + 2, trimmed.end())));
      ++rewrites;
    }
    return rewrites;
  }
};

}  // namespace

KILN_REGISTER_PASS(ConvKernelTrim, "conv-kernel-trim", 1, kSimplify, 35, true);

}  // namespace kiln::passes
