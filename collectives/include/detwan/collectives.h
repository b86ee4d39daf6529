/* detwan collectives: the C API training jobs link (pkg-config: detwan).
 *
 * Shaped like NCCL so that porting is a matter of renaming: one rank creates a unique id and
 * hands it to every other rank out of band (a launcher, a file, MPI_Bcast); each rank then
 * calls detwanCommInitRank with its rank. Buffers are host memory.
 *
 *   detwanUniqueId id;
 *   if (rank == 0) detwanGetUniqueId(&id);           // then broadcast id to the other ranks
 *   detwanComm_t comm;
 *   detwanCommInitRank(&comm, nranks, id, rank);
 *   detwanAllReduce(send, recv, count, detwanFloat32, detwanSum, comm);
 *   detwanCommDestroy(comm);
 *
 * Sites: each rank belongs to a site (a datacenter). Ranks of one site talk over shared memory
 * or TCP; ranks of different sites over detwan's transport through the reserved WAN tunnels.
 * A rank's site comes from detwanConfig_t.site, else the environment variable DETWAN_SITE,
 * else every rank is in one site "default". See docs/collectives.md for every setting.
 *
 * Ordering contract (as NCCL and MPI): every rank of a communicator issues the same collective
 * operations in the same order. Point-to-point send/recv between two ranks match in order.
 *
 * Blocking: every operation blocks until it completes on this rank, except between
 * detwanGroupStart and detwanGroupEnd (operations are recorded and run together at GroupEnd,
 * so matching sends and receives cannot deadlock) and in the detwanI* forms, which return a
 * request at once. Buffers of a pending operation must stay valid and untouched until it
 * completes.
 *
 * Threads: a communicator may be used from one thread at a time (as NCCL); different
 * communicators are independent. Group state is per thread.
 *
 * Errors: every call returns detwanResult_t. An operation that fails because a peer stopped
 * answering or closed puts the communicator in error: later operations fail at once with the
 * same result; detwanCommGetAsyncError says which peer failed and why. Recovery: destroy (or
 * abort) the communicator and create a new one.
 */
#ifndef DETWAN_COLLECTIVES_H_
#define DETWAN_COLLECTIVES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DETWAN_MAJOR, DETWAN_MINOR, DETWAN_PATCH, DETWAN_VERSION_STRING, DETWAN_VERSION_CODE */
#include "detwan/version.h"

typedef enum {
  detwanSuccess = 0,
  detwanInvalidArgument = 1, /* a bad argument: null pointer, bad rank, count, type, op, root */
  detwanInvalidUsage = 2,    /* a call out of place: GroupEnd without GroupStart, op on a
                                destroyed/aborted communicator, mismatched sizes seen by a peer */
  detwanSystemError = 3,     /* the OS or a transport refused: bind, connect, memory */
  detwanRemoteError = 4,     /* a peer failed: closed, died, sent something malformed */
  detwanTimeout = 5,         /* the operation's timeout expired waiting for a peer */
  detwanInProgress = 6,      /* detwanTest: the request has not completed yet */
  detwanAborted = 7,         /* detwanCommAbort was called */
  detwanInternalError = 8,
  detwanNumResults = 9
} detwanResult_t;

typedef enum {
  detwanInt8 = 0, detwanChar = 0,
  detwanUint8 = 1,
  detwanInt32 = 2, detwanInt = 2,
  detwanUint32 = 3,
  detwanInt64 = 4,
  detwanUint64 = 5,
  detwanFloat16 = 6, detwanHalf = 6,
  detwanBfloat16 = 7,
  detwanFloat32 = 8, detwanFloat = 8,
  detwanFloat64 = 9, detwanDouble = 9,
  detwanNumTypes = 10
} detwanDataType_t;

typedef enum {
  detwanSum = 0,
  detwanProd = 1,
  detwanMax = 2,
  detwanMin = 3,
  detwanAvg = 4, /* sum / nranks; integer types divide with truncation toward zero */
  detwanNumOps = 5
} detwanRedOp_t;

/* Algorithm override for allreduce (and the other collectives where it applies). */
typedef enum {
  detwanAlgoAuto = 0,            /* the alpha-beta cost model chooses (logged at info level) */
  detwanAlgoRing = 1,            /* pipelined chunked ring */
  detwanAlgoHalvingDoubling = 2, /* recursive halving (reduce-scatter) + doubling (allgather) */
  detwanAlgoTree = 3,            /* binomial tree reduce + broadcast: small messages */
  detwanAlgoHierarchical = 4     /* intra-site reduce-scatter, inter-site exchange, allgather */
} detwanAlgorithm_t;

#define DETWAN_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[DETWAN_UNIQUE_ID_BYTES];
} detwanUniqueId;

typedef struct detwanComm* detwanComm_t;
typedef struct detwanRequest* detwanRequest_t;

