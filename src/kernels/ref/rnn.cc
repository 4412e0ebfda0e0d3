// Reference recurrent layers: RNN, GRU (linear_before_reset) and LSTM (peepholes, input_forget),
// every direction and layout, activations with alpha/beta, clip, sequence_lens, initial states.
// Computes in double whatever the float type, one batch row and one time step at a time.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

enum class Cell { kRnn, kGru, kLstm };

struct Activation {
  std::string name;  // lower case
  double alpha = 0;
  double beta = 0;

  double operator()(double x) const {
    if (name == "sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (name == "tanh") return std::tanh(x);
    if (name == "relu") return x > 0 ? x : 0.0;
    if (name == "affine") return alpha * x + beta;
    if (name == "leakyrelu") return x >= 0 ? x : alpha * x;
    if (name == "thresholdedrelu") return x >= alpha ? x : 0.0;
    if (name == "scaledtanh") return alpha * std::tanh(beta * x);
    if (name == "hardsigmoid") return std::min(std::max(alpha * x + beta, 0.0), 1.0);
    if (name == "elu") return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
    if (name == "softsign") return x / (1.0 + std::fabs(x));
    if (name == "softplus") return std::log1p(std::exp(x));
    return x;
  }
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Default alpha/beta of an activation and how many of each it consumes from the attributes.
bool activation_defaults(const std::string& n, Activation* a, int* n_alpha, int* n_beta) {
  *n_alpha = 0;
  *n_beta = 0;
  a->name = n;
  if (n == "sigmoid" || n == "tanh" || n == "relu" || n == "softsign" || n == "softplus") return true;
  if (n == "affine") { a->alpha = 1; a->beta = 0; *n_alpha = 1; *n_beta = 1; return true; }
  if (n == "leakyrelu") { a->alpha = 0.01; *n_alpha = 1; return true; }
  if (n == "thresholdedrelu") { a->alpha = 1.0; *n_alpha = 1; return true; }
  if (n == "scaledtanh") { a->alpha = 1; a->beta = 1; *n_alpha = 1; *n_beta = 1; return true; }
  if (n == "hardsigmoid") { a->alpha = 0.2; a->beta = 0.5; *n_alpha = 1; *n_beta = 1; return true; }
  if (n == "elu") { a->alpha = 1.0; *n_alpha = 1; return true; }
  return false;
}

std::vector<double> load_all(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load_as_double(t.dtype(), t.raw_data(), i);
  return v;
}

Status run_recurrent(KernelContext& ctx, Cell cell) {
  const ir::Node& node = ctx.node;
  const int gates = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4;
  const int n_act = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 2 : 3;
  if (!ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2))
    return ctx.error("inputs X, W and R are required");
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor& R = ctx.input(2);
  const DType dt = X.dtype();
  if (!dtype_is_compute_float(dt)) return ctx.error(std::string("X must be a float tensor, got ") + dtype_name(dt));
  if (W.dtype() != dt || R.dtype() != dt) return ctx.error("W and R must have X's element type");
  if (X.rank() != 3) return ctx.error("X must have rank 3, got " + shape_str(X.shape()));
  if (W.rank() != 3 || R.rank() != 3)
    return ctx.error("W and R must have rank 3, got " + shape_str(W.shape()) + " and " + shape_str(R.shape()));

  const std::string direction = node.attr_string("direction", "forward");
  int dirs = 1;
  if (direction == "bidirectional") dirs = 2;
  else if (direction != "forward" && direction != "reverse")
    return ctx.error("direction must be forward, reverse or bidirectional, got '" + direction + "'");
  const bool reverse_only = direction == "reverse";
  const int64_t layout = node.attr_int("layout", 0);
  if (layout != 0 && layout != 1) return ctx.error("layout must be 0 or 1, got " + std::to_string(layout));
  const int64_t seq = layout == 0 ? X.dim(0) : X.dim(1);
  const int64_t batch = layout == 0 ? X.dim(1) : X.dim(0);
  const int64_t input_size = X.dim(2);
  int64_t hidden = node.attr_int("hidden_size", -1);
  if (hidden < 0) hidden = W.dim(1) / gates;  // the attribute is optional in principle
  if (W.dim(0) != dirs || W.dim(1) != gates * hidden || W.dim(2) != input_size)
    return ctx.error("W must have shape [" + std::to_string(dirs) + "," + std::to_string(gates * hidden) +
                     "," + std::to_string(input_size) + "], got " + shape_str(W.shape()));
  if (R.dim(0) != dirs || R.dim(1) != gates * hidden || R.dim(2) != hidden)
    return ctx.error("R must have shape [" + std::to_string(dirs) + "," + std::to_string(gates * hidden) +
                     "," + std::to_string(hidden) + "], got " + shape_str(R.shape()));

  // Optional inputs.
  std::vector<double> w = load_all(W), r = load_all(R);
  std::vector<double> b(static_cast<size_t>(dirs * 2 * gates * hidden), 0.0);
  if (ctx.has_input(3)) {
    const Tensor& B = ctx.input(3);
    if (B.dtype() != dt || B.shape() != Shape{dirs, 2 * gates * hidden})
      return ctx.error("B must have shape [" + std::to_string(dirs) + "," + std::to_string(2 * gates * hidden) +
                       "] and X's type, got " + shape_str(B.shape()));
    b = load_all(B);
  }
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (ctx.has_input(4)) {
    const Tensor& L = ctx.input(4);
    if (L.numel() != batch) return ctx.error("sequence_lens must have batch_size elements, got " + shape_str(L.shape()));
    KILN_ASSIGN_OR_RETURN(lens, read_int64s(L));
    for (int64_t v : lens)
      if (v < 0 || v > seq) return ctx.error("sequence_lens value " + std::to_string(v) + " outside [0, " + std::to_string(seq) + "]");
  }
  const Shape state_shape = layout == 0 ? Shape{dirs, batch, hidden} : Shape{batch, dirs, hidden};
  auto state_index = [&](int64_t d, int64_t bi, int64_t h) {
    return layout == 0 ? (d * batch + bi) * hidden + h : (bi * dirs + d) * hidden + h;
  };
  auto load_state = [&](size_t idx, const char* what, std::vector<double>* out) -> Status {
    out->assign(static_cast<size_t>(dirs * batch * hidden), 0.0);
    if (!ctx.has_input(idx)) return Status::ok();
    const Tensor& t = ctx.input(idx);
    if (t.dtype() != dt || t.shape() != state_shape)
      return ctx.error(std::string(what) + " must have shape " + shape_str(state_shape) + " and X's type, got " +
                       shape_str(t.shape()));
    std::vector<double> v = load_all(t);
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t h = 0; h < hidden; ++h) (*out)[(d * batch + bi) * hidden + h] = v[state_index(d, bi, h)];
    return Status::ok();
  };
  std::vector<double> h0, c0;
  KILN_RETURN_IF_ERROR(load_state(5, "initial_h", &h0));
  if (cell == Cell::kLstm) KILN_RETURN_IF_ERROR(load_state(6, "initial_c", &c0));
  std::vector<double> p(static_cast<size_t>(dirs * 3 * hidden), 0.0);
  if (cell == Cell::kLstm && ctx.has_input(7)) {
    const Tensor& P = ctx.input(7);
    if (P.dtype() != dt || P.shape() != Shape{dirs, 3 * hidden})
      return ctx.error("P must have shape [" + std::to_string(dirs) + "," + std::to_string(3 * hidden) + "], got " +
                       shape_str(P.shape()));
    p = load_all(P);
  }

