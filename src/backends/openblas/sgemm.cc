// The OpenBLAS backend: float32 MatMul and Gemm through cblas_sgemm, from Debian's serial build
// of OpenBLAS (libopenblas-serial-dev). It takes only the nodes whose operand types are known
// float32 at compile time; kiln's own kernels run the rest (backends/backend.h).
//
// One call at a time, process-wide, on the calling thread. Debian's serial OpenBLAS (0.3.21) is
// built without USE_LOCKING, so its table of packing buffers is unlocked: two sgemm calls at
// once can take the same buffer and pack over each other. Measured here: 46 wrong products in
// 4000 made by two threads together, and Backends.OpenBlasGemmMatchesLoops failing 6 times in 30
// under ASan while kiln's pool ran column slices of one product concurrently. So the backend
// no longer slices a product over kiln's pool; on several threads the tuner's timings say
// whether it still pays.
#include <cblas.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <string>

#include "backends/backend.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/kernel.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln::backends::openblas {
namespace {

constexpr const char* kName = "openblas";

// kiln's GEMM arguments, which say the same as sgemm's (its bias, packed_b and epilogue unused).
using Sgemm = gemm::GemmF32Args;

void call(const Sgemm& g) {
  static std::mutex openblas_buffers;  // see the top of this file
  const std::lock_guard<std::mutex> one_call_at_a_time(openblas_buffers);
  // One row of C is a matrix-vector product, which sgemm would still pack B for (10x slower on
  // resnet50's classifier): C[1, n] = alpha * a · op(B), the vector a read with A's stride.
  if (g.m == 1) {
    const int a_stride = g.trans_a ? static_cast<int>(g.lda) : 1;
    if (g.trans_b)  // B is [n, k]: C = B a
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(g.n), static_cast<int>(g.k),
                  g.alpha, g.b, static_cast<int>(g.ldb), g.a, a_stride, g.beta, g.c, 1);
    else  // B is [k, n]: C = Bᵀ a
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(g.k), static_cast<int>(g.n), g.alpha,
                  g.b, static_cast<int>(g.ldb), g.a, a_stride, g.beta, g.c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
              g.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(g.m), static_cast<int>(g.n),
              static_cast<int>(g.k), g.alpha, g.a, static_cast<int>(g.lda), g.b,
              static_cast<int>(g.ldb), g.beta, g.c, static_cast<int>(g.ldc));
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
  Sgemm g;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.a = a.data<float>();
  g.lda = p.k;
  g.b = b.data<float>();
  g.ldb = p.n;
  g.c = yd;
  g.ldc = p.n;
  if (b.rank() <= 2 && a.rank() >= 1) {  // the batches are consecutive rows of A
    g.m = batches * p.m;
    call(g);
    return Status::ok();
  }
  for (int64_t i = 0; i < batches; ++i) {
    Sgemm gi = g;
    gi.a += p.a_offsets[i];
    gi.b += p.b_offsets[i];
    gi.c += i * p.m * p.n;
    call(gi);
  }
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
  Sgemm g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.a = a.data<float>();
  g.lda = a.dim(1);
  g.b = b.data<float>();
  g.ldb = b.dim(1);
  g.beta = has_c ? 1.0f : 0.0f;
  g.c = yd;
  g.ldc = n;
  call(g);
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
