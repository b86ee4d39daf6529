#pragma once
// A counting replacement of the global operator new/delete, for tests that prove a code path
// never allocates: read g_allocations before and after (g_allocated_bytes and
// g_largest_allocation_bytes say how much, for tests that bound it). Include it from exactly ONE
// source file of a test binary (it defines the replaceable functions, which must exist once per
// program).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

inline std::atomic<uint64_t> g_allocations{0};
inline std::atomic<uint64_t> g_allocated_bytes{0};
inline std::atomic<uint64_t> g_largest_allocation_bytes{0};  // a test may reset it to 0

inline void count_allocation(std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_allocated_bytes.fetch_add(size, std::memory_order_relaxed);
  uint64_t largest = g_largest_allocation_bytes.load(std::memory_order_relaxed);
  while (size > largest && !g_largest_allocation_bytes.compare_exchange_weak(
                               largest, size, std::memory_order_relaxed)) {
  }
}

// g++ 12 flags malloc/free inside a replaced operator new/delete when it inlines them into
// std::allocator (a known false positive, GCC bug 103993).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  count_allocation(size);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// Every other plain form too, so nothing allocated by a sanitizer's operator new (e.g. the
// nothrow new of std::stable_sort's buffer) is ever released by the free() above.
void* operator new[](std::size_t size) { return ::operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  count_allocation(size);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return ::operator new(size, tag);
}
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop
