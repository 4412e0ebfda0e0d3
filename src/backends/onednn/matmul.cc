// MatMul (float32), Gemm, ai.kiln.FusedGemm and ai.kiln.FusedMatMul through oneDNN's matmul
// primitive. A constant 2-D B is reordered once, in prepare, into the layout oneDNN picks (with
// Gemm's transB and alpha folded in); each run is then one matmul whose bias and post-ops add
// C (or FusedMatMul's bias), the activation and the residual Z in the order docs/ops.md gives.
// A B computed at run time is read in place (batched B broadcast by oneDNN).
//
// A 2-D product (every Gemm, and MatMul with a 2-D B) is cut into one slice of rows a thread,
// each a single-threaded primitive that kiln's pool runs: OpenMP then never starts threads of its
// own, which spin after each call and slow kiln's next kernel. Batched products run whole, on
// OpenMP.
#include <algorithm>
#include <unordered_map>

#include "backends/backend.h"
#include "backends/onednn/onednn_util.h"
#include "core/thread_pool.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln::backends::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

enum class Op { kMatMul, kFusedMatMul, kGemm, kFusedGemm };

bool is_gemm(Op op) { return op == Op::kGemm || op == Op::kFusedGemm; }
bool is_fused(Op op) { return op == Op::kFusedGemm || op == Op::kFusedMatMul; }
bool given(const memory::desc& d) { return !d.is_zero(); }

// A plain row-major desc of `dims`, or with its last two dims swapped in memory (`trans`).
memory::desc plain_desc(const memory::dims& dims, bool trans) {
  memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
  if (trans) {
    const size_t r = dims.size();
    strides[r - 1] = dims[r - 2];
    strides[r - 2] = 1;
  }
  return memory::desc(dims, kF32, strides);
}

// `d`, a plain 2-D desc, cut to its first `rows` rows (its strides kept: a view into the whole).
memory::desc first_rows(const memory::desc& d, int64_t rows) {
  const auto& strides = d.data.format_desc.blocking.strides;
  return memory::desc({rows, d.dims()[1]}, kF32, memory::dims{strides[0], strides[1]});
}

// Elements from one row of plain 2-D `d` to the next.
int64_t row_stride(const memory::desc& d) { return d.data.format_desc.blocking.strides[0]; }

// One run's operands as oneDNN sees them.
struct Geometry {
  memory::desc src, weights, dst, bias, c_post;  // bias / c_post: zero descs when absent
  Shape out;
  int64_t k = 0;
  float alpha = 1.0f, beta = 1.0f;
  bool has_z = false;

  bool operator==(const Geometry& o) const {
    return src == o.src && weights == o.weights && dst == o.dst && bias == o.bias &&
           c_post == o.c_post && alpha == o.alpha && has_z == o.has_z;
  }
};

class OneDnnMatMul : public Kernel {
 public:
  OneDnnMatMul(const ir::Node& node, int64_t opset, Op op, kiln_ops::Activation act)
      : describe_(node.describe()),
        opset_(opset),
        op_(op),
        act_(act),
        residual_first_(node.attr_int("residual_before_activation", 0) != 0),
        trans_b_(is_gemm(op) && node.attr_int("transB", 0) != 0),
        alpha_(is_gemm(op) ? node.attr_float("alpha", 1.0f) : 1.0f),
        beta_(is_gemm(op) ? node.attr_float("beta", 1.0f) : 1.0f) {}

