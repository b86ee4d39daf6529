// The C API's operations, groups and requests (see capi.cc for the error mapping).
//
// Group state is per thread (collectives.h): the nesting depth and the operations recorded per
// communicator since the outermost detwanGroupStart. Operations are validated when recorded,
// so a bad argument is reported by the call that passed it.
#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "collectives/comm/capi_internal.h"
#include "common/clock.h"

using detwan::collectives::Collective;
using detwan::collectives::DataType;
using detwan::collectives::OpDesc;
using detwan::collectives::ReduceOp;
using detwan::collectives::Request;
namespace capi = detwan::collectives::capi;

namespace {

struct GroupState {
  int depth = 0;
  std::vector<std::pair<detwanComm*, std::vector<OpDesc>>> ops;  // in first-use order
};
thread_local GroupState group_state;

detwanResult_t invalid(const std::string& message) {
  return capi::fail(detwanInvalidArgument, message);
}

// Checks the C enum values before they are narrowed into the C++ enums.
detwanResult_t make_op(const char* function, Collective collective, const void* send,
                       void* recv, size_t count, int datatype, int op, int root,
                       OpDesc& out) {
  if (datatype < 0 || datatype >= detwanNumTypes) {
    return invalid(fmt::format("{}: datatype: bad value {} (0..{})", function, datatype,
                               detwanNumTypes - 1));
  }
  if (op < 0 || op >= detwanNumOps) {
    return invalid(fmt::format("{}: op: bad value {} (0..{})", function, op, detwanNumOps - 1));
  }
  out.collective = collective;
  out.send = send;
  out.recv = recv;
  out.count = count;
  out.type = static_cast<DataType>(datatype);
  out.op = static_cast<ReduceOp>(op);
  out.root = root;
  return detwanSuccess;
}

detwanResult_t wait_parts(detwanRequest& request, int64_t timeout_ms) {
  const int64_t start_ns = detwan::common::MonotonicClock().now_ns();
  detwanResult_t first = detwanSuccess;
  for (auto& part : request.parts) {
    int64_t timeout_ns = -1;
    if (timeout_ms >= 0) {
      timeout_ns = std::max<int64_t>(
          0, timeout_ms * 1'000'000 - (detwan::common::MonotonicClock().now_ns() - start_ns));
    }
    auto result = part.request.wait(timeout_ns);
    if (!result) return detwanInProgress;
    if (!*result && first == detwanSuccess) {
      first = capi::fail_op(result->error(), part.aborted->load());
    }
  }
  return first;
}

// Runs (blocking: request == nullptr) or starts (request != nullptr) one operation, or
// records it inside a group.
detwanResult_t issue(const char* function, detwanComm_t comm, detwanResult_t made,
                     const OpDesc& op, detwanRequest_t* request, bool nonblocking) {
  if (made != detwanSuccess) return made;
  if (comm == nullptr) return invalid(fmt::format("{}: comm is NULL", function));
  if (nonblocking && request == nullptr) {
    return invalid(fmt::format("{}: request is NULL", function));
  }
  if (nonblocking) *request = nullptr;
  if (auto ok = comm->comm->validate(op); !ok) {
    return invalid(fmt::format("{}: {}", function, ok.error().message));
  }
  if (group_state.depth > 0) {
    if (nonblocking) {
      return capi::fail(detwanInvalidUsage,
                        fmt::format("{} inside a group: use the blocking form (the group runs "
                                    "at detwanGroupEnd)",
                                    function));
    }
    auto entry = std::find_if(group_state.ops.begin(), group_state.ops.end(),
                              [&](const auto& e) { return e.first == comm; });
    if (entry == group_state.ops.end()) {
      group_state.ops.emplace_back(comm, std::vector<OpDesc>{});
      entry = std::prev(group_state.ops.end());
    }
    entry->second.push_back(op);
    return capi::ok();
  }
  auto submitted = comm->comm->submit(op);
  if (!submitted) return capi::fail_setup(submitted.error());
  auto* handle = new detwanRequest;
  handle->parts.push_back({std::move(*submitted), comm->aborted});
  if (nonblocking) {
    *request = handle;
    return capi::ok();
  }
  const detwanResult_t result = wait_parts(*handle, -1);
  delete handle;
  return result;
}

// Submits every recorded group of this thread; the request holds one part per communicator.
detwanResult_t submit_groups(detwanRequest& request) {
  auto ops = std::move(group_state.ops);
  group_state.ops.clear();
  detwanResult_t first = detwanSuccess;
  for (auto& [comm, list] : ops) {
    auto submitted = comm->comm->submit_group(std::move(list));
    if (!submitted) {
      if (first == detwanSuccess) first = capi::fail_setup(submitted.error());
      continue;
    }
    request.parts.push_back({std::move(*submitted), comm->aborted});
  }
  return first;
}

}  // namespace

