#include "transport/transport.h"

namespace detwan::transport {

std::future<Result<void>> Channel::send(std::span<const std::byte> message) {
  auto promise = std::make_shared<std::promise<Result<void>>>();
  auto future = promise->get_future();
  send_async(message, [promise](Result<void> result) { promise->set_value(std::move(result)); });
  return future;
}

std::future<Result<std::vector<std::byte>>> Channel::recv() {
  auto promise = std::make_shared<std::promise<Result<std::vector<std::byte>>>>();
  auto future = promise->get_future();
  recv_async([promise](Result<std::vector<std::byte>> result) {
    promise->set_value(std::move(result));
  });
  return future;
}

}  // namespace detwan::transport