  // A constant 2-D B: reordered into oneDNN's preferred layout for a nominal M (the layout
  // depends on K and N only in practice; a run whose primitive wants another reorders from it),
  // as op(B) · alpha, so that runs never read B again.
  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    if (constants.size() < 2 || constants[1] == nullptr) return Status::ok();
    const Tensor& b = *constants[1];
    if (b.dtype() != DType::kFloat32 || b.rank() < 1 || b.rank() > 2 || b.numel() == 0)
      return Status::ok();
    const bool vec = b.rank() == 1;
    const int64_t k = vec ? b.dim(0) : trans_b_ ? b.dim(1) : b.dim(0);
    const int64_t n = vec ? 1 : trans_b_ ? b.dim(0) : b.dim(1);
    try {
      std::vector<float> scaled;
      const float* data = b.data<float>();
      if (alpha_ != 1.0f) {
        scaled.assign(data, data + b.numel());
        for (float& v : scaled) v *= alpha_;
        data = scaled.data();
      }
      const memory::desc user = plain_desc({k, n}, trans_b_ && !vec);
      const dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(plain_desc({64, k}, false), memory::desc({k, n}, kF32, tag::any),
                             plain_desc({64, n}, false)),
          engine());
      packed_ = memory(pd.weights_desc(), engine());
      memory from(user, engine(), const_cast<float*>(data));
      dnnl::reorder(from, packed_).execute(stream(), from, packed_);
      stream().wait();
    } catch (const dnnl::error& e) {
      return Status::error(describe_ + ": oneDNN failed to pack B: " + e.what());
    }
    packed_dims_ = b.shape();
    absorbed[1] = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
      return ctx.error("needs inputs A and B");
    for (size_t i = 0; i < std::min<size_t>(ctx.num_inputs(), 4); ++i)
      if (ctx.has_input(i) && ctx.input(i).defined() && ctx.input(i).dtype() != DType::kFloat32)
        return ctx.error("the oneDNN kernel takes float32 inputs only, input " + std::to_string(i) +
                         " is " + dtype_name(ctx.input(i).dtype()));
    if (packed_ && ctx.input(1).shape() != packed_dims_)
      return ctx.error("B's shape " + shape_str(ctx.input(1).shape()) + " is not the packed " +
                       shape_str(packed_dims_));
    KILN_ASSIGN_OR_RETURN(Geometry g, geometry(ctx));
    const Tensor* z = ctx.has_input(3) && ctx.input(3).defined() ? &ctx.input(3) : nullptr;
    if (z && z->shape() != g.out)
      return ctx.error("residual input must be float32 of the result's shape " + shape_str(g.out) +
                       ", got " + shape_str(z->shape()));
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, g.out));
    if (y->numel() == 0) return Status::ok();
    if (g.k == 0) return run_own(ctx);  // the empty sum: kiln's kernel has its epilogue
    const int threads = ctx.pool ? ctx.pool->threads() : 1;
    try {
      if (parts_.empty() || !(g == geometry_) || threads != threads_) build(g, threads);
      const float* c = given(g.bias) || given(g.c_post) ? bias_data(ctx, g) : nullptr;
      // A slice's rows start `first` rows into A, Y, Z and a per-row C.
      const bool c_rows = given(g.c_post) && g.c_post.dims()[0] > 1;
      for (Part& part : parts_) {
        auto at = [&](const float* data, const memory::desc& d) {
          return sliced_ ? data + part.first * row_stride(d) : data;
        };
        set_arg_data(part.args, DNNL_ARG_SRC, at(ctx.input(0).data<float>(), g.src));
        if (!packed_) set_arg_data(part.args, DNNL_ARG_WEIGHTS, ctx.input(1).data<float>());
        if (given(g.bias)) set_arg_data(part.args, DNNL_ARG_BIAS, c);
        if (given(g.c_post)) set_arg_data(part.args, part.c_arg, c_rows ? at(c, g.c_post) : c);
        if (z) set_arg_data(part.args, part.z_arg, at(z->data<float>(), g.dst));
        set_arg_data(part.args, DNNL_ARG_DST, at(y->data<float>(), g.dst));
      }
      if (!sliced_) {
        execute(ctx, parts_[0].primitive, parts_[0].args);
      } else {
        run_parts(ctx.pool, static_cast<int64_t>(parts_.size()),
                  [&](int64_t i) { execute_on_this_thread(parts_[i].primitive, parts_[i].args); });
      }
    } catch (const dnnl::error& e) {
      parts_.clear();
      return error_of(ctx, "to run the matmul", e);
    }
    return Status::ok();
  }

 private:
  // The descs of this run's operands, checked as kiln's own kernels check them.
  Result<Geometry> geometry(const KernelContext& ctx) const {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const Tensor* c = ctx.has_input(2) && ctx.input(2).defined() ? &ctx.input(2) : nullptr;
    Geometry g;
    g.has_z = ctx.has_input(3) && ctx.input(3).defined();
    if (is_gemm(op_)) {
      auto plan = plan_gemm(ctx.node, a.shape(), b.shape(), c ? &c->shape() : nullptr);
      if (!plan) return ctx.error(plan.status().message());
      g.k = plan->k;
      g.src = plain_desc({plan->m, plan->k}, plan->trans_a);
      g.dst = plain_desc({plan->m, plan->n}, false);
      g.out = {plan->m, plan->n};
      if (c && beta_ != 0.0f) {
        const Shape& cs = c->shape();
        const int64_t cr = cs.size() == 2 ? cs[0] : 1, cc = cs.empty() ? 1 : cs.back();
        // A per-column C is the bias where alpha is folded into B (oneDNN scales after the bias);
        // every other C is added after the product by a broadcasting binary post-op.
        if (cr == 1 && cc == plan->n && (alpha_ == 1.0f || packed_))
          g.bias = plain_desc({1, cc}, false);
        else
          g.c_post = plain_desc({cr, cc}, false);
      }
      g.alpha = packed_ ? 1.0f : alpha_;
      g.weights = packed_ ? packed_.get_desc() : plain_desc({plan->k, plan->n}, plan->trans_b);
      return g;
    }
    auto plan = plan_matmul(a.shape(), b.shape());
    if (!plan) return ctx.error(plan.status().message());
    const MatMulPlan& p = *plan;
    g.k = p.k;
    g.out = p.out_shape;
    memory::dims dst;
    if (b.rank() <= 2) {  // one 2-D product: A's leading dims are rows
      const int64_t rows = static_cast<int64_t>(p.a_offsets.size()) * p.m;
      g.src = plain_desc({rows, p.k}, false);
      g.weights = packed_ ? packed_.get_desc() : plain_desc({p.k, p.n}, false);
      dst = {rows, p.n};
    } else {  // batched: both padded to one rank, batch dims broadcast by oneDNN
      Shape as = a.shape(), bs = b.shape();
      if (as.size() == 1) as.insert(as.begin(), 1);
      const size_t r = std::max(as.size(), bs.size());
      if (r > DNNL_MAX_NDIMS)
        return ctx.error("MatMul of rank " + std::to_string(r) + " exceeds oneDNN's " +
                         std::to_string(DNNL_MAX_NDIMS));
      as.insert(as.begin(), r - as.size(), 1);
      bs.insert(bs.begin(), r - bs.size(), 1);
      g.src = plain_desc(dims_of(as), false);
      g.weights = plain_desc(dims_of(bs), false);
      for (size_t i = 0; i + 2 < r; ++i) dst.push_back(std::max(as[i], bs[i]));
      dst.push_back(p.m);
      dst.push_back(p.n);
    }
    g.dst = plain_desc(dst, false);
    const Tensor* bias = op_ == Op::kFusedMatMul ? c : nullptr;
    if (bias) {
      if (bias->numel() != p.n)
        return ctx.error("bias must hold N = " + std::to_string(p.n) + " values, got " +
                         shape_str(bias->shape()));
      memory::dims bd(dst.size(), 1);
      bd.back() = p.n;
      g.bias = plain_desc(bd, false);
    }
    return g;
  }

  // The primitive of one part: the whole product, or a slice of its rows.
  struct Part {
    int64_t first = 0;  // the part's first row
    dnnl::matmul primitive;
    Args args;
    int c_arg = 0, z_arg = 0;
  };

  // The parts of geometry `g` on `threads` threads: row slices of a 2-D product (at least
  // kMinRows rows each), or the whole of a batched one.
  void build(const Geometry& g, int threads) {
    constexpr int64_t kMinRows = 4;
    parts_.clear();
    sliced_ = g.src.dims().size() == 2;
    if (!sliced_) {
      parts_.push_back(build_part(g));
    } else {
      const SingleThreaded one_thread;
      const int64_t rows = g.dst.dims()[0];
      const int64_t slices = std::clamp<int64_t>((rows + kMinRows - 1) / kMinRows, 1, threads);
      for (int64_t i = 0; i < slices; ++i) {
        const auto [first, last] = part_range(rows, 1, slices, i);
        const int64_t count = last - first;
        Geometry part = g;
        part.src = first_rows(g.src, count);
        part.dst = first_rows(g.dst, count);
        if (given(g.c_post) && g.c_post.dims()[0] > 1) part.c_post = first_rows(g.c_post, count);
        parts_.push_back(build_part(part));
        parts_.back().first = first;
      }
    }
    geometry_ = g;
    threads_ = threads;
  }

  Part build_part(const Geometry& g) {
    Part part;
    dnnl::post_ops ops;
    int c_index = -1, z_index = -1;
    if (given(g.c_post))
      c_index = ops.len(), ops.append_binary(dnnl::algorithm::binary_add, g.c_post);
    if (g.has_z && residual_first_)
      z_index = ops.len(), ops.append_binary(dnnl::algorithm::binary_add, g.dst);
    append_activation(act_, ops);  // accepts() declined what it cannot express
    if (g.has_z && !residual_first_)
      z_index = ops.len(), ops.append_binary(dnnl::algorithm::binary_add, g.dst);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
    // With a packed B, its layout first; if no implementation takes it for this M, the layout
    // the primitive prefers, reordered into from the packed one for as long as the shape lasts.
    dnnl::matmul::primitive_desc pd;
    bool took = false;
    try {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(g.src, g.weights, g.bias, g.dst), attr,
                                        engine());
      took = true;
    } catch (const dnnl::error&) {
      if (!packed_) throw;
    }
    Args& args = part.args;
    if (!took) {
      const memory::desc any(g.weights.dims(), kF32, tag::any);
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(g.src, any, g.bias, g.dst), attr,
                                        engine());
      memory repacked(pd.weights_desc(), engine());
      dnnl::reorder(packed_, repacked).execute(stream(), packed_, repacked);
      stream().wait();
      args[DNNL_ARG_WEIGHTS] = repacked;
    } else {
      args[DNNL_ARG_WEIGHTS] = packed_ ? packed_ : memory(g.weights, engine(), DNNL_MEMORY_NONE);
    }
    part.primitive = dnnl::matmul(pd);
    args[DNNL_ARG_SRC] = memory(g.src, engine(), DNNL_MEMORY_NONE);
    args[DNNL_ARG_DST] = memory(g.dst, engine(), DNNL_MEMORY_NONE);
    if (given(g.bias)) args[DNNL_ARG_BIAS] = memory(g.bias, engine(), DNNL_MEMORY_NONE);
    part.c_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(c_index) | DNNL_ARG_SRC_1;
    if (given(g.c_post)) args[part.c_arg] = memory(g.c_post, engine(), DNNL_MEMORY_NONE);
    part.z_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(z_index) | DNNL_ARG_SRC_1;
    if (g.has_z) args[part.z_arg] = memory(g.dst, engine(), DNNL_MEMORY_NONE);
    return part;
  }

  // Gemm's beta · C (C itself when beta is 1), FusedMatMul's bias as given.
  const float* bias_data(const KernelContext& ctx, const Geometry& g) {
    const Tensor& c = ctx.input(2);
    if (!is_gemm(op_) || beta_ == 1.0f) return c.data<float>();
    (void)g;
    scaled_c_.assign(c.data<float>(), c.data<float>() + c.numel());
    for (float& v : scaled_c_) v *= beta_;
    return scaled_c_.data();
  }

  // kiln's own kernel of the op, for what oneDNN has no primitive for (K = 0). B is not read
  // there (it has no elements), so having absorbed it is no obstacle.
  Status run_own(KernelContext& ctx) {
    if (!own_) {
      const KernelDef* def = KernelRegistry::global().own(ctx.node.domain, ctx.node.op_type);
      if (!def) return ctx.error("no kiln kernel to run an empty product with");
      KILN_ASSIGN_OR_RETURN(own_, def->create(ctx.node, opset_));
    }
    return own_->run(ctx);
  }

  const std::string describe_;  // the node, for errors in prepare
  const int64_t opset_;
  const Op op_;
  const kiln_ops::Activation act_;
  const bool residual_first_, trans_b_;
  const float alpha_, beta_;
  memory packed_;  // op(B) · alpha in oneDNN's layout, when B is a constant 2-D (or 1-D) tensor
  Shape packed_dims_;
  // The parts of the last geometry and thread count; rebuilt when either changes.
  Geometry geometry_;
  int threads_ = 0;
  bool sliced_ = false;  // parts_ are row slices, run on kiln's pool
  std::vector<Part> parts_;
  std::vector<float> scaled_c_;
  std::unique_ptr<Kernel> own_;
};

