// Non-blocking operations (detwanTest / detwanWait / detwanRequestFree), detwanGroupEndAsync
// and detwanCommSplit.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "tests/collectives/comm/comm_util.h"

namespace detwan::collectives::testing {
namespace {

constexpr size_t kCount = 1000;

TEST(CapiAsync, NonBlockingRequestsWithTestAndWait) {
  const int n = 4;
  with_comms(RankSetup{two_sites(n)}, [&](int r, detwanComm_t& comm) {
    std::vector<int64_t> send(kCount, r + 1);
    std::vector<int64_t> sum(kCount, -1);
    std::vector<int64_t> bcast(kCount, -1);
    detwanRequest_t reduce_request = nullptr;
    detwanRequest_t bcast_request = nullptr;
    ASSERT_EQ(detwanIallReduce(send.data(), sum.data(), kCount, detwanInt64, detwanSum, comm,
                               &reduce_request),
              detwanSuccess)
        << detwanGetLastError(comm);
    ASSERT_EQ(detwanIbroadcast(send.data(), bcast.data(), kCount, detwanInt64, 2, comm,
                               &bcast_request),
              detwanSuccess)
        << detwanGetLastError(comm);
    ASSERT_NE(reduce_request, nullptr);
    // Poll the first with detwanTest until done (the operation runs on the executor thread).
    int done = 0;
    detwanResult_t tested = detwanInProgress;
    while (tested == detwanInProgress) {
      tested = detwanTest(reduce_request, &done);
      if (tested == detwanInProgress) {
        EXPECT_EQ(done, 0);
        std::this_thread::yield();
      }
    }
    EXPECT_EQ(tested, detwanSuccess) << detwanGetLastError(comm);
    EXPECT_EQ(done, 1);
    EXPECT_EQ(detwanWait(bcast_request, -1), detwanSuccess) << detwanGetLastError(comm);
    EXPECT_EQ(detwanRequestFree(reduce_request), detwanSuccess);
    EXPECT_EQ(detwanRequestFree(bcast_request), detwanSuccess);
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(sum[i], n * (n + 1) / 2);
      ASSERT_EQ(bcast[i], 3);
    }
    // Isend/Irecv pairs between neighbours, Ibarrier; freed without an explicit wait.
    std::vector<int32_t> out(kCount, r);
    std::vector<int32_t> in(kCount, -1);
    detwanRequest_t send_request = nullptr;
    detwanRequest_t recv_request = nullptr;
    detwanRequest_t barrier_request = nullptr;
    const int partner = r ^ 1;
    if (r % 2 == 0) {
      ASSERT_EQ(detwanIsend(out.data(), kCount, detwanInt32, partner, comm, &send_request),
                detwanSuccess);
      ASSERT_EQ(detwanIrecv(in.data(), kCount, detwanInt32, partner, comm, &recv_request),
                detwanSuccess);
    } else {
      ASSERT_EQ(detwanIrecv(in.data(), kCount, detwanInt32, partner, comm, &recv_request),
                detwanSuccess);
      ASSERT_EQ(detwanIsend(out.data(), kCount, detwanInt32, partner, comm, &send_request),
                detwanSuccess);
    }
    ASSERT_EQ(detwanIbarrier(comm, &barrier_request), detwanSuccess);
    EXPECT_EQ(detwanWait(recv_request, -1), detwanSuccess) << detwanGetLastError(comm);
    EXPECT_EQ(detwanRequestFree(send_request), detwanSuccess);
    EXPECT_EQ(detwanRequestFree(recv_request), detwanSuccess);
    EXPECT_EQ(detwanWait(barrier_request, -1), detwanSuccess);
    EXPECT_EQ(detwanRequestFree(barrier_request), detwanSuccess);
    for (int32_t v : in) ASSERT_EQ(v, partner);
  });
}

TEST(CapiAsync, GroupEndAsyncRunsRingAndCollective) {
  const int n = 3;
  with_comms(RankSetup{two_sites(n)}, [&](int r, detwanComm_t& comm) {
    std::vector<float> send(kCount, static_cast<float>(r));
    std::vector<float> from_prev(kCount, -1);
    std::vector<float> sum(kCount, -1);
    ASSERT_EQ(detwanGroupStart(), detwanSuccess);
    ASSERT_EQ(detwanGroupStart(), detwanSuccess);  // nesting
    ASSERT_EQ(detwanAllReduce(send.data(), sum.data(), kCount, detwanFloat32, detwanSum, comm),
              detwanSuccess);
    ASSERT_EQ(detwanGroupEnd(), detwanSuccess);  // inner end: nothing runs yet
    ASSERT_EQ(detwanRecv(from_prev.data(), kCount, detwanFloat32, (r + n - 1) % n, comm),
              detwanSuccess);
    ASSERT_EQ(detwanSend(send.data(), kCount, detwanFloat32, (r + 1) % n, comm), detwanSuccess);
    // a non-blocking call inside a group is a usage error
    detwanRequest_t inside = nullptr;
    EXPECT_EQ(detwanIbarrier(comm, &inside), detwanInvalidUsage);
    detwanRequest_t request = nullptr;
    ASSERT_EQ(detwanGroupEndAsync(&request), detwanSuccess) << detwanGetLastError(comm);
    ASSERT_NE(request, nullptr);
    EXPECT_EQ(detwanWait(request, -1), detwanSuccess) << detwanGetLastError(comm);
    EXPECT_EQ(detwanRequestFree(request), detwanSuccess);
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_FLOAT_EQ(sum[i], 3.0f);
      ASSERT_FLOAT_EQ(from_prev[i], static_cast<float>((r + n - 1) % n));
    }
  });
}

