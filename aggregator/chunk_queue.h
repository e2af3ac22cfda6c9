// ChunkQueue<T>: a timeline's records in arrival order, kept in 16 KiB
// chunks.
//
// std::deque's (libstdc++) blocks are 512 bytes: four spans, 21 cost marks.
// A step of 1M events fills some 170k blocks (500k spans, 1M cost marks),
// each a malloc while the frames are taken and a free when the step is done;
// in 16 KiB chunks the aggregator took a 1M-event step 7-11 % faster here
// (aggregator_bench, medians of 7, 1 and 4 recording threads, one core and
// two). A queue that holds anything holds
// at least one chunk, and memory is touched only as it fills.
//
// The subset of std::deque the timeline uses, with the same meaning:
// push_back, emplace_back, front, back, pop_front, operator[], size, empty,
// clear, random-access iterators, insert(pos, value) and erase(first, last).
// Erasing at the front frees whole chunks and moves nothing; elsewhere the
// elements after the gap move down, as in std::deque. Iterators and
// references are invalidated by what invalidates std::deque's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <iterator>
#include <memory>
#include <type_traits>
#include <utility>

namespace rlscope {

template <typename T>
class ChunkQueue {
 public:
  static constexpr size_t kChunkBytes = 16384;
  static constexpr size_t kPerChunk = sizeof(T) >= kChunkBytes ? 1 : kChunkBytes / sizeof(T);

  template <bool kConst>
  class Iter {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = std::conditional_t<kConst, const T*, T*>;
    using reference = std::conditional_t<kConst, const T&, T&>;
    using Queue = std::conditional_t<kConst, const ChunkQueue, ChunkQueue>;

    Iter() = default;
    Iter(Queue* q, size_t i) : q_(q), i_(i) {}
    // An iterator converts to a const_iterator, as std::deque's does.
    template <bool kOther, typename = std::enable_if_t<kConst && !kOther>>
    Iter(const Iter<kOther>& o) : q_(o.queue()), i_(o.index()) {}  // NOLINT(google-explicit-constructor)

    reference operator*() const { return (*q_)[i_]; }
    pointer operator->() const { return &(*q_)[i_]; }
    reference operator[](difference_type n) const { return (*q_)[i_ + n]; }
    Iter& operator++() {
      ++i_;
      return *this;
    }
    Iter operator++(int) {
      Iter t = *this;
      ++i_;
      return t;
    }
    Iter& operator--() {
      --i_;
      return *this;
    }
    Iter operator--(int) {
      Iter t = *this;
      --i_;
      return t;
    }
    Iter& operator+=(difference_type n) {
      i_ += n;
      return *this;
    }
    Iter& operator-=(difference_type n) {
      i_ -= n;
      return *this;
    }
    Iter operator+(difference_type n) const { return Iter(q_, i_ + n); }
    friend Iter operator+(difference_type n, Iter it) { return it + n; }
    Iter operator-(difference_type n) const { return Iter(q_, i_ - n); }
    // Against an iterator or a const_iterator of the same queue.
    template <bool K>
    difference_type operator-(const Iter<K>& o) const {
      return static_cast<difference_type>(i_) - static_cast<difference_type>(o.index());
    }
    template <bool K>
    bool operator==(const Iter<K>& o) const {
      return i_ == o.index();
    }
    template <bool K>
    bool operator!=(const Iter<K>& o) const {
      return i_ != o.index();
    }
    template <bool K>
    bool operator<(const Iter<K>& o) const {
      return i_ < o.index();
    }
    template <bool K>
    bool operator>(const Iter<K>& o) const {
      return i_ > o.index();
    }
    template <bool K>
    bool operator<=(const Iter<K>& o) const {
      return i_ <= o.index();
    }
    template <bool K>
    bool operator>=(const Iter<K>& o) const {
      return i_ >= o.index();
    }
    size_t index() const { return i_; }
    Queue* queue() const { return q_; }

   private:
    Queue* q_ = nullptr;
    size_t i_ = 0;  // from the queue's front
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;
  using value_type = T;

