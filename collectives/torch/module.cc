// detwan.torch._C: the pybind11 module that exposes ProcessGroupDetwan to Python as a subclass
// of torch.distributed.ProcessGroup (detwan/torch/__init__.py registers it as backend "detwan").
#include <chrono>

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include "collectives/torch/process_group.h"

namespace py = pybind11;
using detwan::torch_backend::ProcessGroupDetwan;

PYBIND11_MODULE(_C, m) {
  m.doc() = "detwan torch.distributed backend (C++ extension over the detwan collective library)";
  // ProcessGroup's Python type must be registered before a subclass is bound.
  py::module_::import("torch.distributed");
  py::class_<ProcessGroupDetwan, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupDetwan>>(
      m, "ProcessGroupDetwan")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupDetwan>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           // Rendezvous blocks on the store and the bootstrap: never hold the GIL there.
           py::call_guard<py::gil_scoped_release>())
      .def("describe", &ProcessGroupDetwan::describe,
           "the communicator's configuration, one line")
      .def("plan", &ProcessGroupDetwan::plan, py::arg("bytes"),
           "the allreduce plan the cost model picks for a buffer of `bytes`")
      .def("abort", &ProcessGroupDetwan::abort, py::call_guard<py::gil_scoped_release>(),
           "fail pending operations at once and close the channels");
}