  // Activations: n_act per direction, alphas/betas consumed in order by those that take them.
  std::vector<std::string> names = node.attr_strings("activations");
  if (names.empty()) {
    for (int d = 0; d < dirs; ++d) {
      if (cell == Cell::kRnn) names.push_back("tanh");
      else if (cell == Cell::kGru) { names.push_back("sigmoid"); names.push_back("tanh"); }
      else { names.push_back("sigmoid"); names.push_back("tanh"); names.push_back("tanh"); }
    }
  } else if (static_cast<int>(names.size()) == n_act && dirs == 2) {
    std::vector<std::string> twice = names;
    names.insert(names.end(), twice.begin(), twice.end());
  }
  if (static_cast<int>(names.size()) != n_act * dirs)
    return ctx.error("activations must list " + std::to_string(n_act * dirs) + " functions, got " +
                     std::to_string(names.size()));
  const std::vector<float> alphas = node.attr_floats("activation_alpha");
  const std::vector<float> betas = node.attr_floats("activation_beta");
  size_t ai = 0, bi_ = 0;
  std::vector<Activation> acts;
  for (const std::string& raw : names) {
    Activation a;
    int na = 0, nb = 0;
    if (!activation_defaults(lower(raw), &a, &na, &nb)) return ctx.error("unknown activation '" + raw + "'");
    if (na && ai < alphas.size()) a.alpha = alphas[ai++];
    if (nb && bi_ < betas.size()) a.beta = betas[bi_++];
    acts.push_back(a);
  }
  const bool has_clip = node.has_attr("clip");
  const double clip = node.attr_float("clip", 0.0f);
  if (has_clip && !(clip >= 0)) return ctx.error("clip must be non-negative");
  auto clipped = [&](double x) { return has_clip ? std::min(std::max(x, -clip), clip) : x; };
  const bool linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  const bool input_forget = node.attr_int("input_forget", 0) != 0;

