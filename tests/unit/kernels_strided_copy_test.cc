// copy_strided (kernels/cpu/strided_copy.h), the engine of Slice, Transpose and Expand, against a
// plain loop over every output index: permutations (the tiled transpose), slices with steps of
// either sign, broadcasts (stride 0), size-1 dims, element types of 1, 8 and string size, one
// and two threads, small views and views large enough to be split over the pool.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>

#include "core/thread_pool.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel_util.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

// What the view must hold at output element `i` of `shape`.
int64_t source_of(int64_t i, const Shape& shape, int64_t offset, const Shape& strides) {
  int64_t off = offset;
  for (size_t d = shape.size(); d-- > 0;) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

template <typename T>
void check_view(const Tensor& src, int64_t offset, const Shape& out, const Shape& strides, ThreadPool* pool,
                const std::string& what) {
  Tensor dst = Tensor::make(src.dtype(), out).value();
  ASSERT_TRUE(copy_strided(src, offset, strides, &dst, pool).is_ok()) << what;
  for (int64_t i = 0; i < dst.numel(); ++i)
    ASSERT_EQ(dst.data<T>()[i], src.data<T>()[source_of(i, out, offset, strides)]) << what << " element " << i;
}

template <typename T>
Tensor iota(DType dt, const Shape& shape) {
  Tensor t = Tensor::make(dt, shape).value();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_same_v<T, std::string>) t.data<T>()[i] = "s" + std::to_string(i);
    else t.data<T>()[i] = static_cast<T>(i * 7 + 3);
  }
  return t;
}

template <typename T>
void check_type(DType dt) {
  std::mt19937 rng(11);
  ThreadPool two(2);
  for (int trial = 0; trial < 60; ++trial) {
    const bool big = trial % 10 == 9;
    const int rank = 1 + trial % 5;
    Shape in(rank);
    const int64_t big_dim[] = {0, 100000, 400, 60, 20, 12};  // ~100-250K elements
    for (int d = 0; d < rank; ++d) in[d] = big ? big_dim[rank] - static_cast<int64_t>(rng() % 3) : static_cast<int64_t>(1 + rng() % 6);
    const Tensor src = iota<T>(dt, in);
    const Shape st = strides_of(in);
    ThreadPool* pool = trial % 2 ? &two : nullptr;
    const std::string what = std::string(dtype_name(dt)) + " trial " + std::to_string(trial) + " input " + shape_str(in);

    // A transpose: a random permutation of the input's strides.
    std::vector<int> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    Shape out(rank), strides(rank);
    for (int d = 0; d < rank; ++d) {
      out[d] = in[perm[d]];
      strides[d] = st[perm[d]];
    }
    check_view<T>(src, 0, out, strides, pool, what + " transpose");

    // A slice: each axis from a start with a step of 1..3 either way.
    int64_t offset = 0;
    for (int d = 0; d < rank; ++d) {
      const int64_t step = static_cast<int64_t>(1 + rng() % 3) * (rng() % 2 ? -1 : 1);
      const int64_t pick = static_cast<int64_t>(rng() % in[d]);
      const int64_t start = step > 0 ? pick : in[d] - 1 - pick;
      const int64_t room = step > 0 ? in[d] - start : start + 1;
      out[d] = (room + std::abs(step) - 1) / std::abs(step);
      offset += start * st[d];
      strides[d] = step * st[d];
    }
    check_view<T>(src, offset, out, strides, pool, what + " slice");

    // A broadcast: each dim of size 1 in the source grows, stride 0.
    for (int d = 0; d < rank; ++d) {
      const bool grow = rng() % 2;
      out[d] = grow ? static_cast<int64_t>(1 + rng() % 5) : in[d];
      strides[d] = grow ? 0 : st[d];
    }
    check_view<T>(src, 0, out, strides, pool, what + " broadcast");
  }
}

TEST(StridedCopy, MatchesIndexLoop) {
  check_type<float>(DType::kFloat32);
  check_type<int8_t>(DType::kInt8);
  check_type<int32_t>(DType::kInt32);
  check_type<int64_t>(DType::kInt64);
  check_type<std::string>(DType::kString);
}