extern "C" {

detwanResult_t detwanAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               detwanDataType_t datatype, detwanRedOp_t op, detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanAllReduce", Collective::kAllReduce, sendbuff, recvbuff, count,
                      capi::enum_value(datatype), capi::enum_value(op), 0, d);
  return issue("detwanAllReduce", comm, made, d, nullptr, false);
}

detwanResult_t detwanBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               detwanDataType_t datatype, int root, detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanBroadcast", Collective::kBroadcast, sendbuff, recvbuff, count,
                      capi::enum_value(datatype), 0, root, d);
  return issue("detwanBroadcast", comm, made, d, nullptr, false);
}

detwanResult_t detwanReduce(const void* sendbuff, void* recvbuff, size_t count,
                            detwanDataType_t datatype, detwanRedOp_t op, int root,
                            detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanReduce", Collective::kReduce, sendbuff, recvbuff, count, capi::enum_value(datatype),
                      capi::enum_value(op), root, d);
  return issue("detwanReduce", comm, made, d, nullptr, false);
}

detwanResult_t detwanAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               detwanDataType_t datatype, detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanAllGather", Collective::kAllGather, sendbuff, recvbuff, sendcount,
                      capi::enum_value(datatype), 0, 0, d);
  return issue("detwanAllGather", comm, made, d, nullptr, false);
}

detwanResult_t detwanReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   detwanDataType_t datatype, detwanRedOp_t op,
                                   detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanReduceScatter", Collective::kReduceScatter, sendbuff, recvbuff,
                      recvcount, capi::enum_value(datatype), capi::enum_value(op), 0, d);
  return issue("detwanReduceScatter", comm, made, d, nullptr, false);
}

detwanResult_t detwanAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                              detwanDataType_t datatype, detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanAllToAll", Collective::kAllToAll, sendbuff, recvbuff, count,
                      capi::enum_value(datatype), 0, 0, d);
  return issue("detwanAllToAll", comm, made, d, nullptr, false);
}

detwanResult_t detwanSend(const void* sendbuff, size_t count, detwanDataType_t datatype,
                          int peer, detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanSend", Collective::kSendRecv, sendbuff, nullptr, count, capi::enum_value(datatype),
                      0, peer, d);
  d.is_send = true;
  return issue("detwanSend", comm, made, d, nullptr, false);
}

detwanResult_t detwanRecv(void* recvbuff, size_t count, detwanDataType_t datatype, int peer,
                          detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanRecv", Collective::kSendRecv, nullptr, recvbuff, count, capi::enum_value(datatype),
                      0, peer, d);
  return issue("detwanRecv", comm, made, d, nullptr, false);
}

detwanResult_t detwanBarrier(detwanComm_t comm) {
  OpDesc d;
  auto made = make_op("detwanBarrier", Collective::kBarrier, nullptr, nullptr, 0, 0, 0, 0, d);
  return issue("detwanBarrier", comm, made, d, nullptr, false);
}

detwanResult_t detwanIallReduce(const void* sendbuff, void* recvbuff, size_t count,
                                detwanDataType_t datatype, detwanRedOp_t op, detwanComm_t comm,
                                detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIallReduce", Collective::kAllReduce, sendbuff, recvbuff, count,
                      capi::enum_value(datatype), capi::enum_value(op), 0, d);
  return issue("detwanIallReduce", comm, made, d, request, true);
}

detwanResult_t detwanIbroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                detwanDataType_t datatype, int root, detwanComm_t comm,
                                detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIbroadcast", Collective::kBroadcast, sendbuff, recvbuff, count,
                      capi::enum_value(datatype), 0, root, d);
  return issue("detwanIbroadcast", comm, made, d, request, true);
}

detwanResult_t detwanIreduce(const void* sendbuff, void* recvbuff, size_t count,
                             detwanDataType_t datatype, detwanRedOp_t op, int root,
                             detwanComm_t comm, detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIreduce", Collective::kReduce, sendbuff, recvbuff, count, capi::enum_value(datatype),
                      capi::enum_value(op), root, d);
  return issue("detwanIreduce", comm, made, d, request, true);
}