template <Op kOp>
Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t opset) {
  kiln_ops::Activation act;
  if (is_fused(kOp)) {
    auto a = kiln_ops::read_activation(node, "activation", "activation_params");
    if (!a) return Status::error(node.describe() + ": " + a.status().message());
    act = *a;
  }
  return std::unique_ptr<Kernel>(std::make_unique<OneDnnMatMul>(node, opset, kOp, act));
}

// Float32 operands (A, B, C or bias, Z) and, for the fused ops, an expressible activation.
template <Op kOp>
bool accepts(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types) {
  const size_t count = kOp == Op::kMatMul ? 2 : kOp == Op::kGemm ? 3 : 4;
  return given_inputs_float32(node, types, count) &&
         (!is_fused(kOp) || activation_expressible(node));
}

const KernelRegistrar kMatMul("", "MatMul", "onednn_matmul", create<Op::kMatMul>, kName,
                              accepts<Op::kMatMul>);
const KernelRegistrar kGemm("", "Gemm", "onednn_matmul", create<Op::kGemm>, kName,
                            accepts<Op::kGemm>);
const KernelRegistrar kFusedGemm("ai.kiln", "FusedGemm", "onednn_matmul", create<Op::kFusedGemm>,
                                 kName, accepts<Op::kFusedGemm>);
const KernelRegistrar kFusedMatMul("ai.kiln", "FusedMatMul", "onednn_matmul",
                                   create<Op::kFusedMatMul>, kName, accepts<Op::kFusedMatMul>);

}  // namespace
}  // namespace kiln::backends::onednn
