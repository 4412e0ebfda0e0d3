// Trims the kernel rows and columns of a Conv that never touch its input: with a dilation as
// large as the input, a tap can land in the padding for every output pixel (DeepLabV3's ASPP at
// output stride 16: rates 12, 24 and 36 on a 33x33 map; at rate 36 only the centre tap reads
// the input, and the 3x3 conv is a 1x1). The weights keep the taps that some output reads and
// the pads shrink by the dilation times the taps cut, so the output's size and every value are
// the same (the taps cut only ever multiplied padding zeros). Needs the input's spatial size
// and constant weights; explicit pads only (auto_pad NOTSET).
#include <algorithm>
#include <vector>

#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// The kernel taps [k0, k1) along one axis that some output position reads inside [0, size).
std::pair<int64_t, int64_t> taps_read(int64_t size, int64_t kernel, int64_t stride, int64_t dilation,
                                      int64_t pad_begin, int64_t out) {
  auto reads = [&](int64_t k) {
    for (int64_t o = 0; o < out; ++o) {
      const int64_t at = o * stride - pad_begin + k * dilation;
      if (at >= 0 && at < size) return true;
      if (at >= size) break;  // later outputs read further right
    }
    return false;
  };
  int64_t k0 = 0, k1 = kernel;
  while (k0 < kernel && !reads(k0)) ++k0;
  while (k1 > k0 && !reads(k1 - 1)) --k1;
  return {k0, k1};
}

// W [M, C/group, K0, K1, ...] cut to taps [begin[a], end[a]) on each spatial axis a.
Tensor slice_taps(const Tensor& w, const std::vector<int64_t>& begin, const std::vector<int64_t>& end) {
  Shape shape = w.shape();
  for (size_t a = 0; a < begin.size(); ++a) shape[a + 2] = end[a] - begin[a];
  Tensor out = Tensor::make(DType::kFloat32, shape).value();
  const int64_t rank = w.rank();
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  float* dst = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t src = 0;  // idx in out's shape -> offset in w
    for (int64_t d = 0; d < rank; ++d) src = src * w.dim(d) + idx[d] + (d >= 2 ? begin[d - 2] : 0);
    dst[i] = w.data<float>()[src];
    for (int64_t d = rank - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
  }
  return out;
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
      const size_t axes = static_cast<size_t>(w->rank() - 2);
      auto ints = [&](const char* name, int64_t fill, size_t count) {
        std::vector<int64_t> v = n.attr_ints(name);
        if (v.empty()) v.assign(count, fill);
        return v;
      };
      std::vector<int64_t> strides = ints("strides", 1, axes), dilations = ints("dilations", 1, axes),
                           pads = ints("pads", 0, 2 * axes);
      if (strides.size() != axes || dilations.size() != axes || pads.size() != 2 * axes) continue;
      std::vector<int64_t> begin(axes), end(axes);
      bool trims = false, ok = true;
      for (size_t a = 0; a < axes && ok; ++a) {
        const int64_t size = x->shape[a + 2].value, k = w->dim(static_cast<int64_t>(a) + 2);
        const int64_t s = strides[a], d = dilations[a];
        const int64_t span = size + pads[a] + pads[a + axes] - d * (k - 1) - 1;
        if (size < 1 || s < 1 || d < 1 || span < 0) {
          ok = false;
          break;
        }
        std::tie(begin[a], end[a]) = taps_read(size, k, s, d, pads[a], span / s + 1);
        // No tap reads the input: the output is the bias alone; left as it is.
        ok = begin[a] < end[a] && pads[a] - begin[a] * d >= 0 && pads[a + axes] - (k - end[a]) * d >= 0;
        trims |= begin[a] > 0 || end[a] < k;
      }
      if (!ok || !trims) continue;
      for (size_t a = 0; a < axes; ++a) {
        pads[a] -= begin[a] * dilations[a];
        pads[a + axes] -= (w->dim(static_cast<int64_t>(a) + 2) - end[a]) * dilations[a];
      }
      std::vector<int64_t> kernel(axes);
      for (size_t a = 0; a < axes; ++a) kernel[a] = end[a] - begin[a];
      const std::string name = fresh_name(g, n.inputs[1] + "_trimmed");
      g.initializers[name] = slice_taps(*w, begin, end);
      n.inputs[1] = name;
      std::erase_if(n.attrs, [](const ir::Attribute& at) { return at.name == "pads" || at.name == "kernel_shape"; });
      n.attrs.push_back(ir::Attribute::of_ints("pads", pads));
      n.attrs.push_back(ir::Attribute::of_ints("kernel_shape", kernel));
      ++rewrites;
    }
    return rewrites;
  }
};

}  // namespace

KILN_REGISTER_PASS(ConvKernelTrim, "conv-kernel-trim", 1, kSimplify, 35, true);

}  // namespace kiln::passes
