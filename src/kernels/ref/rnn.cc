// Reference recurrent layers: RNN, GRU (linear_before_reset) and LSTM (peepholes, input_forget),
// every direction and layout, activations with alpha/beta, clip, sequence_lens, initial states.
// Computes in double whatever the float type, one batch row and one time step at a time.
#include "kernels/ref/rnn.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {

double RecurrentActivation::operator()(double x) const {
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

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Default alpha/beta of an activation and how many of each it consumes from the attributes.
bool activation_defaults(const std::string& n, RecurrentActivation* a, int* n_alpha, int* n_beta) {
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

}  // namespace

Result<RecurrentSpec> parse_recurrent(KernelContext& ctx, RecurrentCell cell) {
  const ir::Node& node = ctx.node;
  RecurrentSpec s;
  s.cell = cell;
  s.gates = recurrent_gates(cell);
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
  if (direction == "bidirectional") s.dirs = 2;
  else if (direction != "forward" && direction != "reverse")
    return ctx.error("direction must be forward, reverse or bidirectional, got '" + direction + "'");
  s.reverse_only = direction == "reverse";
  s.layout = node.attr_int("layout", 0);
  if (s.layout != 0 && s.layout != 1) return ctx.error("layout must be 0 or 1, got " + std::to_string(s.layout));
  s.seq = s.layout == 0 ? X.dim(0) : X.dim(1);
  s.batch = s.layout == 0 ? X.dim(1) : X.dim(0);
  s.input_size = X.dim(2);
  s.hidden = node.attr_int("hidden_size", -1);
  if (s.hidden < 0) s.hidden = W.dim(1) / s.gates;  // the attribute is optional in principle
  const int64_t gh = s.gates * s.hidden;
  if (W.shape() != Shape{s.dirs, gh, s.input_size})
    return ctx.error("W must have shape " + shape_str(Shape{s.dirs, gh, s.input_size}) + ", got " + shape_str(W.shape()));
  if (R.shape() != Shape{s.dirs, gh, s.hidden})
    return ctx.error("R must have shape " + shape_str(Shape{s.dirs, gh, s.hidden}) + ", got " + shape_str(R.shape()));
  if (ctx.has_input(3)) {
    const Tensor& B = ctx.input(3);
    if (B.dtype() != dt || B.shape() != Shape{s.dirs, 2 * gh})
      return ctx.error("B must have shape " + shape_str(Shape{s.dirs, 2 * gh}) + " and X's type, got " + shape_str(B.shape()));
  }
  s.lens.assign(static_cast<size_t>(s.batch), s.seq);
  if (ctx.has_input(4)) {
    const Tensor& L = ctx.input(4);
    if (L.numel() != s.batch) return ctx.error("sequence_lens must have batch_size elements, got " + shape_str(L.shape()));
    KILN_ASSIGN_OR_RETURN(s.lens, read_int64s(L));
    for (int64_t v : s.lens)
      if (v < 0 || v > s.seq)
        return ctx.error("sequence_lens value " + std::to_string(v) + " outside [0, " + std::to_string(s.seq) + "]");
  }
  const Shape state = s.state_shape();
  const int last_state = cell == RecurrentCell::kLstm ? 6 : 5;
  for (int i = 5; i <= last_state; ++i)
    if (ctx.has_input(i) && (ctx.input(i).dtype() != dt || ctx.input(i).shape() != state))
      return ctx.error(std::string(i == 5 ? "initial_h" : "initial_c") + " must have shape " + shape_str(state) +
                       " and X's type, got " + shape_str(ctx.input(i).shape()));
  if (cell == RecurrentCell::kLstm && ctx.has_input(7)) {
    const Tensor& P = ctx.input(7);
    if (P.dtype() != dt || P.shape() != Shape{s.dirs, 3 * s.hidden})
      return ctx.error("P must have shape " + shape_str(Shape{s.dirs, 3 * s.hidden}) + ", got " + shape_str(P.shape()));
  }

  // Activations: acts_per_dir() per direction, alphas/betas consumed in order by those that take them.
  const int n_act = s.acts_per_dir();
  std::vector<std::string> names = node.attr_strings("activations");
  if (names.empty()) {
    for (int d = 0; d < s.dirs; ++d) {
      if (cell == RecurrentCell::kRnn) names.push_back("tanh");
      else if (cell == RecurrentCell::kGru) { names.push_back("sigmoid"); names.push_back("tanh"); }
      else { names.push_back("sigmoid"); names.push_back("tanh"); names.push_back("tanh"); }
    }
  } else if (static_cast<int>(names.size()) == n_act && s.dirs == 2) {
    std::vector<std::string> twice = names;
    names.insert(names.end(), twice.begin(), twice.end());
  }
  if (static_cast<int>(names.size()) != n_act * s.dirs)
    return ctx.error("activations must list " + std::to_string(n_act * s.dirs) + " functions, got " +
                     std::to_string(names.size()));
  const std::vector<float> alphas = node.attr_floats("activation_alpha");
  const std::vector<float> betas = node.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  for (const std::string& raw : names) {
    RecurrentActivation a;
    int na = 0, nb = 0;
    if (!activation_defaults(lower(raw), &a, &na, &nb)) return ctx.error("unknown activation '" + raw + "'");
    if (na && ai < alphas.size()) a.alpha = alphas[ai++];
    if (nb && bi < betas.size()) a.beta = betas[bi++];
    s.acts.push_back(a);
  }
  s.has_clip = node.has_attr("clip");
  s.clip = node.attr_float("clip", 0.0f);
  if (s.has_clip && !(s.clip >= 0)) return ctx.error("clip must be non-negative");
  s.linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  s.input_forget = node.attr_int("input_forget", 0) != 0;
  return s;
}

Status reference_recurrent(KernelContext& ctx, const RecurrentSpec& s) {
  const RecurrentCell cell = s.cell;
  const int gates = s.gates, dirs = s.dirs, n_act = s.acts_per_dir();
  const int64_t batch = s.batch, input_size = s.input_size, hidden = s.hidden;
  const DType dt = ctx.input(0).dtype();
  std::vector<double> w = load_all(ctx.input(1)), r = load_all(ctx.input(2));
  std::vector<double> b(static_cast<size_t>(dirs * 2 * gates * hidden), 0.0);
  if (ctx.has_input(3)) b = load_all(ctx.input(3));
  // A state input, reordered to [dirs, batch, hidden] whatever the layout.
  auto load_state = [&](size_t idx) {
    std::vector<double> out(static_cast<size_t>(dirs * batch * hidden), 0.0);
    if (!ctx.has_input(idx)) return out;
    const std::vector<double> v = load_all(ctx.input(idx));
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t h = 0; h < hidden; ++h) out[(d * batch + bi) * hidden + h] = v[s.state_offset(d, bi) + h];
    return out;
  };
  const std::vector<double> h0 = load_state(5);
  const std::vector<double> c0 = cell == RecurrentCell::kLstm ? load_state(6) : std::vector<double>{};
  std::vector<double> p(static_cast<size_t>(dirs * 3 * hidden), 0.0);
  if (cell == RecurrentCell::kLstm && ctx.has_input(7)) p = load_all(ctx.input(7));
  auto clipped = [&](double x) { return s.has_clip ? std::min(std::max(x, -s.clip), s.clip) : x; };

  // Outputs, computed in double and stored at the end.
  const Shape y_shape = s.y_shape();
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(DType::kFloat64, y_shape));
  double* yd = y.data<double>();
  std::vector<double> hn(h0.size()), cn(c0.size());
  std::vector<double> xg(static_cast<size_t>(gates * hidden)), hg(static_cast<size_t>(gates * hidden));
  std::vector<double> hprev(static_cast<size_t>(hidden)), cprev(static_cast<size_t>(hidden));
  std::vector<double> hnew(static_cast<size_t>(hidden)), cnew(static_cast<size_t>(hidden));
  std::vector<double> z(static_cast<size_t>(hidden)), rh(static_cast<size_t>(hidden));
  const std::vector<double> xv = load_all(ctx.input(0));

  for (int64_t d = 0; d < dirs; ++d) {
    const bool backward = s.backward(static_cast<int>(d));
    const double* wd = w.data() + d * gates * hidden * input_size;
    const double* rd = r.data() + d * gates * hidden * hidden;
    const double* wb = b.data() + d * 2 * gates * hidden;
    const double* rb = wb + gates * hidden;
    const double* pd = p.data() + d * 3 * hidden;
    const RecurrentActivation* f = &s.acts[d * n_act];
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t h = 0; h < hidden; ++h) {
        hprev[h] = h0[(d * batch + bi) * hidden + h];
        if (cell == RecurrentCell::kLstm) cprev[h] = c0[(d * batch + bi) * hidden + h];
      }
      const int64_t len = s.lens[bi];
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = backward ? len - 1 - step : step;
        const double* x = xv.data() + s.x_row(t, bi) * input_size;
        // xg = x W^T + Wb, hg = h R^T + Rb, for every gate row.
        for (int64_t g = 0; g < gates * hidden; ++g) {
          double sx = wb[g], sh = rb[g];
          for (int64_t k = 0; k < input_size; ++k) sx += x[k] * wd[g * input_size + k];
          for (int64_t k = 0; k < hidden; ++k) sh += hprev[k] * rd[g * hidden + k];
          xg[g] = sx;
          hg[g] = sh;
        }
        if (cell == RecurrentCell::kRnn) {
          for (int64_t h = 0; h < hidden; ++h) hnew[h] = f[0](clipped(xg[h] + hg[h]));
        } else if (cell == RecurrentCell::kGru) {
          // Gate order z, r, h. Without linear_before_reset the reset gate scales H before Rh.
          for (int64_t h = 0; h < hidden; ++h) {
            z[h] = f[0](clipped(xg[h] + hg[h]));
            rh[h] = f[0](clipped(xg[hidden + h] + hg[hidden + h]));
          }
          for (int64_t h = 0; h < hidden; ++h) {
            double pre;
            if (s.linear_before_reset) {
              pre = xg[2 * hidden + h] + rh[h] * hg[2 * hidden + h];
            } else {
              double sum = rb[2 * hidden + h];
              for (int64_t k = 0; k < hidden; ++k) sum += rh[k] * hprev[k] * rd[(2 * hidden + h) * hidden + k];
              pre = xg[2 * hidden + h] + sum;
            }
            const double hh = f[1](clipped(pre));
            hnew[h] = (1.0 - z[h]) * hh + z[h] * hprev[h];
          }
        } else {
          // Gate order i, o, f, c; peepholes i, o, f.
          for (int64_t h = 0; h < hidden; ++h) {
            const double ig = f[0](clipped(xg[h] + hg[h] + pd[h] * cprev[h]));
            const double fg = s.input_forget ? 1.0 - ig
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
        for (int64_t h = 0; h < hidden; ++h) yd[s.y_offset(t, d, bi) + h] = hprev[h];
      }
      for (int64_t h = 0; h < hidden; ++h) {
        hn[(d * batch + bi) * hidden + h] = hprev[h];
        if (cell == RecurrentCell::kLstm) cn[(d * batch + bi) * hidden + h] = cprev[h];
      }
    }
  }

  if (ctx.wants_output(0)) {
    KILN_ASSIGN_OR_RETURN(Tensor* out, ctx.make_output(0, dt, y_shape));
    for (int64_t i = 0; i < y.numel(); ++i) store_from_double(dt, out->raw_data(), i, yd[i]);
  }
  auto store_state = [&](size_t idx, const std::vector<double>& st) -> Status {
    KILN_ASSIGN_OR_RETURN(Tensor* out, ctx.make_output(idx, dt, s.state_shape()));
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t h = 0; h < hidden; ++h)
          store_from_double(dt, out->raw_data(), s.state_offset(d, bi) + h, st[(d * batch + bi) * hidden + h]);
    return Status::ok();
  };
  if (ctx.wants_output(1)) KILN_RETURN_IF_ERROR(store_state(1, hn));
  if (cell == RecurrentCell::kLstm && ctx.wants_output(2)) KILN_RETURN_IF_ERROR(store_state(2, cn));
  return Status::ok();
}

}  // namespace kiln
