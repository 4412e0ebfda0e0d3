// The OpenBLAS backend: float32 MatMul and Gemm through cblas_sgemm (Debian's libopenblas-dev,
// the pthread build). OpenBLAS runs its own threads: each call is given the session's thread
// count, and kiln's workers, idle meanwhile, yield their cores after a few microseconds
// (core/thread_pool.cc). It takes only the nodes whose operand types are known float32 at
// compile time; kiln's own kernels run the rest (backends/backend.h).
#include <cblas.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <string>

#include "backends/backend.h"
#include "core/thread_pool.h"
#include "kernels/kernel.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln::backends::openblas {
namespace {

constexpr const char* kName = "openblas";

void set_threads(const KernelContext& ctx) {
  const int want = ctx.pool ? ctx.pool->threads() : 1;
  if (openblas_get_num_threads() != want) openblas_set_num_threads(want);
}

// sgemm's dimensions are C ints.
Status check_int_sizes(const KernelContext& ctx, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d > std::numeric_limits<int>::max())
      return ctx.error("a dimension of " + std::to_string(d) +
                       " is too large for OpenBLAS's int sizes");
  return Status::ok();
}

Status check_float32(const KernelContext& ctx, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype() != DType::kFloat32)
      return ctx.error("the OpenBLAS kernel takes float32 inputs only, input " + std::to_string(i) +
                       " is " + dtype_name(ctx.input(i).dtype()));
  return Status::ok();
}

// MatMul: numpy matmul semantics (batches broadcast), one sgemm per batch, or one for all when B
// is a single matrix (the batches are then consecutive rows of A).
Status matmul(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("MatMul needs 2 inputs");
  KILN_RETURN_IF_ERROR(check_float32(ctx, 2));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  auto plan = plan_matmul(a.shape(), b.shape());
  if (!plan) return ctx.error(plan.status().message());
  const MatMulPlan& p = *plan;
  const int64_t batches = static_cast<int64_t>(p.a_offsets.size());
  KILN_RETURN_IF_ERROR(check_int_sizes(ctx, {batches * p.m, p.n, p.k}));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, p.out_shape));
  float* yd = y->data<float>();
  if (p.k == 0) std::fill(yd, yd + y->numel(), 0.0f);  // the empty sum
  if (p.m == 0 || p.n == 0 || p.k == 0) return Status::ok();
  set_threads(ctx);
  const float* ad = a.data<float>();
  const float* bd = b.data<float>();
  if (b.rank() <= 2 && a.rank() >= 1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(batches * p.m),
                static_cast<int>(p.n), static_cast<int>(p.k), 1.0f, ad, static_cast<int>(p.k), bd,
                static_cast<int>(p.n), 0.0f, yd, static_cast<int>(p.n));
    return Status::ok();
  }
  for (int64_t i = 0; i < batches; ++i)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(p.m),
                static_cast<int>(p.n), static_cast<int>(p.k), 1.0f, ad + p.a_offsets[i],
                static_cast<int>(p.k), bd + p.b_offsets[i], static_cast<int>(p.n), 0.0f,
                yd + i * p.m * p.n, static_cast<int>(p.n));
  return Status::ok();
}

// Gemm: Y = alpha * op(A) * op(B) + beta * C, C broadcast to [M, N] (unidirectionally).
Status gemm(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("Gemm needs A and B");
  KILN_RETURN_IF_ERROR(check_float32(ctx, 3));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool c_given = ctx.has_input(2) && ctx.input(2).defined();
  auto plan = plan_gemm(ctx.node, a.shape(), b.shape(), c_given ? &ctx.input(2).shape() : nullptr);
  if (!plan) return ctx.error(plan.status().message());
  const bool ta = plan->trans_a, tb = plan->trans_b;
  const float alpha = plan->alpha, beta = plan->beta;
  const int64_t m = plan->m, n = plan->n, k = plan->k;
  KILN_RETURN_IF_ERROR(check_int_sizes(ctx, {m, n, k, a.dim(1), b.dim(1)}));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, {m, n}));
  float* yd = y->data<float>();
  const bool has_c = c_given && beta != 0.0f;
  if (!has_c && k == 0) std::fill(yd, yd + y->numel(), 0.0f);  // the empty sum
  if (has_c) {  // Y = beta * C broadcast (plan_gemm checked it), then accumulated onto
    const Tensor& c = ctx.input(2);
    const Shape& cs = c.shape();
    const int64_t cr = cs.size() == 2 ? cs[0] : 1, cc = cs.empty() ? 1 : cs.back();
    const float* cd = c.data<float>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        yd[i * n + j] = beta * cd[(cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j)];
  }
  if (m == 0 || n == 0 || k == 0) return Status::ok();
  set_threads(ctx);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a.data<float>(),
              static_cast<int>(a.dim(1)), b.data<float>(), static_cast<int>(b.dim(1)),
              has_c ? 1.0f : 0.0f, yd, static_cast<int>(n));
  return Status::ok();
}

const VersionRegistrar kVersion(kName,
                                [] { return std::string("OpenBLAS ") + openblas_get_config(); });

// Both take a node whose given inputs are known to be float32 (sizes are checked at run time).
const KernelRegistrar kMatMul(
    "", "MatMul", "openblas_sgemm",
    [](const ir::Node&, int64_t) -> Result<std::unique_ptr<Kernel>> {
      return kernel_from_fn(matmul);
    },
    kName,
    [](const ir::Node& n, const std::vector<const ir::TypeInfo*>& t) {
      return given_inputs_float32(n, t, 2);
    });
const KernelRegistrar kGemm(
    "", "Gemm", "openblas_sgemm",
    [](const ir::Node&, int64_t) -> Result<std::unique_ptr<Kernel>> {
      return kernel_from_fn(gemm);
    },
    kName,
    [](const ir::Node& n, const std::vector<const ir::TypeInfo*>& t) {
      return given_inputs_float32(n, t, 3);
    });

}  // namespace
}  // namespace kiln::backends::openblas
