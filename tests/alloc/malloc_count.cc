// Counts heap allocations: every malloc-family call goes through here to glibc's own allocator.
// Linked into the allocation test, or LD_PRELOADed into any program (scripts/count_allocs.sh);
// with KILN_MALLOC_COUNT_REPORT set, the totals are printed to stderr at exit.
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
// Relaxed: the counts are read when the program is quiet (after a run, at exit).
std::atomic<long long> g_calls{0}, g_bytes{0};
inline void count(size_t bytes) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(static_cast<long long>(bytes), std::memory_order_relaxed);
}

struct Reporter {
  ~Reporter() {
    if (std::getenv("KILN_MALLOC_COUNT_REPORT"))
      std::fprintf(stderr, "malloc_count: %lld calls, %lld bytes\n", g_calls.load(),
                   g_bytes.load());
  }
} g_reporter;
}  // namespace

extern "C" {

// Allocations (calls, bytes requested) since the program started, on every thread.
long long kiln_malloc_calls() { return g_calls.load(std::memory_order_relaxed); }
long long kiln_malloc_bytes() { return g_bytes.load(std::memory_order_relaxed); }

void* malloc(size_t n) {
  count(n);
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  count(n * size);
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  count(n);
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t align, size_t n) {
  count(n);
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) {
  count(n);
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  count(n);
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t n) {
  count(n);
  return __libc_memalign(4096, n);
}

}  // extern "C"
