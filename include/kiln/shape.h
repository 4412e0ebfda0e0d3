// Shape: the dims of a tensor, a small vector of int64_t that keeps up to kInlineRank dims inline
// and only goes to the heap beyond, so that making, copying and reshaping tensors in a
// steady-state run allocates nothing. It offers the subset of std::vector the code uses and
// converts to and from std::vector<int64_t> implicitly, so either can be passed where the other
// is wanted.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <vector>

namespace kiln {

class Shape {
 public:
  // Ranks up to this stay inline; every model kiln has seen uses at most 6.
  static constexpr size_t kInlineRank = 8;

  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Shape() noexcept = default;
  explicit Shape(size_t n) { resize(n); }
  Shape(size_t n, int64_t value) { assign(n, value); }
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  template <std::input_iterator It>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT: implicit
  Shape(const Shape& other) { assign(other.begin(), other.end()); }
  Shape(Shape&& other) noexcept { take(other); }
  ~Shape() { release(); }

  Shape& operator=(const Shape& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  Shape& operator=(const std::vector<int64_t>& dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }

  // A copy as a std::vector (allocates): for code and APIs that want one.
  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT
  std::vector<int64_t> to_vector() const { return *this; }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }
  static constexpr size_t max_size() noexcept { return size_t{1} << 31; }

  int64_t* data() noexcept { return heap_ ? heap_ : inline_; }
  const int64_t* data() const noexcept { return heap_ ? heap_ : inline_; }
  int64_t& operator[](size_t i) noexcept { return data()[i]; }
  const int64_t& operator[](size_t i) const noexcept { return data()[i]; }
  int64_t& at(size_t i) {
    if (i >= size_) throw std::out_of_range("Shape::at");
    return data()[i];
  }
  const int64_t& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("Shape::at");
    return data()[i];
  }
  int64_t& front() noexcept { return data()[0]; }
  const int64_t& front() const noexcept { return data()[0]; }
  int64_t& back() noexcept { return data()[size_ - 1]; }
  const int64_t& back() const noexcept { return data()[size_ - 1]; }

  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size_; }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size_; }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  void reserve(size_t n) {
    if (n > capacity_) grow_to(n);
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = static_cast<uint32_t>(n);
  }
  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    clear();
    if constexpr (std::forward_iterator<It>) {  // one copy, no per-dim capacity checks
      const size_t n = static_cast<size_t>(std::distance(first, last));
      // The grown buffer itself, not data(): g++ cannot tell which data() returns, and warns.
      std::copy(first, last, n > capacity_ ? grow_to(n) : data());
      size_ = static_cast<uint32_t>(n);
    } else {
      for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
    }
  }
  void assign(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }

  void push_back(int64_t v) {
    if (size_ == capacity_) grow_to(size_t{capacity_} * 2);
    data()[size_++] = v;
  }
  int64_t& emplace_back(int64_t v) {
    push_back(v);
    return back();
  }
  void pop_back() noexcept { --size_; }

  iterator insert(const_iterator pos, int64_t v) { return insert(pos, size_t{1}, v); }
  iterator insert(const_iterator pos, size_t n, int64_t v) {
    const size_t at = open_gap(pos, n);
    std::fill(data() + at, data() + at + n, v);
    return data() + at;
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    // Copied first: the range may be this shape's own dims, which the gap moves.
    const Shape items(first, last);
    const size_t at = open_gap(pos, items.size());
    std::copy(items.begin(), items.end(), data() + at);
    return data() + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> dims) {
    return insert(pos, dims.begin(), dims.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - begin());
    const size_t n = static_cast<size_t>(last - first);
    std::copy(data() + at + n, end(), data() + at);
    size_ -= static_cast<uint32_t>(n);
    return data() + at;
  }
  void swap(Shape& other) noexcept {
    Shape tmp(std::move(other));
    other = std::move(*this);
    *this = std::move(tmp);
  }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend std::strong_ordering operator<=>(const Shape& a, const Shape& b) noexcept {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  // Moves `other`'s dims here (this holds nothing) and leaves it empty and inline.
  void take(Shape& other) noexcept {
    size_ = other.size_;
    capacity_ = other.capacity_;
    heap_ = other.heap_;
    if (!heap_) std::copy_n(other.inline_, std::min<size_t>(size_, kInlineRank), inline_);
    other.heap_ = nullptr;
    other.size_ = 0;
    other.capacity_ = kInlineRank;
  }
  void release() noexcept {
    delete[] heap_;
    heap_ = nullptr;
    capacity_ = kInlineRank;
  }
  // Storage for at least n dims (the current ones kept); returns it.
  int64_t* grow_to(size_t n) {
    if (n > max_size()) throw std::length_error("Shape: rank too large");
    n = std::max(n, size_t{kInlineRank} * 2);
    int64_t* grown = new int64_t[n];
    std::copy(begin(), end(), grown);
    delete[] heap_;
    heap_ = grown;
    capacity_ = static_cast<uint32_t>(n);
    return grown;
  }
  // Makes room for n dims before `pos`; returns the index of the first.
  size_t open_gap(const_iterator pos, size_t n) {
    const size_t at = static_cast<size_t>(pos - begin());
    reserve(size_ + n);
    std::copy_backward(data() + at, end(), end() + n);
    size_ += static_cast<uint32_t>(n);
    return at;
  }

  uint32_t size_ = 0;
  uint32_t capacity_ = kInlineRank;
  int64_t inline_[kInlineRank];
  int64_t* heap_ = nullptr;  // null while the dims fit inline_
};

inline void swap(Shape& a, Shape& b) noexcept { a.swap(b); }

}  // namespace kiln
