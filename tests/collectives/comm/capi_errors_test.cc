// Errors through the C API: configuration validation, bad arguments (InvalidArgument plus a
// message naming the argument), usage errors, a peer that vanishes, an operation timeout.
#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/version.h"
#include "tests/collectives/comm/comm_util.h"

namespace detwan::collectives::testing {
namespace {

std::string last_error() { return detwanGetLastError(nullptr); }

TEST(CapiErrors, VersionAndErrorStrings) {
  int version = 0;
  ASSERT_EQ(detwanGetVersion(&version), detwanSuccess);
  EXPECT_EQ(version, DETWAN_VERSION_CODE);
  // The C API's version is the project's (both generated from meson.build).
  EXPECT_EQ(std::string_view(DETWAN_VERSION_STRING), common::kVersion);
  EXPECT_EQ(version, common::kVersionMajor * 10000 + common::kVersionMinor * 100 +
                         common::kVersionPatch);
  EXPECT_EQ(detwanGetVersion(nullptr), detwanInvalidArgument);
  EXPECT_NE(last_error().find("version"), std::string::npos);
  EXPECT_STREQ(detwanGetErrorString(detwanTimeout), "timeout");
  EXPECT_STREQ(detwanGetErrorString(static_cast<detwanResult_t>(77)), "unknown detwanResult_t");
}

TEST(CapiErrors, ConfigValidation) {
  const detwanUniqueId id{};  // never reached: the config is checked first
  detwanComm_t comm = nullptr;
  detwanConfig_t config;
  detwanConfigInit(&config);
  EXPECT_EQ(config.size, sizeof(detwanConfig_t));
  EXPECT_EQ(config.deterministic, -1);

  config.size = sizeof(detwanConfig_t) - 8;  // an older, smaller struct
  EXPECT_EQ(detwanCommInitRankConfig(&comm, 1, id, 0, &config), detwanInvalidArgument);
  EXPECT_NE(last_error().find("config.size"), std::string::npos) << last_error();
  EXPECT_EQ(comm, nullptr);

  detwanConfigInit(&config);
  config.algorithm = static_cast<detwanAlgorithm_t>(9);
  EXPECT_EQ(detwanCommInitRankConfig(&comm, 1, id, 0, &config), detwanInvalidArgument);
  EXPECT_NE(last_error().find("config.algorithm"), std::string::npos) << last_error();

  detwanConfigInit(&config);
  config.timeout_ms = -5;
  EXPECT_EQ(detwanCommInitRankConfig(&comm, 1, id, 0, &config), detwanInvalidArgument);
  EXPECT_NE(last_error().find("timeout_ms"), std::string::npos) << last_error();

  detwanConfigInit(&config);
  config.deterministic = 2;
  EXPECT_EQ(detwanCommInitRankConfig(&comm, 1, id, 0, &config), detwanInvalidArgument);
  EXPECT_NE(last_error().find("deterministic"), std::string::npos) << last_error();

  detwanConfigInit(&config);
  config.site = "";
  EXPECT_EQ(detwanCommInitRankConfig(&comm, 1, id, 0, &config), detwanInvalidArgument);
  EXPECT_NE(last_error().find("site"), std::string::npos) << last_error();

  EXPECT_EQ(detwanCommInitRankConfig(&comm, 0, id, 0, nullptr), detwanInvalidArgument);
  EXPECT_NE(last_error().find("nranks"), std::string::npos) << last_error();
  EXPECT_EQ(detwanCommInitRankConfig(&comm, 2, id, 2, nullptr), detwanInvalidArgument);
  EXPECT_NE(last_error().find("rank 2"), std::string::npos) << last_error();
  EXPECT_EQ(detwanCommInitRank(nullptr, 1, id, 0), detwanInvalidArgument);

  // A garbage id is rejected before any network activity.
  detwanUniqueId garbage{};
  std::memset(garbage.internal, 'x', sizeof(garbage.internal));
  EXPECT_EQ(detwanCommInitRank(&comm, 1, garbage, 0), detwanInvalidArgument) << last_error();
}

TEST(CapiErrors, UnknownBackendIsInvalidArgument) {
  const detwanUniqueId id = make_id();
  detwanConfig_t config = DETWAN_CONFIG_INITIALIZER;
  config.listen_host = "127.0.0.1";
  config.intra_backend = "tcp";
  config.inter_backend = "carrier-pigeon";
  detwanComm_t comm = nullptr;
  EXPECT_EQ(detwanCommInitRankConfig(&comm, 1, id, 0, &config), detwanInvalidArgument);
  EXPECT_NE(last_error().find("carrier-pigeon"), std::string::npos) << last_error();
  EXPECT_EQ(comm, nullptr);
  // NAME:CONFIG: a bad setting is refused naming it.
  config.inter_backend = "udp:threads=0";
  EXPECT_EQ(detwanCommInitRankConfig(&comm, 1, id, 0, &config), detwanInvalidArgument);
  EXPECT_NE(last_error().find("threads"), std::string::npos) << last_error();
  EXPECT_EQ(comm, nullptr);
}

TEST(CapiErrors, BadArgumentsNameTheArgument) {
  with_comms(RankSetup{two_sites(2)}, [&](int r, detwanComm_t& comm) {
    std::vector<float> buf(16, 1.0f);
    EXPECT_EQ(detwanAllReduce(nullptr, buf.data(), 16, detwanFloat32, detwanSum, comm),
              detwanInvalidArgument);
    EXPECT_NE(last_error().find("sendbuff"), std::string::npos) << last_error();
    EXPECT_EQ(detwanAllReduce(buf.data(), nullptr, 16, detwanFloat32, detwanSum, comm),
              detwanInvalidArgument);
    EXPECT_NE(last_error().find("recvbuff"), std::string::npos) << last_error();
    EXPECT_EQ(detwanAllReduce(buf.data(), buf.data(), 16, static_cast<detwanDataType_t>(99),
                              detwanSum, comm),
              detwanInvalidArgument);
    EXPECT_NE(last_error().find("datatype"), std::string::npos) << last_error();
    EXPECT_EQ(detwanAllReduce(buf.data(), buf.data(), 16, detwanFloat32,
                              static_cast<detwanRedOp_t>(-3), comm),
              detwanInvalidArgument);
    EXPECT_NE(last_error().find("op"), std::string::npos) << last_error();
    EXPECT_EQ(detwanBroadcast(buf.data(), buf.data(), 16, detwanFloat32, 2, comm),
              detwanInvalidArgument);
    EXPECT_NE(last_error().find("root 2"), std::string::npos) << last_error();
    EXPECT_EQ(detwanReduce(buf.data(), buf.data(), 16, detwanFloat32, detwanSum, -1, comm),
              detwanInvalidArgument);
    EXPECT_NE(last_error().find("root -1"), std::string::npos) << last_error();
    EXPECT_EQ(detwanSend(buf.data(), 16, detwanFloat32, 5, comm), detwanInvalidArgument);
    EXPECT_NE(last_error().find("peer 5"), std::string::npos) << last_error();
    EXPECT_EQ(detwanAllReduce(buf.data(), buf.data(), 16, detwanFloat32, detwanSum, nullptr),
              detwanInvalidArgument);
    EXPECT_NE(last_error().find("comm"), std::string::npos) << last_error();
    detwanRequest_t request = nullptr;
    EXPECT_EQ(detwanIallGather(buf.data(), nullptr, 8, detwanFloat32, comm, &request),
              detwanInvalidArgument);
    EXPECT_EQ(request, nullptr);
    EXPECT_EQ(detwanIbarrier(comm, nullptr), detwanInvalidArgument);
    EXPECT_EQ(detwanWait(nullptr, -1), detwanInvalidArgument);
    EXPECT_EQ(detwanCommSetTimeout(comm, 0), detwanInvalidArgument);
    EXPECT_EQ(detwanGroupEnd(), detwanInvalidUsage);
    EXPECT_EQ(detwanGroupEndAsync(&request), detwanInvalidUsage);
    // a bad argument inside a group is reported by that call, and the group still runs
    ASSERT_EQ(detwanGroupStart(), detwanSuccess);
    EXPECT_EQ(detwanRecv(nullptr, 4, detwanFloat32, 1 - r, comm), detwanInvalidArgument);
    EXPECT_EQ(detwanGroupEnd(), detwanSuccess);
    // none of that put the communicator in error: a real operation still works
    EXPECT_EQ(detwanAllReduce(buf.data(), buf.data(), 16, detwanFloat32, detwanSum, comm),
              detwanSuccess)
        << last_error();
    EXPECT_FLOAT_EQ(buf[0], 2.0f);
    detwanAsyncError_t info{};
    ASSERT_EQ(detwanCommGetAsyncErrorInfo(comm, &info), detwanSuccess);
    EXPECT_EQ(info.result, detwanSuccess);
    EXPECT_EQ(info.failed_rank, -1);
  });
}

TEST(CapiErrors, VanishedPeerFailsTheOperationAndIsNamed) {
  RankSetup setup{two_sites(2)};
  setup.timeout_ms = 10'000;
  std::promise<void> aborted;
  auto aborted_future = aborted.get_future().share();
  with_comms(setup, [&](int r, detwanComm_t& comm) {
    if (r == 1) {
      EXPECT_EQ(detwanCommAbort(comm), detwanSuccess);
      comm = nullptr;
      aborted.set_value();
      return;
    }
    aborted_future.wait();
    std::vector<float> buf(1024, 1.0f);
    const detwanResult_t result =
        detwanAllReduce(buf.data(), buf.data(), buf.size(), detwanFloat32, detwanSum, comm);
    EXPECT_TRUE(result == detwanRemoteError || result == detwanTimeout)
        << detwanGetErrorString(result) << ": " << last_error();
    detwanAsyncError_t info{};
    ASSERT_EQ(detwanCommGetAsyncErrorInfo(comm, &info), detwanSuccess);
    EXPECT_EQ(info.result, result);
    EXPECT_EQ(info.failed_rank, 1) << info.message;
    EXPECT_NE(std::string(info.message).find("rank 1"), std::string::npos) << info.message;
    // every later operation fails at once with the same result
    EXPECT_EQ(detwanBarrier(comm), result);
    detwanRequest_t request = nullptr;
    ASSERT_EQ(detwanIbarrier(comm, &request), detwanSuccess);
    EXPECT_EQ(detwanWait(request, -1), result);
    EXPECT_EQ(detwanRequestFree(request), detwanSuccess);
  });
}

TEST(CapiErrors, OperationTimeoutNamesThePeer) {
  std::promise<void> finished;
  auto finished_future = finished.get_future().share();
  with_comms(RankSetup{two_sites(2)}, [&](int r, detwanComm_t& comm) {
    if (r == 1) {  // never joins the allreduce; stays alive until rank 0 has given up
      finished_future.wait();
      return;
    }
    ASSERT_EQ(detwanCommSetTimeout(comm, 300), detwanSuccess);
    int64_t value = 1;
    EXPECT_EQ(detwanAllReduce(&value, &value, 1, detwanInt64, detwanSum, comm), detwanTimeout)
        << last_error();
    detwanAsyncError_t info{};
    ASSERT_EQ(detwanCommGetAsyncErrorInfo(comm, &info), detwanSuccess);
    EXPECT_EQ(info.result, detwanTimeout);
    EXPECT_EQ(info.failed_rank, 1) << info.message;
    detwanResult_t async = detwanSuccess;
    ASSERT_EQ(detwanCommGetAsyncError(comm, &async), detwanSuccess);
    EXPECT_EQ(async, detwanTimeout);
    finished.set_value();
  });
}

TEST(CapiErrors, AFailedRankClosesItsChannelsSoOthersFailNow) {
  // Ring 0 -> 1 -> 2 -> 0, each rank receiving from its left: rank 1 never joins, rank 2 (which
  // waits for rank 1) gives up after 300 ms, and rank 0 (which waits for rank 2) has 30 s.
  // Rank 2 closes its channels as it fails, so rank 0 fails now, naming rank 2, instead of
  // timing out itself (detwanTimeout) 30 s later.
  RankSetup setup{std::vector<std::string>(3, "a")};
  setup.algorithm = detwanAlgoRing;
  std::promise<void> finished;
  auto finished_future = finished.get_future().share();
  with_comms(setup, [&](int r, detwanComm_t& comm) {
    if (r == 1) {  // alive (its channels answer) but absent from the allreduce
      finished_future.wait();
      return;
    }
    if (r == 2) {
      ASSERT_EQ(detwanCommSetTimeout(comm, 300), detwanSuccess);
    }
    std::vector<float> buf(3 * 4096, 1.0f);
    const detwanResult_t result =
        detwanAllReduce(buf.data(), buf.data(), buf.size(), detwanFloat32, detwanSum, comm);
    detwanAsyncError_t info{};
    ASSERT_EQ(detwanCommGetAsyncErrorInfo(comm, &info), detwanSuccess);
    if (r == 2) {
      EXPECT_EQ(result, detwanTimeout) << last_error();
      EXPECT_EQ(info.failed_rank, 1) << info.message;
    } else {
      EXPECT_EQ(result, detwanRemoteError) << last_error();
      EXPECT_EQ(info.failed_rank, 2) << info.message;
      finished.set_value();
    }
  });
}

TEST(CapiErrors, AbortFailsPendingOperationsWithAborted) {
  std::promise<void> done;
  auto done_future = done.get_future().share();
  with_comms(RankSetup{two_sites(2)}, [&](int r, detwanComm_t& comm) {
    if (r == 1) {  // never joins: rank 0's operation stays pending until the abort
      done_future.wait();
      return;
    }
    int64_t value = 1;
    detwanRequest_t request = nullptr;
    ASSERT_EQ(detwanIallReduce(&value, &value, 1, detwanInt64, detwanSum, comm, &request),
              detwanSuccess);
    EXPECT_EQ(detwanWait(request, 0), detwanInProgress);
    EXPECT_EQ(detwanCommAbort(comm), detwanSuccess);
    comm = nullptr;
    EXPECT_EQ(detwanWait(request, -1), detwanAborted) << last_error();
    EXPECT_EQ(detwanRequestFree(request), detwanSuccess);
    done.set_value();
  });
}

}  // namespace
}  // namespace detwan::collectives::testing
