#pragma once
// A counting replacement of the global operator new/delete, for tests that prove a code path
// never allocates: read g_allocations before and after (g_allocated_bytes,
// g_largest_allocation_bytes and g_live_bytes say how much, for tests that bound it). Include it
// from exactly ONE source file of a test binary (it defines the replaceable functions, which
// must exist once per program).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <malloc.h>

inline std::atomic<uint64_t> g_allocations{0};
inline std::atomic<uint64_t> g_allocated_bytes{0};
inline std::atomic<uint64_t> g_largest_allocation_bytes{0};  // a test may reset it to 0
// Bytes held by live operator new allocations (malloc_usable_size: what the heap really holds).
inline std::atomic<int64_t> g_live_bytes{0};

inline void* counted_malloc(std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_allocated_bytes.fetch_add(size, std::memory_order_relaxed);
  uint64_t largest = g_largest_allocation_bytes.load(std::memory_order_relaxed);
  while (size > largest && !g_largest_allocation_bytes.compare_exchange_weak(
                               largest, size, std::memory_order_relaxed)) {
  }
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p != nullptr) {
    g_live_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  }
  return p;
}
inline void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  g_live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

// g++ 12 flags malloc/free inside a replaced operator new/delete when it inlines them into
// std::allocator (a known false positive, GCC bug 103993).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  if (void* p = counted_malloc(size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
// Every other plain form too, so nothing allocated by a sanitizer's operator new (e.g. the
// nothrow new of std::stable_sort's buffer) is ever released by the free() above.
void* operator new[](std::size_t size) { return ::operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return counted_malloc(size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return ::operator new(size, tag);
}
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }
#pragma GCC diagnostic pop
