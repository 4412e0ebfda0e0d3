// kiln's kernels of RNN, GRU and LSTM in float32 with their default activations (any clip,
// peepholes, input_forget, layout, sequence_lens, initial states): the input projection of the
// whole sequence is one packed GEMM per direction, the recurrence one small packed GEMM per step
// (a GEMV at batch 1) followed by the gates fused into one vector pass over the row, and the two
// directions of a bidirectional layer run on two threads at once. Weights dequantized from 8 bits
// (ONNX Runtime's DynamicQuantizeLSTM, kiln quantize) run from their codes against 16-bit
// activations (coded_rows.h). Everything else (other float types, other activations) runs the
// double reference (kernels/ref/rnn.h), the oracle the tests compare this against.
#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/rnn/coded_rows.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/gemm_f32.h"
#include "kernels/ref/rnn.h"

namespace kiln {
namespace {

// Above this many bytes of R a direction's steps are split over the threads (see run_fast).
constexpr int64_t kStepWeightsPerCore = 1 << 20;

// The weights of one direction packed for the GEMMs: W (the input projection, K = input_size)
// and R (the recurrence, K = hidden), or their codes instead when they have them; GRU's R in two
// parts, its z and r gates and its h gate, since the h gate's product waits for the reset gate.
struct DirectionWeights {
  gemm::PackedMatrix w, r, r_h;
  rnn::CodedRows w_codes, r_codes, r_h_codes;
};

// The cells' default activations, the ones the fused gates compute, by activations a direction.
const char* const kDefaultActs[3][3] = {{"tanh"}, {"sigmoid", "tanh"}, {"sigmoid", "tanh", "tanh"}};

// Whether every activation is the cell's default.
bool default_activations(const RecurrentSpec& s) {
  for (size_t i = 0; i < s.acts.size(); ++i)
    if (s.acts[i].name != kDefaultActs[s.acts_per_dir() - 1][i % s.acts_per_dir()]) return false;
  return true;
}

Result<std::vector<DirectionWeights>> pack_weights(const Tensor& W, const Tensor& R, const RecurrentSpec& s) {
  const int64_t h = s.hidden, gh = s.gates * h, in = s.input_size;
  std::vector<DirectionWeights> out(static_cast<size_t>(s.dirs));
  for (int d = 0; d < s.dirs; ++d) {
    const float* w = W.data<float>() + d * gh * in;
    const float* r = R.data<float>() + d * gh * h;
    DirectionWeights& p = out[d];
    p.w_codes = rnn::code_rows(w, gh, in);
    if (p.w_codes.empty()) p.w = gemm::PackedMatrix::pack_b(w, in, true, in, gh);
    const bool gru = s.cell == RecurrentCell::kGru;
    const int64_t rows = gru ? 2 * h : gh;  // GRU: its z and r gates, then its h gate apart
    p.r_codes = rnn::code_rows(r, rows, h);
    if (gru && !p.r_codes.empty()) {
      p.r_h_codes = rnn::code_rows(r + 2 * h * h, h, h);
      if (p.r_h_codes.empty()) p.r_codes = {};  // both parts from codes, or neither
    }
    if (p.r_codes.empty()) {
      p.r = gemm::PackedMatrix::pack_b(r, h, true, h, rows);
      if (gru) p.r_h = gemm::PackedMatrix::pack_b(r + 2 * h * h, h, true, h, h);
    }
    if ((p.w.empty() && p.w_codes.empty()) || (p.r.empty() && p.r_codes.empty()) ||
        (gru && p.r_h.empty() && p.r_h_codes.empty()))
      return Status::error("out of memory packing the recurrent weights");
  }
  return out;
}

// Loops over n floats eight at a time: f(i, Whole{}) for whole chunks, f(i, mask) for the last
// partial one (masked stores are slow on AMD, so only the tail takes them).
struct Whole {};
template <typename F>
inline void for_lanes(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) f(i, Whole{});
  if (i < n) f(i, vec::tail_mask_avx2(static_cast<int>(n - i)));
}
inline __m256 load(const float* p, Whole) { return _mm256_loadu_ps(p); }
inline void store(float* p, Whole, __m256 v) { _mm256_storeu_ps(p, v); }
inline __m256 load(const float* p, __m256i m) { return _mm256_maskload_ps(p, m); }
inline void store(float* p, __m256i m, __m256 v) { _mm256_maskstore_ps(p, m, v); }

// The pre-activation clamp; an unset clip is infinite. The bound is the first operand so that
// NaN passes through (x86 min/max return the second operand when either is NaN).
struct Clip {
  __m256 lo, hi;
  __m256 operator()(__m256 x) const { return _mm256_min_ps(hi, _mm256_max_ps(lo, x)); }
};

// The scratch of one direction, and what its steps read.
struct Direction {
  const RecurrentSpec* s;
  int d;
  const DirectionWeights* weights;
  const float* gx;        // [seq * batch, gates * hidden]: x W^T + biases, rows in X's order
  const float* r_bias_h;  // GRU with linear_before_reset: Rb of the h gate, else null
  const float* peep;      // LSTM: [3 * hidden] peepholes i, o, f (zeros when P is absent)
  float* h;               // [batch, hidden]
  float* c;               // [batch, hidden], LSTM
  float* gh;              // [batch, gates * hidden]: h R^T
  float* rh;              // [batch, hidden], GRU: r * h, then the h gate's product
  float* y;               // Y, or null
};

void lstm_row(const RecurrentSpec& s, const Clip& clip, const float* gx, const float* gh, const float* peep,
              float* h, float* c) {
  const int64_t n = s.hidden;
  const __m256 one = _mm256_set1_ps(1.0f);
  for_lanes(n, [&](int64_t i, auto m) {
    const __m256 c0 = load(c + i, m);
    auto pre = [&](int gate) { return _mm256_add_ps(load(gx + gate * n + i, m), load(gh + gate * n + i, m)); };
    const __m256 ig = vec::sigmoid_avx2(clip(_mm256_fmadd_ps(load(peep + i, m), c0, pre(0))));
    const __m256 fg = s.input_forget ? _mm256_sub_ps(one, ig)
                                     : vec::sigmoid_avx2(clip(_mm256_fmadd_ps(load(peep + 2 * n + i, m), c0, pre(2))));
    const __m256 cg = vec::tanh_avx2(clip(pre(3)));
    const __m256 c1 = _mm256_fmadd_ps(fg, c0, _mm256_mul_ps(ig, cg));
    const __m256 og = vec::sigmoid_avx2(clip(_mm256_fmadd_ps(load(peep + n + i, m), c1, pre(1))));
    store(c + i, m, c1);
    store(h + i, m, _mm256_mul_ps(og, vec::tanh_avx2(c1)));
  });
}

void rnn_row(const RecurrentSpec& s, const Clip& clip, const float* gx, const float* gh, float* h) {
  for_lanes(s.hidden, [&](int64_t i, auto m) {
    store(h + i, m, vec::tanh_avx2(clip(_mm256_add_ps(load(gx + i, m), load(gh + i, m)))));
  });
}

// GRU, first half: z into gh's z slot, r * h (or r alone, with linear_before_reset) into rh.
void gru_gates(const RecurrentSpec& s, const Clip& clip, const float* gx, float* gh, const float* h, float* rh) {
  const int64_t n = s.hidden;
  for_lanes(n, [&](int64_t i, auto m) {
    const __m256 z = vec::sigmoid_avx2(clip(_mm256_add_ps(load(gx + i, m), load(gh + i, m))));
    const __m256 r = vec::sigmoid_avx2(clip(_mm256_add_ps(load(gx + n + i, m), load(gh + n + i, m))));
    store(gh + i, m, z);
    store(rh + i, m, s.linear_before_reset ? r : _mm256_mul_ps(r, load(h + i, m)));
  });
}

// GRU, second half: hh_lin is (r * h) R_h^T, or h R_h^T + Rb_h with linear_before_reset (then
// scaled by r, which rh holds).
void gru_update(const RecurrentSpec& s, const Clip& clip, const float* gx, const float* z_slot,
                const float* hh_lin, const float* rh, float* h) {
  const int64_t n = s.hidden;
  const __m256 one = _mm256_set1_ps(1.0f);
  for_lanes(n, [&](int64_t i, auto m) {
    __m256 lin = load(hh_lin + i, m);
    if (s.linear_before_reset) lin = _mm256_mul_ps(load(rh + i, m), lin);
    const __m256 hh = vec::tanh_avx2(clip(_mm256_add_ps(load(gx + 2 * n + i, m), lin)));
    const __m256 z = load(z_slot + i, m);
    store(h + i, m, _mm256_fmadd_ps(z, load(h + i, m), _mm256_mul_ps(_mm256_sub_ps(one, z), hh)));
  });
}

// Every step of one direction on the calling thread, each step's h R^T over `pool` when given.
void run_direction(const Direction& r, ThreadPool* pool) {
  const RecurrentSpec& s = *r.s;
  const int64_t n = s.hidden, gates_n = s.gates * n;
  const float inf = std::numeric_limits<float>::infinity();
  const float bound = s.has_clip ? static_cast<float>(s.clip) : inf;
  const Clip clip{_mm256_set1_ps(-bound), _mm256_set1_ps(bound)};
  const int64_t steps = *std::max_element(s.lens.begin(), s.lens.end());
  const bool gru = s.cell == RecurrentCell::kGru;
  for (int64_t step = 0; step < steps; ++step) {
    if (!r.weights->r_codes.empty())
      rnn::coded_product(r.weights->r_codes, r.h, s.batch, n, nullptr, r.gh, r.weights->r_codes.n);
    else
      gemm_f32_prepacked(false, s.batch, 1.0f, r.h, n, r.weights->r, 0.0f, r.gh, r.weights->r.n(), nullptr, nullptr,
                         pool);
    auto time_of = [&](int64_t b) { return s.backward(r.d) ? s.lens[b] - 1 - step : step; };
    if (gru) {
      const int64_t gru_n = 2 * n;
      for (int64_t b = 0; b < s.batch; ++b)
        if (step < s.lens[b])
          gru_gates(s, clip, r.gx + s.x_row(time_of(b), b) * gates_n, r.gh + b * gru_n, r.h + b * n, r.rh + b * n);
      // The h gate's product, into gh's r slots (read already): h R_h^T or (r * h) R_h^T.
      float* lin = r.gh + n;  // row b's h-gate product at gh + b * 2n + n, strided
      const float* a = s.linear_before_reset ? r.h : r.rh;
      if (!r.weights->r_h_codes.empty())
        rnn::coded_product(r.weights->r_h_codes, a, s.batch, n, r.r_bias_h, lin, gru_n);
      else
        gemm_f32_prepacked(false, s.batch, 1.0f, a, n, r.weights->r_h, 0.0f, lin, gru_n, r.r_bias_h, nullptr, nullptr);
      for (int64_t b = 0; b < s.batch; ++b)
        if (step < s.lens[b])
          gru_update(s, clip, r.gx + s.x_row(time_of(b), b) * gates_n, r.gh + b * gru_n, lin + b * gru_n,
                     r.rh + b * n, r.h + b * n);
    }
    for (int64_t b = 0; b < s.batch; ++b) {
      if (step >= s.lens[b]) continue;
      const int64_t t = time_of(b);
      float* h = r.h + b * n;
      const float* gx = r.gx + s.x_row(t, b) * gates_n;
      if (s.cell == RecurrentCell::kLstm) lstm_row(s, clip, gx, r.gh + b * gates_n, r.peep, h, r.c + b * n);
      else if (s.cell == RecurrentCell::kRnn) rnn_row(s, clip, gx, r.gh + b * gates_n, h);
      if (r.y) std::memcpy(r.y + s.y_offset(t, r.d, b), h, sizeof(float) * n);
    }
  }
}

class RecurrentKernel : public Kernel {
 public:
  explicit RecurrentKernel(RecurrentCell cell) : cell_(cell) {}

  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>& absorbed) override {
    (void)absorbed;  // the reference may still need W and R (another X type at run time)
    if (constants.size() < 3 || !constants[1] || !constants[2]) return Status::ok();
    const Tensor &W = *constants[1], &R = *constants[2];
    if (W.dtype() != DType::kFloat32 || R.dtype() != DType::kFloat32 || W.rank() != 3 || R.rank() != 3)
      return Status::ok();
    RecurrentSpec s;
    s.cell = cell_;
    s.gates = recurrent_gates(cell_);
    s.dirs = static_cast<int>(W.dim(0));
    s.input_size = W.dim(2);
    s.hidden = R.dim(2);
    if (W.dim(1) != s.gates * s.hidden || R.shape() != Shape{s.dirs, s.gates * s.hidden, s.hidden} ||
        s.hidden == 0 || s.input_size == 0)
      return Status::ok();  // run() reports the shapes
    KILN_ASSIGN_OR_RETURN(packed_, pack_weights(W, R, s));
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    KILN_ASSIGN_OR_RETURN(RecurrentSpec s, parse_recurrent(ctx, cell_));
    if (ctx.input(0).dtype() != DType::kFloat32 || !default_activations(s)) return reference_recurrent(ctx, s);
    if (s.seq == 0 || s.batch == 0 || s.hidden == 0 || s.input_size == 0)
      return reference_recurrent(ctx, s);  // empty: nothing to pack
    std::vector<DirectionWeights> local;
    const std::vector<DirectionWeights>* weights = &packed_;
    if (packed_.empty()) {  // W or R computed at run time
      KILN_ASSIGN_OR_RETURN(local, pack_weights(ctx.input(1), ctx.input(2), s));
      weights = &local;
    }
    return run_fast(ctx, s, *weights);
  }

