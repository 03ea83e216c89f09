// cohort._C: the torch.distributed backend "cohort" for Python (src/cohort/dist/). Importing the
// package `cohort` registers it (cohort/__init__.py).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "cohort/base/error.h"
#include "cohort/comm/types.h"
#include "cohort/dist/process_group.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "Cohort's torch.distributed backend";
  // The c10d classes this module takes and returns are registered by torch.distributed.
  py::module_::import("torch.distributed");

  // Cohort's errors keep their message (rank, collective, sequence number) and their kind.
  auto error = py::register_exception<cohort::Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception<cohort::TimeoutError>(m, "TimeoutError", error.ptr());
  py::register_exception<cohort::PeerLostError>(m, "PeerLostError", error.ptr());
  py::register_exception<cohort::ProtocolError>(m, "ProtocolError", error.ptr());
  py::register_exception<cohort::AbortedError>(m, "AbortedError", error.ptr());
  py::register_exception<cohort::ConfigError>(m, "ConfigError", error.ptr());

  m.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<c10d::ProcessGroup> {
        return c10::make_intrusive<cohort::dist::ProcessGroupCohort>(
            store, rank, size, timeout, cohort::dist::settings_from_environment());
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "The creator torch.distributed calls for init_process_group('cohort') and new_group().");
}
