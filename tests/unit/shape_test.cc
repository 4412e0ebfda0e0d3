// Shape (include/kiln/shape.h) behaves like the std::vector<int64_t> it replaced: every operation
// is run on both, side by side, inline (rank <= 8) and spilled to the heap, and the results
// compared.
#include "kiln/shape.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

namespace kiln {
namespace {

using Vec = std::vector<int64_t>;

void expect_same(const Shape& s, const Vec& v) {
  ASSERT_EQ(s.size(), v.size());
  EXPECT_EQ(s.empty(), v.empty());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(s[i], v[i]) << "at " << i;
  EXPECT_EQ(Vec(s.begin(), s.end()), v);
  EXPECT_EQ(static_cast<Vec>(s), v);
  EXPECT_TRUE(s == v);
  if (!v.empty()) {
    EXPECT_EQ(s.front(), v.front());
    EXPECT_EQ(s.back(), v.back());
    EXPECT_EQ(*s.data(), v.front());
  }
}

TEST(Shape, ConstructsLikeAVector) {
  expect_same(Shape(), Vec());
  expect_same(Shape{}, Vec{});
  expect_same(Shape{1, 3, 224, 224}, Vec{1, 3, 224, 224});
  expect_same(Shape(5), Vec(5));
  expect_same(Shape(3, 7), Vec(3, 7));
  expect_same(Shape(12, 2), Vec(12, 2));  // past the inline rank
  const Vec big{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  expect_same(Shape(big), big);
  expect_same(Shape(big.begin() + 2, big.end() - 1), Vec(big.begin() + 2, big.end() - 1));
  const Shape from_vec = Vec{4, 5};
  expect_same(from_vec, Vec{4, 5});
  const int32_t narrow[] = {2, -1, 9};
  expect_same(Shape(narrow, narrow + 3), Vec{2, -1, 9});
}

TEST(Shape, CopiesAndMovesInlineAndOnTheHeap) {
  for (const Vec& v : {Vec{1, 2, 3}, Vec{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}) {
    Shape a(v);
    Shape b = a;
    expect_same(b, v);
    Shape c = std::move(a);
    expect_same(c, v);
    expect_same(a, Vec{});  // NOLINT: moved-from is empty and usable
    a.push_back(42);
    expect_same(a, Vec{42});
    Shape d{9};
    d = c;
    expect_same(d, v);
    Shape e{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    e = std::move(d);
    expect_same(e, v);
    e = e;  // NOLINT: self-assignment keeps the dims
    expect_same(e, v);
    Shape f{7};
    swap(f, e);
    expect_same(f, v);
    expect_same(e, Vec{7});
  }
}

TEST(Shape, GrowsPastTheInlineRank) {
  Shape s;
  Vec v;
  for (int64_t i = 0; i < 40; ++i) {
    s.push_back(i * 3);
    v.push_back(i * 3);
    expect_same(s, v);
  }
  while (!v.empty()) {
    s.pop_back();
    v.pop_back();
    expect_same(s, v);
  }
  s.reserve(100);
  EXPECT_GE(s.capacity(), 100u);
  expect_same(s, Vec{});
}

TEST(Shape, EditsLikeAVector) {
  for (const Vec& start : {Vec{1, 2, 3}, Vec{1, 2, 3, 4, 5, 6, 7, 8}}) {
    Shape s(start);
    Vec v(start);
    s.insert(s.begin(), 9);
    v.insert(v.begin(), 9);
    expect_same(s, v);
    s.insert(s.end(), 2, 5);
    v.insert(v.end(), 2, 5);
    expect_same(s, v);
    s.insert(s.begin() + 2, {6, 6, 6});
    v.insert(v.begin() + 2, {6, 6, 6});
    expect_same(s, v);
    const Vec more{-1, -2};
    s.insert(s.begin() + 1, more.begin(), more.end());
    v.insert(v.begin() + 1, more.begin(), more.end());
    expect_same(s, v);
    const Vec part(v.begin() + 1, v.begin() + 4);
    s.insert(s.begin(), s.begin() + 1, s.begin() + 4);  // a range of its own dims
    v.insert(v.begin(), part.begin(), part.end());
    expect_same(s, v);
    s.erase(s.begin() + 1);
    v.erase(v.begin() + 1);
    expect_same(s, v);
    s.erase(s.begin(), s.begin() + 3);
    v.erase(v.begin(), v.begin() + 3);
    expect_same(s, v);
    s.resize(s.size() + 4, 8);
    v.resize(v.size() + 4, 8);
    expect_same(s, v);
    s.resize(2);
    v.resize(2);
    expect_same(s, v);
    s.assign(11, 4);
    v.assign(11, 4);
    expect_same(s, v);
    s.assign({3, 1});
    v.assign({3, 1});
    expect_same(s, v);
    s.clear();
    v.clear();
    expect_same(s, v);
  }
}

TEST(Shape, ComparesAndOrdersLikeAVector) {
  EXPECT_EQ(Shape({1, 2}), Shape({1, 2}));
  EXPECT_NE(Shape({1, 2}), Shape({1, 2, 3}));
  EXPECT_NE(Shape({1, 2}), Shape({2, 1}));
  EXPECT_TRUE(Shape({1, 2}) == Vec({1, 2}));
  EXPECT_TRUE(Vec({1, 2}) == Shape({1, 2}));
  EXPECT_TRUE(Shape({1, 2}) != Vec({1}));
  EXPECT_TRUE(Shape({1, 2}) < Shape({1, 3}));
  EXPECT_TRUE(Shape({1}) < Shape({1, 0}));
  std::map<Shape, int> by_shape{{Shape{2, 3}, 1}, {Shape{1}, 2}};
  EXPECT_EQ(by_shape.begin()->second, 2);
}

TEST(Shape, RanksUpToEightStayInline) {
  Shape s{1, 2, 3, 4, 5, 6, 7, 8};
  const int64_t* inline_data = s.data();
  Shape copy = s;
  EXPECT_NE(copy.data(), inline_data);
  EXPECT_EQ(s.capacity(), Shape::kInlineRank);
  s.push_back(9);  // spills
  EXPECT_NE(s.data(), inline_data);
  expect_same(s, Vec{1, 2, 3, 4, 5, 6, 7, 8, 9});
}

}  // namespace
}  // namespace kiln