 private:
  Status run_fast(KernelContext& ctx, const RecurrentSpec& s, const std::vector<DirectionWeights>& weights) const {
    const int64_t n = s.hidden, gates_n = s.gates * n, rows = s.seq * s.batch;
    const bool gru = s.cell == RecurrentCell::kGru, lstm = s.cell == RecurrentCell::kLstm;
    // One buffer per calling thread: per direction the projections, the states, the step's
    // products and two biases.
    const int64_t per_dir = rows * gates_n + s.batch * (3 * n + gates_n) + gates_n + 4 * n;
    thread_local std::vector<float> scratch;
    if (static_cast<int64_t>(scratch.size()) < per_dir * s.dirs) scratch.resize(static_cast<size_t>(per_dir * s.dirs));

    const bool full = std::all_of(s.lens.begin(), s.lens.end(), [&](int64_t l) { return l == s.seq; });
    float* y = nullptr;
    if (ctx.wants_output(0)) {  // rows past a sequence's length stay zero
      KILN_ASSIGN_OR_RETURN(Tensor * t, full ? ctx.make_output_for_overwrite(0, DType::kFloat32, s.y_shape())
                                             : ctx.make_output(0, DType::kFloat32, s.y_shape()));
      y = t->data<float>();
    }
    const float* bias = ctx.has_input(3) ? ctx.input(3).data<float>() : nullptr;
    const float* peep = lstm && ctx.has_input(7) ? ctx.input(7).data<float>() : nullptr;
    std::vector<Direction> dirs(static_cast<size_t>(s.dirs));
    for (int d = 0; d < s.dirs; ++d) {
      float* base = scratch.data() + d * per_dir;
      float* gx = base;
      float* w_bias = gx + rows * gates_n;
      float* r_bias_h = w_bias + gates_n;
      float* p = r_bias_h + n;
      Direction& r = dirs[d];
      r = {&s, d, &weights[d], gx, nullptr, p, p + 3 * n, nullptr, nullptr, nullptr, y};
      r.c = r.h + s.batch * n;
      r.gh = r.c + s.batch * n;
      r.rh = r.gh + s.batch * gates_n;
      // Wb + Rb, except GRU's h gate with linear_before_reset, whose Rb goes inside the reset.
      std::fill(w_bias, w_bias + gates_n + n, 0.0f);
      if (bias) {
        const float* wb = bias + d * 2 * gates_n;
        const float* rb = wb + gates_n;
        for (int64_t j = 0; j < gates_n; ++j)
          w_bias[j] = wb[j] + (gru && s.linear_before_reset && j >= 2 * n ? 0.0f : rb[j]);
        if (gru && s.linear_before_reset) std::copy(rb + 2 * n, rb + 3 * n, r_bias_h);
      }
      if (gru && s.linear_before_reset) r.r_bias_h = r_bias_h;
      if (peep) std::copy(peep + d * 3 * n, peep + (d + 1) * 3 * n, p);
      else std::fill(p, p + 3 * n, 0.0f);
      for (int64_t b = 0; b < s.batch; ++b) {
        auto init = [&](size_t input, float* state) {
          if (ctx.has_input(input)) std::copy_n(ctx.input(input).data<float>() + s.state_offset(d, b), n, state + b * n);
          else std::fill(state + b * n, state + (b + 1) * n, 0.0f);
        };
        init(5, r.h);
        if (lstm) init(6, r.c);
      }
      // The input projection of every step at once.
      const float* x = ctx.input(0).data<float>();
      if (!weights[d].w_codes.empty())
        rnn::coded_product(weights[d].w_codes, x, rows, s.input_size, w_bias, gx, gates_n, ctx.pool);
      else
        gemm_f32_prepacked(false, rows, 1.0f, x, s.input_size, weights[d].w, 0.0f, gx, gates_n, w_bias, nullptr,
                           ctx.pool);
    }

    // The directions on threads of their own, unless one direction's float R is too big for a
    // core's L2: then they run one after the other, each step's product split over the threads,
    // so each thread rereads only its share of R (bidirectional LSTM of hidden 512, R 4 MiB a
    // direction). Coded R (a quarter of the bytes) keeps a direction a thread.
    const bool share_steps = ctx.pool && weights[0].r_codes.empty() && weights[0].r.bytes() > kStepWeightsPerCore;
    if (ctx.pool && s.dirs > 1 && !share_steps) {
      if (weights[0].r_codes.empty()) {
        gemm::GemmF32Args step;  // the step GEMMs' packing buffers, sized on every thread first
        step.m = s.batch;
        step.n = weights[0].r.n();
        step.k = n;
        step.packed_b = &weights[0].r;
        gemm::reserve_single_thread_scratch(step, ctx.pool);
      }
      ctx.pool->parallel_for(s.dirs, 1, [&](int64_t d0, int64_t d1) {
        for (int64_t d = d0; d < d1; ++d) run_direction(dirs[d], nullptr);
      });
    } else {
      for (const Direction& r : dirs) run_direction(r, share_steps ? ctx.pool : nullptr);
    }

    auto store_state = [&](size_t output, bool cell_state) -> Status {
      KILN_ASSIGN_OR_RETURN(Tensor * t, ctx.make_output_for_overwrite(output, DType::kFloat32, s.state_shape()));
      for (int d = 0; d < s.dirs; ++d)
        for (int64_t b = 0; b < s.batch; ++b)
          std::copy_n((cell_state ? dirs[d].c : dirs[d].h) + b * n, n, t->data<float>() + s.state_offset(d, b));
      return Status::ok();
    };
    if (ctx.wants_output(1)) KILN_RETURN_IF_ERROR(store_state(1, false));
    if (lstm && ctx.wants_output(2)) KILN_RETURN_IF_ERROR(store_state(2, true));
    return Status::ok();
  }

