/* allreduce_example.c: the complete example program of docs/collectives.md.
 *
 * Every rank fills a buffer with (rank + 1) and allreduces it with detwanSum; every element of
 * the result must equal 1 + 2 + ... + nranks. Then a broadcast and a non-blocking allreduce.
 *
 * Build:  cc allreduce_example.c $(pkg-config --cflags --libs detwan) -o allreduce_example
 * Run 4 ranks on one host (two "sites" a and b, 2 ranks each), with one shared secret:
 *   export DETWAN_BOOTSTRAP_SECRET=$(openssl rand -hex 16)
 *   for r in 0 1 2 3; do
 *     DETWAN_SITE=$([ $r -lt 2 ] && echo a || echo b) \
 *       ./allreduce_example tcp://127.0.0.1:29500 $r 4 &
 *   done; wait
 * Across machines, use rank 0's address in the id and set DETWAN_WAN_RATE to the tunnels'
 * reserved rate (docs/collectives.md lists every setting).
 */
#include <stdio.h>
#include <stdlib.h>

#include <detwan/collectives.h>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    detwanResult_t res_ = (call);                                                       \
    if (res_ != detwanSuccess) {                                                        \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call,                     \
              detwanGetErrorString(res_), detwanGetLastError(comm));                    \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

int main(int argc, char** argv) {
  int rank = -1;
  detwanComm_t comm = NULL;
  if (argc != 4) {
    fprintf(stderr, "usage: %s tcp://HOST:PORT RANK NRANKS\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[2]);
  const int nranks = atoi(argv[3]);
  const size_t count = 1 << 20; /* 4 MiB of floats */

  /* A fixed rendezvous address: rank 0 hosts it, the others connect (like MASTER_ADDR/PORT).
   * Alternatively rank 0 calls detwanGetUniqueId() and sends the id to the others. */
  detwanUniqueId id;
  CHECK(detwanUniqueIdFromString(argv[1], &id));

  detwanConfig_t config = DETWAN_CONFIG_INITIALIZER;
  config.timeout_ms = 60000; /* an operation that waits longer for a peer fails */
  CHECK(detwanCommInitRankConfig(&comm, nranks, id, rank, &config));

  int site = 0, nsites = 0;
  CHECK(detwanCommSite(comm, &site, &nsites));

  float* buf = malloc(count * sizeof(float));
  if (buf == NULL) return 1;
  for (size_t i = 0; i < count; ++i) buf[i] = (float)(rank + 1);

  /* In place (send == recv), blocking. */
  CHECK(detwanAllReduce(buf, buf, count, detwanFloat32, detwanSum, comm));
  const float expected = (float)nranks * (float)(nranks + 1) / 2.0f;
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += buf[i] != expected;

  /* Broadcast rank 0's first 1024 values to everyone. */
  CHECK(detwanBroadcast(buf, buf, 1024, detwanFloat32, 0, comm));

  /* Non-blocking: start, do other work, wait. */
  int value = rank, max_rank = -1;
  detwanRequest_t request;
  CHECK(detwanIallReduce(&value, &max_rank, 1, detwanInt32, detwanMax, comm, &request));
  CHECK(detwanWait(request, -1));
  CHECK(detwanRequestFree(request));
  if (max_rank != nranks - 1) ++wrong;

  printf("rank %d (site %d of %d): allreduce of %zu floats -> %.0f, %zu wrong\n", rank, site,
         nsites, count, (double)buf[count - 1], wrong);
  free(buf);
  CHECK(detwanCommDestroy(comm));
  return wrong == 0 ? 0 : 1;
}