  ChunkQueue() = default;
  ChunkQueue(const ChunkQueue& o) {
    for (const T& v : o) push_back(v);
  }
  ChunkQueue& operator=(const ChunkQueue& o) {
    if (this != &o) {
      clear();
      for (const T& v : o) push_back(v);
    }
    return *this;
  }
  ChunkQueue(ChunkQueue&& o) noexcept { Swap(o); }
  ChunkQueue& operator=(ChunkQueue&& o) noexcept {
    if (this != &o) {
      clear();
      Swap(o);
    }
    return *this;
  }
  ~ChunkQueue() {
    clear();
    for (T* c : chunks_) Free(c);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return *Slot(i); }
  const T& operator[](size_t i) const { return *Slot(i); }
  T& front() { return *Slot(0); }
  const T& front() const { return *Slot(0); }
  T& back() { return *Slot(size_ - 1); }
  const T& back() const { return *Slot(size_ - 1); }
  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, size_); }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, size_); }

  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  template <typename... A>
  T& emplace_back(A&&... args) {
    if (first_ + size_ == chunks_.size() * kPerChunk) chunks_.push_back(Allocate());
    T* slot = Slot(size_);
    ::new (static_cast<void*>(slot)) T(std::forward<A>(args)...);
    ++size_;
    return *slot;
  }

  void pop_front() {
    Slot(0)->~T();
    ++first_;
    --size_;
    if (size_ == 0) {
      first_ = 0;  // the chunk stays for what comes next
    } else if (first_ == kPerChunk) {
      Free(chunks_.front());
      chunks_.pop_front();
      first_ = 0;
    }
  }

  void clear() { EraseFront(size_); }

  // Inserts before `pos`; returns an iterator to the new element.
  iterator insert(const_iterator pos, const T& v) {
    const size_t at = pos.index();
    emplace_back(v);
    std::rotate(begin() + static_cast<std::ptrdiff_t>(at), end() - 1, end());
    return begin() + static_cast<std::ptrdiff_t>(at);
  }

  // Erases [first, last); returns an iterator to what followed.
  iterator erase(const_iterator first, const_iterator last) {
    const size_t a = first.index(), b = last.index();
    if (a == b) return begin() + static_cast<std::ptrdiff_t>(a);
    if (a == 0) {
      EraseFront(b);
      return begin();
    }
    std::move(begin() + static_cast<std::ptrdiff_t>(b), end(), begin() + static_cast<std::ptrdiff_t>(a));
    EraseBack(b - a);
    return begin() + static_cast<std::ptrdiff_t>(a);
  }

 private:
  static T* Allocate() { return std::allocator<T>().allocate(kPerChunk); }
  static void Free(T* c) { std::allocator<T>().deallocate(c, kPerChunk); }
  T* Slot(size_t i) const {
    const size_t at = first_ + i;
    return chunks_[at / kPerChunk] + at % kPerChunk;
  }
  void Swap(ChunkQueue& o) noexcept {
    chunks_.swap(o.chunks_);
    std::swap(first_, o.first_);
    std::swap(size_, o.size_);
  }
  // The first n elements, their whole chunks freed (one kept when all go).
  void EraseFront(size_t n) {
    for (size_t i = 0; i < n; ++i) Slot(i)->~T();
    const size_t whole = (first_ + n) / kPerChunk;
    const bool all = n == size_;
    const size_t freed = all ? (chunks_.empty() ? 0 : chunks_.size() - 1) : whole;
    for (size_t c = 0; c < freed; ++c) {
      Free(chunks_.front());
      chunks_.pop_front();
    }
    size_ -= n;
    first_ = all ? 0 : (first_ + n) % kPerChunk;
  }
  // The last n elements; chunks past the new end are freed.
  void EraseBack(size_t n) {
    for (size_t i = size_ - n; i < size_; ++i) Slot(i)->~T();
    size_ -= n;
    const size_t need = size_ == 0 ? 1 : (first_ + size_ + kPerChunk - 1) / kPerChunk;
    while (chunks_.size() > need) {
      Free(chunks_.back());
      chunks_.pop_back();
    }
    if (size_ == 0) first_ = 0;
  }

  std::deque<T*> chunks_;  // each kPerChunk slots; the first's live ones from first_
  size_t first_ = 0;       // the front element's slot in chunks_.front()
  size_t size_ = 0;
};

}  // namespace rlscope