  // Outputs, computed in double and stored at the end.
  const Shape y_shape = layout == 0 ? Shape{seq, dirs, batch, hidden} : Shape{batch, seq, dirs, hidden};
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(DType::kFloat64, y_shape));
  double* yd = y.data<double>();
  std::vector<double> hn(h0.size()), cn(c0.size());
  auto y_index = [&](int64_t t, int64_t d, int64_t bi, int64_t h) {
    return layout == 0 ? ((t * dirs + d) * batch + bi) * hidden + h : ((bi * seq + t) * dirs + d) * hidden + h;
  };
  auto x_at = [&](int64_t t, int64_t bi) -> int64_t {
    return layout == 0 ? (t * batch + bi) * input_size : (bi * seq + t) * input_size;
  };
  std::vector<double> xg(static_cast<size_t>(gates * hidden)), hg(static_cast<size_t>(gates * hidden));
  std::vector<double> hprev(static_cast<size_t>(hidden)), cprev(static_cast<size_t>(hidden));
  std::vector<double> hnew(static_cast<size_t>(hidden)), cnew(static_cast<size_t>(hidden));
  const std::vector<double> xv = load_all(X);

  for (int64_t d = 0; d < dirs; ++d) {
    const bool backward = reverse_only || d == 1;
    const double* wd = w.data() + d * gates * hidden * input_size;
    const double* rd = r.data() + d * gates * hidden * hidden;
    const double* wb = b.data() + d * 2 * gates * hidden;
    const double* rb = wb + gates * hidden;
    const double* pd = p.data() + d * 3 * hidden;
    const Activation* f = &acts[d * n_act];
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t h = 0; h < hidden; ++h) {
        hprev[h] = h0[(d * batch + bi) * hidden + h];
        if (cell == Cell::kLstm) cprev[h] = c0[(d * batch + bi) * hidden + h];
      }
      const int64_t len = lens[bi];
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = backward ? len - 1 - step : step;
        const double* x = xv.data() + x_at(t, bi);
        // xg = x W^T + Wb, hg = h R^T + Rb, for every gate row.
        for (int64_t g = 0; g < gates * hidden; ++g) {
          double sx = wb[g], sh = rb[g];
          for (int64_t k = 0; k < input_size; ++k) sx += x[k] * wd[g * input_size + k];
          for (int64_t k = 0; k < hidden; ++k) sh += hprev[k] * rd[g * hidden + k];
          xg[g] = sx;
          hg[g] = sh;
        }
        if (cell == Cell::kRnn) {
          for (int64_t h = 0; h < hidden; ++h) hnew[h] = f[0](clipped(xg[h] + hg[h]));
        } else if (cell == Cell::kGru) {
          // Gate order z, r, h. Without linear_before_reset the reset gate scales H before Rh.
          std::vector<double>& z = cnew;  // scratch (unused by GRU otherwise)
          z.resize(static_cast<size_t>(hidden));
          std::vector<double> rh(static_cast<size_t>(hidden));
          for (int64_t h = 0; h < hidden; ++h) {
            z[h] = f[0](clipped(xg[h] + hg[h]));
            rh[h] = f[0](clipped(xg[hidden + h] + hg[hidden + h]));
          }
          for (int64_t h = 0; h < hidden; ++h) {
            double pre;
            if (linear_before_reset) {
              pre = xg[2 * hidden + h] + rh[h] * hg[2 * hidden + h];
            } else {
              double s = rb[2 * hidden + h];
              for (int64_t k = 0; k < hidden; ++k) s += rh[k] * hprev[k] * rd[(2 * hidden + h) * hidden + k];
              pre = xg[2 * hidden + h] + s;
            }
            const double hh = f[1](clipped(pre));
            hnew[h] = (1.0 - z[h]) * hh + z[h] * hprev[h];
          }
        } else {
          // Gate order i, o, f, c; peepholes i, o, f.
          for (int64_t h = 0; h < hidden; ++h) {
            const double ig = f[0](clipped(xg[h] + hg[h] + pd[h] * cprev[h]));
            const double fg = input_forget ? 1.0 - ig
                                           : f[0](clipped(xg[2 * hidden + h] + hg[2 * hidden + h] + pd[2 * hidden + h] * cprev[h]));
            const double cg = f[1](clipped(xg[3 * hidden + h] + hg[3 * hidden + h]));
            const double c = fg * cprev[h] + ig * cg;
            const double og = f[0](clipped(xg[hidden + h] + hg[hidden + h] + pd[hidden + h] * c));
            cnew[h] = c;
            hnew[h] = og * f[2](c);
          }
          cprev = cnew;
        }
        hprev = hnew;
        for (int64_t h = 0; h < hidden; ++h) yd[y_index(t, d, bi, h)] = hprev[h];
      }
      for (int64_t h = 0; h < hidden; ++h) {
        hn[(d * batch + bi) * hidden + h] = hprev[h];
        if (cell == Cell::kLstm) cn[(d * batch + bi) * hidden + h] = cprev[h];
      }
    }
  }

  if (ctx.wants_output(0)) {
    KILN_ASSIGN_OR_RETURN(Tensor* out, ctx.make_output(0, dt, y_shape));
    for (int64_t i = 0; i < y.numel(); ++i) store_from_double(dt, out->raw_data(), i, yd[i]);
  }
  auto store_state = [&](size_t idx, const std::vector<double>& s) -> Status {
    KILN_ASSIGN_OR_RETURN(Tensor* out, ctx.make_output(idx, dt, state_shape));
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t h = 0; h < hidden; ++h)
          store_from_double(dt, out->raw_data(), state_index(d, bi, h), s[(d * batch + bi) * hidden + h]);
    return Status::ok();
  };
  if (ctx.wants_output(1)) KILN_RETURN_IF_ERROR(store_state(1, hn));
  if (cell == Cell::kLstm && ctx.wants_output(2)) KILN_RETURN_IF_ERROR(store_state(2, cn));
  return Status::ok();
}

Status rnn(KernelContext& ctx) { return run_recurrent(ctx, Cell::kRnn); }
Status gru(KernelContext& ctx) { return run_recurrent(ctx, Cell::kGru); }
Status lstm(KernelContext& ctx) { return run_recurrent(ctx, Cell::kLstm); }

}  // namespace

KILN_REGISTER_KERNEL("", "RNN", rnn);
KILN_REGISTER_KERNEL("", "GRU", gru);
KILN_REGISTER_KERNEL("", "LSTM", lstm);

}  // namespace kiln
