// Reading the agent's JSON and running a child with a deadline (control/slurm/ctl_exec.h), with
// /bin/sh standing in for detwanctl.
#include "control/slurm/ctl_exec.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// A list answer as the agent serialises it: compact, keys in a fixed order.
const char* kList =
    R"({"reservations":[{"id":"r-1","version":1,"client_request_id":"slurm-7-a-b","state":"terminated",)"
    R"("tunnel":{"id":1000},"dataplane":{"active":false}},)"
    R"({"id":"r-2","version":1,"client_request_id":"slurm-8-a-b","state":"provisioned",)"
    R"("nsi":{"reservation_state":"ReserveStart"},"dataplane":{"active":true}},)"
    R"({"id":"r-3","version":2,"client_request_id":"","state":"held","dataplane":{"active":false}}]})";

TEST(SlurmCtlJson, FindsAReservationByRequestId) {
  char id[32], state[32];
  ASSERT_EQ(detwan_json_find_request(kList, "slurm-8-a-b", id, sizeof id, state, sizeof state), 0);
  EXPECT_STREQ(id, "r-2");
  EXPECT_STREQ(state, "provisioned");
  ASSERT_EQ(detwan_json_find_request(kList, "slurm-7-a-b", id, sizeof id, state, sizeof state), 0);
  EXPECT_STREQ(id, "r-1");
  EXPECT_STREQ(state, "terminated");
  EXPECT_EQ(detwan_json_find_request(kList, "slurm-8-a", id, sizeof id, state, sizeof state), -1);
  EXPECT_EQ(detwan_json_find_request(kList, "slurm-9-a-b", id, sizeof id, state, sizeof state),
            -1);
}

TEST(SlurmCtlJson, IteratesOverAJobsReservations) {
  const char* cursor = nullptr;
  char id[32], state[32];
  std::string seen;
  while (detwan_json_next_request(kList, "slurm-", &cursor, id, sizeof id, state, sizeof state) ==
         0) {
    seen += std::string(id) + "=" + state + " ";
  }
  EXPECT_EQ(seen, "r-1=terminated r-2=provisioned ");
  cursor = nullptr;
  ASSERT_EQ(detwan_json_next_request(kList, "slurm-8-", &cursor, id, sizeof id, state,
                                     sizeof state), 0);
  EXPECT_STREQ(id, "r-2");
  EXPECT_EQ(detwan_json_next_request(kList, "slurm-8-", &cursor, id, sizeof id, state,
                                     sizeof state), -1);
}

TEST(SlurmCtlJson, StringsBoolsAndEscapes) {
  const char* answer =
      R"({"error":{"code":"no_capacity","message":"link 'ab1' a->b has \"20mbit\" free\n","field":"x"}})";
  char out[128];
  ASSERT_EQ(detwan_json_string(answer, "message", out, sizeof out), 0);
  EXPECT_STREQ(out, "link 'ab1' a->b has \"20mbit\" free ");
  ASSERT_EQ(detwan_json_string(answer, "message", out, 8), 0);  // truncated, terminated
  EXPECT_STREQ(out, "link 'a");
  EXPECT_EQ(detwan_json_string(answer, "absent", out, sizeof out), -1);
  int active = -1;
  ASSERT_EQ(detwan_json_bool(kList, "active", &active), 0);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(detwan_json_bool(answer, "code", &active), -1);  // not a bool
}

detwan_config config_with_timeout(int timeout_s) {
  detwan_config c{};
  c.timeout_s = timeout_s;
  return c;
}

// An executable shell script standing in for detwanctl: it gets detwanctl's arguments
// (--agent URL --json --timeout MS ARGS...) as $1, $2, ...
std::string script(const char* body) {
  char path[] = "/tmp/detwan-ctl-exec-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  const std::string text = std::string("#!/bin/sh\n") + body + "\n";
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  chmod(path, 0700);
  return path;
}

TEST(SlurmCtlExec, CapturesStdoutStderrAndStatus) {
  detwan_config c = config_with_timeout(5);
  const std::string path = script(
      R"(echo "{\"error\":{\"code\":\"no_capacity\",\"message\":\"full: $1 $2 $3 $6\"}}"; echo "detwanctl: full" >&2; exit 1)");
  std::strcpy(c.detwanctl, path.c_str());
  const char* args[] = {"reserve", nullptr};
  detwan_ctl_result r;
  EXPECT_EQ(detwan_ctl_run(&c, "http://h:1", args, &r), 1);
  char what[256];
  detwan_ctl_describe_error(&r, what, sizeof what);
  EXPECT_STREQ(what, "no_capacity: full: --agent http://h:1 --json reserve");
  EXPECT_STREQ(r.err, "detwanctl: full");
  detwan_ctl_result_free(&r);
  unlink(path.c_str());
}

TEST(SlurmCtlExec, PassesTheAgentCaToHttpsAgentsOnly) {
  detwan_config c = config_with_timeout(5);
  std::strcpy(c.agent_ca, "/etc/detwan/ca.pem");
  const std::string path = script(R"(echo "{\"args\":\"$*\"}")");
  std::strcpy(c.detwanctl, path.c_str());
  const char* args[] = {"list", nullptr};
  detwan_ctl_result r;
  ASSERT_EQ(detwan_ctl_run(&c, "https://h:1", args, &r), 0) << r.err;
  EXPECT_NE(std::string(r.out).find("--ca /etc/detwan/ca.pem list"), std::string::npos) << r.out;
  detwan_ctl_result_free(&r);
  ASSERT_EQ(detwan_ctl_run(&c, "http://h:1", args, &r), 0) << r.err;
  EXPECT_EQ(std::string(r.out).find("--ca"), std::string::npos) << r.out;
  detwan_ctl_result_free(&r);
  unlink(path.c_str());
}

TEST(SlurmCtlExec, GivesDetwanctlAReplicaSetAsACommaList) {
  detwan_config c = config_with_timeout(5);
  const std::string path = script(R"(echo "{\"args\":\"$*\"}")");
  std::strcpy(c.detwanctl, path.c_str());
  const char* args[] = {"list", nullptr};
  detwan_ctl_result r;
  ASSERT_EQ(detwan_ctl_run(&c, "http://h1:1|http://h2:1|http://h3:1", args, &r), 0) << r.err;
  EXPECT_NE(std::string(r.out).find("--agent http://h1:1,http://h2:1,http://h3:1 --json"),
            std::string::npos)
      << r.out;
  detwan_ctl_result_free(&r);
  unlink(path.c_str());
}

TEST(SlurmCtlExec, KillsAChildPastItsDeadline) {
  detwan_config c = config_with_timeout(1);
  const std::string path = script("exec sleep 30");
  std::strcpy(c.detwanctl, path.c_str());
  const char* args[] = {nullptr};
  detwan_ctl_result r;
  EXPECT_EQ(detwan_ctl_run(&c, "http://h:1", args, &r), -1);
  EXPECT_NE(std::string(r.err).find("did not finish within 6 s"), std::string::npos) << r.err;
  detwan_ctl_result_free(&r);
  unlink(path.c_str());
}

TEST(SlurmCtlExec, NamesAMissingBinary) {
  detwan_config c = config_with_timeout(5);
  std::strcpy(c.detwanctl, "/nonexistent/detwanctl");
  const char* args[] = {nullptr};
  detwan_ctl_result r;
  EXPECT_EQ(detwan_ctl_run(&c, "http://h:1", args, &r), -1);
  EXPECT_NE(std::string(r.err).find("cannot execute /nonexistent/detwanctl"), std::string::npos)
      << r.err;
  detwan_ctl_result_free(&r);
}

}  // namespace
