// ThreadPool: every index covered exactly once, concurrent callers on one pool, nested calls,
// on_every_thread, the process-wide shared pool, and an idle pool that sleeps instead of spinning.
#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "kiln/session.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

// Runs parallel_for(n, grain) and checks each index was visited exactly once.
void expect_each_index_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LE(b, e);
    ASSERT_LE(e, n);
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, EachIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 100003})
      for (int64_t grain : {1, 3, 1000}) expect_each_index_once(pool, n, grain);
  }
}

TEST(ThreadPool, ManyTinyJobsBackToBack) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 20000; ++rep)
    pool.parallel_for(2, 1, [&](int64_t, int64_t e) { sum.fetch_add(e); });
  EXPECT_EQ(sum.load(), 20000 * (1 + 2));  // chunks [0, 1) and [1, 2)
}

// Two threads call parallel_for on one pool at once: one owns the workers, the other runs
// inline; both get every index.
TEST(ThreadPool, ConcurrentCallersOnOnePool) {
  ThreadPool pool(3);
  auto caller = [&](int64_t seed, int64_t* out) {
    int64_t total = 0;
    for (int rep = 0; rep < 300; ++rep) {
      const int64_t n = 50 + (seed * 31 + rep * 17) % 500;
      std::vector<int64_t> v(n, 0);
      pool.parallel_for(n, 4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) v[i] = i * seed;
      });
      const int64_t want = seed * n * (n - 1) / 2;
      if (std::accumulate(v.begin(), v.end(), int64_t{0}) != want) return;  // *out stays short
      total += n;
    }
    *out = total;
  };
  int64_t got1 = 0, got2 = 0, want1 = 0, want2 = 0;
  for (int rep = 0; rep < 300; ++rep) {
    want1 += 50 + (3 * 31 + rep * 17) % 500;
    want2 += 50 + (5 * 31 + rep * 17) % 500;
  }
  std::thread t1(caller, 3, &got1), t2(caller, 5, &got2);
  t1.join();
  t2.join();
  EXPECT_EQ(got1, want1);
  EXPECT_EQ(got2, want2);
}

// Each thread starts on its own share of a loop; a thread that finishes early takes what is left
// of the others'. Here the caller stalls in its first chunk, so the worker must run the caller's
// unclaimed chunks as well as its own: well over half of the loop.
TEST(ThreadPool, IdleThreadTakesAStalledThreadsChunks) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int64_t> by_worker{0};
  std::atomic<bool> stalled{false};
  const int64_t n = 1024;
  pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() != caller) {
      by_worker.fetch_add(e - b);
    } else if (!stalled.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  EXPECT_GT(by_worker.load(), n / 2 + n / 8);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(40 * 30);
  pool.parallel_for(40, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(30, 1, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) hits[i * 30 + j].fetch_add(1);
      });
  });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

// on_every_thread reaches each of the pool's threads exactly once (where kernels size their
// thread-local scratch); from inside a task, where the workers are taken, only the calling thread.
TEST(ThreadPool, OnEveryThreadRunsOnceOnEachThread) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 20; ++round) {
      std::mutex mu;
      std::set<std::thread::id> ids;
      int calls = 0;
      EXPECT_TRUE(pool.on_every_thread([&] {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
        ++calls;
      }));
      EXPECT_EQ(calls, threads);
      EXPECT_EQ(ids.size(), static_cast<size_t>(threads));
    }
    std::atomic<int> inner{0}, reached_all{0};
    pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        if (pool.on_every_thread([&] { inner.fetch_add(1); })) reached_all.fetch_add(1);
    });
    EXPECT_EQ(inner.load(), 8);
    EXPECT_EQ(reached_all.load(), threads == 1 ? 8 : 0);
  }
}

TEST(ThreadPool, SharedPoolIsOneInstance) {
  auto a = ThreadPool::shared(), b = ThreadPool::shared();
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->threads(), ThreadPool::default_threads());
  expect_each_index_once(*a, 1000, 1);
}

// A session asking for one thread a core gets the shared pool; another count, a pool of its own.
TEST(ThreadPool, WithThreadsSharesThePoolOfOneThreadACore) {
  const int cores = ThreadPool::default_threads();
  EXPECT_EQ(ThreadPool::with_threads(0).get(), ThreadPool::shared().get());
  EXPECT_EQ(ThreadPool::with_threads(cores).get(), ThreadPool::shared().get());
  auto own = ThreadPool::with_threads(cores + 1);
  EXPECT_NE(own.get(), ThreadPool::shared().get());
  EXPECT_EQ(own->threads(), cores + 1);
}

// Two sessions made with the default options share the process-wide pool and run at the same
// time from two threads; each gets what it gets alone.
TEST(ThreadPool, SessionsShareThePoolConcurrently) {
  test::Builder b;
  b.input("x", {2, 16, 20, 20});
  b.conv("x", "c1", 16, 16);
  b.add("Relu", {"c1"}, {"r"});
  b.conv("r", "y", 16, 8);
  b.output("y");
  const Tensor x = b.random({2, 16, 20, 20});
  auto model = std::make_shared<const ir::Model>(b.m);
  SessionOptions one;
  one.threads = 1;
  auto alone = Session::create(model, one);
  ASSERT_TRUE(alone.is_ok()) << alone.status().message();
  auto want = (*alone)->run({Value::of(x)});
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  auto s1 = Session::create(model), s2 = Session::create(model);
  ASSERT_TRUE(s1.is_ok() && s2.is_ok());
  EXPECT_EQ((*s1)->threads(), ThreadPool::default_threads());
  std::atomic<int> mismatches{0}, runs{0};
  auto loop = [&](Session* s) {
    for (int rep = 0; rep < 50; ++rep) {
      auto got = s->run({Value::of(x)});
      if (!got.is_ok()) {
        ++mismatches;
        continue;
      }
      const Tensor& g = (*got)[0].tensor;
      const Tensor& w = (*want)[0].tensor;
      bool same = g.shape() == w.shape();
      for (int64_t i = 0; same && i < w.numel(); ++i)
        same = std::fabs(g.data<float>()[i] - w.data<float>()[i]) <= 1e-5f;
      mismatches += !same;
      ++runs;
    }
  };
  std::thread t1(loop, s1->get()), t2(loop, s2->get());
  t1.join();
  t2.join();
  EXPECT_EQ(runs.load(), 100);
  EXPECT_EQ(mismatches.load(), 0);
}

double process_cpu_seconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

// After work, the workers spin briefly and then sleep: 200 ms of idleness costs the whole process
// (this pool's 3 workers, and any other test's idle pools) far less than one busy thread would.
TEST(ThreadPool, IdlePoolSleeps) {
  ThreadPool pool(4);
  std::atomic<int64_t> sink{0};
  for (int rep = 0; rep < 2000; ++rep)
    pool.parallel_for(8, 1, [&](int64_t b, int64_t e) { sink += e - b; });
  EXPECT_EQ(sink.load(), 2000 * 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin
  const double c0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double used = process_cpu_seconds() - c0;
  EXPECT_LT(used, 0.04) << "CPU seconds used by an idle pool in 200 ms";
}

}  // namespace
}  // namespace kiln