/* Communicator settings. Initialise with DETWAN_CONFIG_INITIALIZER (or detwanConfigInit);
 * zero / NULL fields keep the default, which the environment may set (docs/collectives.md). */
typedef struct {
  size_t size;                 /* sizeof(detwanConfig_t), set by the initializer */
  const char* site;            /* this rank's site; default $DETWAN_SITE or "default" */
  int64_t timeout_ms;          /* per-operation timeout; default $DETWAN_TIMEOUT_MS or 300000 */
  int64_t wan_rate_bps;        /* reserved rate of each site-to-site tunnel, per direction;
                                  default $DETWAN_WAN_RATE (e.g. "200mbit"), 0 = best effort */
  detwanAlgorithm_t algorithm; /* default $DETWAN_ALGO or auto */
  int64_t chunk_bytes;         /* pipelining chunk; default $DETWAN_CHUNK_BYTES or the model's */
  int deterministic;           /* 1: plan from configuration only, fixed reduction order, so
                                  results are bitwise reproducible; default $DETWAN_DETERMINISTIC */
  const char* intra_backend;   /* transport inside a site: "shm" (default) or "tcp" */
  const char* inter_backend;   /* transport between sites: "udp" (default), "tcp", "loopback" */
  const char* listen_host;     /* local address peers reach this rank at; default
                                  $DETWAN_LISTEN_HOST or the address used to reach the root */
  const char* reservation;     /* detwan-agent reservation(s) the job rides, "r-3" or "r-3,r-4"
                                  (one per site pair); default $DETWAN_RESERVATION. Init asks
                                  the agent for their rates, bounds and tunnel addresses and
                                  fails if one is not provisioned or a site pair is uncovered */
  const char* agent;           /* the agent's URL, e.g. "http://10.0.0.1:7800"; default
                                  $DETWAN_AGENT (needed with a reservation) */
} detwanConfig_t;

#define DETWAN_CONFIG_INITIALIZER \
  { sizeof(detwanConfig_t), NULL, 0, 0, detwanAlgoAuto, 0, -1, NULL, NULL, NULL, NULL, NULL }

/* What went wrong with a communicator in error. */
typedef struct {
  detwanResult_t result;   /* detwanSuccess while the communicator is healthy */
  int failed_rank;         /* the peer whose failure caused it, -1 if none / unknown */
  char message[256];       /* e.g. "rank 2 (site b): no answer for 5000 ms (udp 10.0.2.1:..)" */
} detwanAsyncError_t;

/* ---- versions, errors ---------------------------------------------------------------- */
detwanResult_t detwanGetVersion(int* version);
const char* detwanGetErrorString(detwanResult_t result);
/* The message of the last failed call on this thread ("" if none). */
const char* detwanGetLastError(detwanComm_t comm);
void detwanConfigInit(detwanConfig_t* config);

/* ---- communicators ------------------------------------------------------------------- */
/* Creates a bootstrap root in this process (a thread that introduces the ranks to each other
 * and exits once all have joined) and writes its address into *id. */
detwanResult_t detwanGetUniqueId(detwanUniqueId* id);
/* An id naming a rendezvous every rank can reach without a root process:
 *   "tcp://HOST:PORT"  rank 0 hosts the root on HOST:PORT (like MASTER_ADDR/MASTER_PORT); every
 *                      rank must have the same secret in DETWAN_BOOTSTRAP_SECRET (32-64 hex
 *                      digits, e.g. `openssl rand -hex 16`): joins without it are refused
 *   "file:///DIR"      ranks meet through files in a shared directory (not writable by every
 *                      user unless sticky); the secret as above, DETWAN_BOOTSTRAP_SECRET
 *   either + "#SECRET" the secret in the id itself (32-64 hex digits) instead
 * The secret never crosses the wire; every channel is authenticated with a key derived from it
 * (docs/collectives.md, "The bootstrap protocol"). */
detwanResult_t detwanUniqueIdFromString(const char* spec, detwanUniqueId* id);

detwanResult_t detwanCommInitRank(detwanComm_t* comm, int nranks, detwanUniqueId id, int rank);
detwanResult_t detwanCommInitRankConfig(detwanComm_t* comm, int nranks, detwanUniqueId id,
                                        int rank, const detwanConfig_t* config);
/* Collective (every rank calls it): waits for pending operations and for every rank to reach
 * destroy (so no rank's close cuts off a peer's last operation), closes the channels, frees the
 * communicator. On a communicator in error it only closes and frees. Returns detwanSuccess
 * once freed, also when a peer failed or left. */
detwanResult_t detwanCommDestroy(detwanComm_t comm);
/* Fails pending operations with detwanAborted at once, closes the channels, frees. */
detwanResult_t detwanCommAbort(detwanComm_t comm);
/* Collective over comm: ranks with the same color form a new communicator, ordered by key
 * then by old rank. color < 0 (DETWAN_SPLIT_NOCOLOR): *newcomm = NULL. config may be NULL
 * (inherit). */
