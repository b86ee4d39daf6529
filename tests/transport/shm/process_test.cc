// Two real processes: the child connects to the parent's listener, echoes, and dies.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/transport/shm/test_util.h"
#include "transport/shm/endpoint.h"

namespace detwan::transport::shm {
namespace {

using testing::await;
using testing::kSetupTimeoutNs;
using testing::random_bytes;
using testing::recv_future;
using testing::send_future;


// Runs in the forked child: echoes one message, then sends a last one and exits without
// closing (process death). Exit status says which step failed.
int child_main(const std::string& name) {
  auto endpoint = make_endpoint({});
  if (!endpoint) return 10;
  auto channel = (*endpoint)->connect(name, {}, kSetupTimeoutNs);
  if (!channel) return 11;
  auto received = recv_future(**channel);
  if (received.wait_for(testing::kHangGuard) != std::future_status::ready) return 12;
  auto message = received.get();
  if (!message) return 13;
  auto echoed = send_future(**channel, *message);
  if (echoed.wait_for(testing::kHangGuard) != std::future_status::ready || !echoed.get()) return 14;
  static const std::vector<std::byte> last = random_bytes(12'345, 77);
  auto sent = send_future(**channel, last);
  if (sent.wait_for(testing::kHangGuard) != std::future_status::ready || !sent.get()) return 15;
  ::_exit(0);  // dies with the channel open: the parent must see the hang-up
}

TEST(ShmProcess, EchoWithAForkedPeerThenPeerDeath) {
  // No endpoint thread exists before fork(): listen() does not start the progress thread.
  auto endpoint = make_endpoint({});
  ASSERT_TRUE(endpoint);
  auto name = (*endpoint)->listen("");
  ASSERT_TRUE(name);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(child_main(*name));

  auto channel = (*endpoint)->accept(kSetupTimeoutNs);
  ASSERT_TRUE(channel) << channel.error().describe();
  const auto message = random_bytes(3'000'001, 8);
  auto echoed = recv_future(**channel);
  auto sent = send_future(**channel, message);
  ASSERT_TRUE(await(sent));
  auto echo = await(echoed);
  ASSERT_TRUE(echo) << echo.error().describe();
  EXPECT_TRUE(*echo == message);
  auto last = recv_future(**channel);
  auto last_result = await(last);
  ASSERT_TRUE(last_result) << last_result.error().describe();
  EXPECT_TRUE(*last_result == random_bytes(12'345, 77));
  auto after_death = recv_future(**channel);
  auto death = await(after_death);
  ASSERT_FALSE(death);
  EXPECT_EQ(death.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(death.error().message, "shm peer closed");
  int status = -1;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace detwan::transport::shm