  const RecurrentCell cell_;
  std::vector<DirectionWeights> packed_;  // per direction, when W and R are float32 constants
};

template <RecurrentCell kCell>
Result<std::unique_ptr<Kernel>> create(const ir::Node&, int64_t) {
  return std::unique_ptr<Kernel>(std::make_unique<RecurrentKernel>(kCell));
}

const KernelRegistrar kRnn("", "RNN", "f32_fused_gates", create<RecurrentCell::kRnn>);
const KernelRegistrar kGru("", "GRU", "f32_fused_gates", create<RecurrentCell::kGru>);
const KernelRegistrar kLstm("", "LSTM", "f32_fused_gates", create<RecurrentCell::kLstm>);

}  // namespace
// float32 with the cells' default activations; the rest runs the double reference.
static bool recurrent_fast(const FastPathQuery& q, int acts_per_dir) {
  if (!float32_input(q)) return false;
  const std::vector<std::string> names = q.node.attr_strings("activations");
  for (size_t i = 0; i < names.size(); ++i) {
    std::string n = names[i];
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (n != kDefaultActs[acts_per_dir - 1][i % acts_per_dir]) return false;
  }
  return true;
}
KILN_REGISTER_FAST_PATH("", "RNN", [](const FastPathQuery& q) { return recurrent_fast(q, 1); });
KILN_REGISTER_FAST_PATH("", "GRU", [](const FastPathQuery& q) { return recurrent_fast(q, 2); });
KILN_REGISTER_FAST_PATH("", "LSTM", [](const FastPathQuery& q) { return recurrent_fast(q, 3); });

}  // namespace kiln