#define DETWAN_SPLIT_NOCOLOR (-1)
detwanResult_t detwanCommSplit(detwanComm_t comm, int color, int key, detwanComm_t* newcomm,
                               const detwanConfig_t* config);
detwanResult_t detwanCommCount(const detwanComm_t comm, int* count);
detwanResult_t detwanCommUserRank(const detwanComm_t comm, int* rank);
/* The site index (0..nsites-1, in order of each site's lowest rank) and site count. */
detwanResult_t detwanCommSite(const detwanComm_t comm, int* site, int* nsites);
detwanResult_t detwanCommGetAsyncError(detwanComm_t comm, detwanResult_t* async_error);
detwanResult_t detwanCommGetAsyncErrorInfo(detwanComm_t comm, detwanAsyncError_t* info);
/* Per-operation timeout for operations issued after this call. */
detwanResult_t detwanCommSetTimeout(detwanComm_t comm, int64_t timeout_ms);

/* ---- collectives (blocking; recorded when inside a group) ---------------------------- */
detwanResult_t detwanAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               detwanDataType_t datatype, detwanRedOp_t op, detwanComm_t comm);
detwanResult_t detwanBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               detwanDataType_t datatype, int root, detwanComm_t comm);
detwanResult_t detwanReduce(const void* sendbuff, void* recvbuff, size_t count,
                            detwanDataType_t datatype, detwanRedOp_t op, int root,
                            detwanComm_t comm);
/* recvbuff holds nranks * sendcount elements, rank r's at offset r * sendcount. */
detwanResult_t detwanAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               detwanDataType_t datatype, detwanComm_t comm);
/* sendbuff holds nranks * recvcount elements; rank r receives block r reduced. */
detwanResult_t detwanReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   detwanDataType_t datatype, detwanRedOp_t op,
                                   detwanComm_t comm);
/* count elements to and from each rank: block r of sendbuff goes to rank r. */
detwanResult_t detwanAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                              detwanDataType_t datatype, detwanComm_t comm);
detwanResult_t detwanSend(const void* sendbuff, size_t count, detwanDataType_t datatype,
                          int peer, detwanComm_t comm);
detwanResult_t detwanRecv(void* recvbuff, size_t count, detwanDataType_t datatype, int peer,
                          detwanComm_t comm);
detwanResult_t detwanBarrier(detwanComm_t comm);

/* ---- groups -------------------------------------------------------------------------- */
detwanResult_t detwanGroupStart(void);
/* Runs the recorded operations and waits for them. */
detwanResult_t detwanGroupEnd(void);
/* Runs the recorded operations without waiting: *request completes when all have. */
detwanResult_t detwanGroupEndAsync(detwanRequest_t* request);

/* ---- non-blocking forms: return at once with a request ------------------------------- */
detwanResult_t detwanIallReduce(const void* sendbuff, void* recvbuff, size_t count,
                                detwanDataType_t datatype, detwanRedOp_t op, detwanComm_t comm,
                                detwanRequest_t* request);
detwanResult_t detwanIbroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                detwanDataType_t datatype, int root, detwanComm_t comm,
                                detwanRequest_t* request);
detwanResult_t detwanIreduce(const void* sendbuff, void* recvbuff, size_t count,
                             detwanDataType_t datatype, detwanRedOp_t op, int root,
                             detwanComm_t comm, detwanRequest_t* request);
detwanResult_t detwanIallGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                detwanDataType_t datatype, detwanComm_t comm,
                                detwanRequest_t* request);
detwanResult_t detwanIreduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                    detwanDataType_t datatype, detwanRedOp_t op,
                                    detwanComm_t comm, detwanRequest_t* request);
detwanResult_t detwanIallToAll(const void* sendbuff, void* recvbuff, size_t count,
                               detwanDataType_t datatype, detwanComm_t comm,
                               detwanRequest_t* request);
detwanResult_t detwanIsend(const void* sendbuff, size_t count, detwanDataType_t datatype,
                           int peer, detwanComm_t comm, detwanRequest_t* request);
detwanResult_t detwanIrecv(void* recvbuff, size_t count, detwanDataType_t datatype, int peer,
                           detwanComm_t comm, detwanRequest_t* request);
detwanResult_t detwanIbarrier(detwanComm_t comm, detwanRequest_t* request);

/* Waits up to timeout_ms (< 0: forever) for the request: detwanSuccess, the operation's error,
 * or detwanInProgress if the wait timed out (the operation goes on). */
detwanResult_t detwanWait(detwanRequest_t request, int64_t timeout_ms);
/* *done = 1 when complete; returns the operation's result once complete. */
detwanResult_t detwanTest(detwanRequest_t request, int* done);
/* Frees a request (waits for it first if it is still running). */
detwanResult_t detwanRequestFree(detwanRequest_t request);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* DETWAN_COLLECTIVES_H_ */
