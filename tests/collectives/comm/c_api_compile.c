/* The installed header compiles as C (C11, -Wpedantic) and a C program can run a
 * one-rank communicator through it. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detwan/collectives.h"

#define CHECK(call)                                                             \
  do {                                                                          \
    detwanResult_t result_ = (call);                                            \
    if (result_ != detwanSuccess) {                                             \
      fprintf(stderr, "%s: %s (%s)\n", #call, detwanGetErrorString(result_),    \
              detwanGetLastError(NULL));                                        \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main(void) {
  int version = 0;
  CHECK(detwanGetVersion(&version));
  if (version != DETWAN_VERSION_CODE) return 1;
  setenv("DETWAN_LISTEN_HOST", "127.0.0.1", 1); /* hermetic: the root listens on loopback */
  detwanUniqueId id;
  CHECK(detwanGetUniqueId(&id));
  detwanConfig_t config = DETWAN_CONFIG_INITIALIZER;
  config.site = "a";
  config.intra_backend = "tcp";
  config.inter_backend = "loopback";
  config.listen_host = "127.0.0.1";
  detwanComm_t comm = NULL;
  CHECK(detwanCommInitRankConfig(&comm, 1, id, 0, &config));
  float data[3] = {1.0f, 2.0f, 3.0f};
  float out[3] = {0};
  CHECK(detwanAllReduce(data, out, 3, detwanFloat32, detwanSum, comm));
  if (memcmp(data, out, sizeof(out)) != 0) return 1;
  if (detwanAllReduce(data, out, 3, (detwanDataType_t)99, detwanSum, comm) !=
      detwanInvalidArgument) {
    return 1;
  }
  CHECK(detwanCommDestroy(comm));
  puts("ok");
  return 0;
}