detwanResult_t detwanIallGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                detwanDataType_t datatype, detwanComm_t comm,
                                detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIallGather", Collective::kAllGather, sendbuff, recvbuff, sendcount,
                      capi::enum_value(datatype), 0, 0, d);
  return issue("detwanIallGather", comm, made, d, request, true);
}

detwanResult_t detwanIreduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                    detwanDataType_t datatype, detwanRedOp_t op,
                                    detwanComm_t comm, detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIreduceScatter", Collective::kReduceScatter, sendbuff, recvbuff,
                      recvcount, capi::enum_value(datatype), capi::enum_value(op), 0, d);
  return issue("detwanIreduceScatter", comm, made, d, request, true);
}

detwanResult_t detwanIallToAll(const void* sendbuff, void* recvbuff, size_t count,
                               detwanDataType_t datatype, detwanComm_t comm,
                               detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIallToAll", Collective::kAllToAll, sendbuff, recvbuff, count,
                      capi::enum_value(datatype), 0, 0, d);
  return issue("detwanIallToAll", comm, made, d, request, true);
}

detwanResult_t detwanIsend(const void* sendbuff, size_t count, detwanDataType_t datatype,
                           int peer, detwanComm_t comm, detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIsend", Collective::kSendRecv, sendbuff, nullptr, count, capi::enum_value(datatype),
                      0, peer, d);
  d.is_send = true;
  return issue("detwanIsend", comm, made, d, request, true);
}

detwanResult_t detwanIrecv(void* recvbuff, size_t count, detwanDataType_t datatype, int peer,
                           detwanComm_t comm, detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIrecv", Collective::kSendRecv, nullptr, recvbuff, count, capi::enum_value(datatype),
                      0, peer, d);
  return issue("detwanIrecv", comm, made, d, request, true);
}

detwanResult_t detwanIbarrier(detwanComm_t comm, detwanRequest_t* request) {
  OpDesc d;
  auto made = make_op("detwanIbarrier", Collective::kBarrier, nullptr, nullptr, 0, 0, 0, 0, d);
  return issue("detwanIbarrier", comm, made, d, request, true);
}

detwanResult_t detwanGroupStart(void) {
  ++group_state.depth;
  return capi::ok();
}

detwanResult_t detwanGroupEnd(void) {
  if (group_state.depth == 0) {
    return capi::fail(detwanInvalidUsage, "detwanGroupEnd without detwanGroupStart");
  }
  if (--group_state.depth > 0) return capi::ok();
  detwanRequest request;
  const detwanResult_t submitted = submit_groups(request);
  const detwanResult_t waited = wait_parts(request, -1);
  return submitted != detwanSuccess ? submitted : waited;
}

detwanResult_t detwanGroupEndAsync(detwanRequest_t* request) {
  if (request == nullptr) return invalid("detwanGroupEndAsync: request is NULL");
  *request = nullptr;
  if (group_state.depth != 1) {
    return capi::fail(detwanInvalidUsage,
                      group_state.depth == 0
                          ? "detwanGroupEndAsync without detwanGroupStart"
                          : "detwanGroupEndAsync inside a nested group (end the inner groups "
                            "with detwanGroupEnd)");
  }
  group_state.depth = 0;
  auto* handle = new detwanRequest;
  const detwanResult_t submitted = submit_groups(*handle);
  if (submitted != detwanSuccess) {
    delete handle;  // waits for the communicators whose part was submitted
    return submitted;
  }
  *request = handle;
  return capi::ok();
}

detwanResult_t detwanWait(detwanRequest_t request, int64_t timeout_ms) {
  if (request == nullptr) return invalid("detwanWait: request is NULL");
  return wait_parts(*request, timeout_ms < 0 ? -1 : timeout_ms);
}

detwanResult_t detwanTest(detwanRequest_t request, int* done) {
  if (request == nullptr) return invalid("detwanTest: request is NULL");
  if (done == nullptr) return invalid("detwanTest: done is NULL");
  for (auto& part : request->parts) {
    if (!part.request.done()) {
      *done = 0;
      return detwanInProgress;
    }
  }
  *done = 1;
  return wait_parts(*request, -1);
}

detwanResult_t detwanRequestFree(detwanRequest_t request) {
  if (request == nullptr) return invalid("detwanRequestFree: request is NULL");
  delete request;  // each Request waits for its operation
  return capi::ok();
}

}  // extern "C"