// The tiled path: transposes whose sides are not multiples of the 8x8 register block or the
// tile, and one big 2-D transpose (a single row after collapsing) that the pool splits along
// its contiguous side.
TEST(StridedCopy, TransposeTiles) {
  ThreadPool two(2);
  for (Shape in : {Shape{37, 53}, Shape{3, 300, 17}, Shape{1, 64, 1, 8}, Shape{93, 3139},
                   Shape{2, 16, 9, 40}}) {
    const Tensor src = iota<float>(DType::kFloat32, in);
    const Shape st = strides_of(in);
    Shape out(in.rbegin(), in.rend()), strides(st.rbegin(), st.rend());
    check_view<float>(src, 0, out, strides, &two, "reversed " + shape_str(in));
  }
}

// Byte planes into channels-last pixels (NCHW -> NHWC of an 8-bit image: 2 to 4 planes go 16
// pixels at a time through byte shuffles), pixel counts not multiples of 16, one and two threads.
TEST(StridedCopy, BytePlanesIntoPixels) {
  ThreadPool two(2);
  for (Shape in : {Shape{1, 3, 224, 224}, Shape{2, 2, 5, 37}, Shape{1, 4, 7, 9}, Shape{1, 3, 1, 17}, Shape{2, 3, 4, 4}})
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
      const Tensor src = iota<uint8_t>(DType::kUInt8, in);
      const Shape st = strides_of(in);
      check_view<uint8_t>(src, 0, {in[0], in[2], in[3], in[1]}, {st[0], st[2], st[3], st[1]}, pool,
                          "to channels-last " + shape_str(in));
    }
}

// Constant Pad (a fill, then a memcpy per kept row) against a plain loop: pads and crops on
// different axes, a fill value, int64 as well as float.
TEST(ConstantPad, FillAndKeptRowsMatchAPlainLoop) {
  const Shape xs = {2, 3, 5, 4};
  const std::vector<int64_t> pads = {0, 1, -2, 3, 1, -1, 2, -1};  // begins, then ends
  for (const DType t : {DType::kFloat32, DType::kInt64}) {
    test::Builder b(13);
    b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(t, xs), ""});
    b.m.graph.initializers["pads"] = test::int64s(pads);
    Tensor v = Tensor::make(t, {}).value();
    if (t == DType::kFloat32) v.data<float>()[0] = 7.5f;
    else v.data<int64_t>()[0] = -9;
    b.m.graph.initializers["value"] = v;
    b.add("Pad", {"x", "pads", "value"}, {"y"});
    b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(t), ""});
    Tensor x = Tensor::make(t, xs).value();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (t == DType::kFloat32) x.data<float>()[i] = static_cast<float>(i);
      else x.data<int64_t>()[i] = i;
    }
    const std::vector<Value> out = test::run_model(b.m, {x});
    ASSERT_EQ(out.size(), 1u);
    const Tensor& y = out[0].tensor;
    Shape ys(4);
    for (int d = 0; d < 4; ++d) ys[d] = xs[d] + pads[d] + pads[4 + d];
    ASSERT_EQ(y.shape(), ys);
    int64_t k = 0;
    for (int64_t a = 0; a < ys[0]; ++a)
      for (int64_t c = 0; c < ys[1]; ++c)
        for (int64_t h = 0; h < ys[2]; ++h)
          for (int64_t w = 0; w < ys[3]; ++w, ++k) {
            const int64_t src[4] = {a - pads[0], c - pads[1], h - pads[2], w - pads[3]};
            bool inside = true;
            for (int d = 0; d < 4; ++d) inside = inside && src[d] >= 0 && src[d] < xs[d];
            const int64_t at = ((src[0] * xs[1] + src[1]) * xs[2] + src[2]) * xs[3] + src[3];
            const double want = inside ? static_cast<double>(at) : (t == DType::kFloat32 ? 7.5 : -9.0);
            const double got = t == DType::kFloat32 ? y.data<float>()[k] : static_cast<double>(y.data<int64_t>()[k]);
            ASSERT_EQ(got, want) << dtype_name(t) << " element " << k;
          }
  }
}

}  // namespace
}  // namespace kiln