TEST(CapiAsync, SplitEvenOddAndNoColor) {
  const int n = 4;
  with_comms(RankSetup{two_sites(n)}, [&](int r, detwanComm_t& comm) {
    // even/odd, reversed by key: child rank order is by (key, parent rank)
    detwanComm_t child = nullptr;
    ASSERT_EQ(detwanCommSplit(comm, r % 2, -r, &child, nullptr), detwanSuccess)
        << detwanGetLastError(comm);
    ASSERT_NE(child, nullptr);
    int count = 0;
    int rank = -1;
    ASSERT_EQ(detwanCommCount(child, &count), detwanSuccess);
    ASSERT_EQ(detwanCommUserRank(child, &rank), detwanSuccess);
    EXPECT_EQ(count, 2);
    EXPECT_EQ(rank, r < 2 ? 1 : 0);  // parent 2 (key -2) before 0; 3 before 1
    int64_t value = r;
    int64_t sum = -1;
    ASSERT_EQ(detwanAllReduce(&value, &sum, 1, detwanInt64, detwanSum, child), detwanSuccess)
        << detwanGetLastError(child);
    EXPECT_EQ(sum, r % 2 == 0 ? 0 + 2 : 1 + 3);
    // the parent still works, interleaved with the child
    ASSERT_EQ(detwanAllReduce(&value, &sum, 1, detwanInt64, detwanSum, comm), detwanSuccess);
    EXPECT_EQ(sum, 6);
    EXPECT_EQ(detwanCommDestroy(child), detwanSuccess);

    // rank 3 opts out; rank 1 alone in color 1
    detwanComm_t second = nullptr;
    const int color = r == 3 ? DETWAN_SPLIT_NOCOLOR : r % 2;
    ASSERT_EQ(detwanCommSplit(comm, color, 0, &second, nullptr), detwanSuccess)
        << detwanGetLastError(comm);
    if (r == 3) {
      EXPECT_EQ(second, nullptr);
      return;
    }
    ASSERT_NE(second, nullptr);
    ASSERT_EQ(detwanCommCount(second, &count), detwanSuccess);
    EXPECT_EQ(count, r == 1 ? 1 : 2);
    ASSERT_EQ(detwanAllReduce(&value, &sum, 1, detwanInt64, detwanSum, second), detwanSuccess)
        << detwanGetLastError(second);
    EXPECT_EQ(sum, r == 1 ? 1 : 2);
    EXPECT_EQ(detwanCommDestroy(second), detwanSuccess);
  });
}

}  // namespace
}  // namespace detwan::collectives::testing
