// cohort._C: the torch.distributed backend "cohort" for Python (src/cohort/dist/). Importing the
// package `cohort` registers it (cohort/__init__.py).
#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "cohort/base/error.h"
#include "cohort/comm/types.h"
#include "cohort/compress/codec.h"
#include "cohort/dist/comm_hooks.h"
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

  // DDP communication hooks with Cohort's codecs (cohort/hooks.py).
  py::class_<cohort::dist::CompressionHooks, std::shared_ptr<cohort::dist::CompressionHooks>>(
      m, "_CompressionHooks")
      .def(py::init([](const c10::intrusive_ptr<c10d::ProcessGroup>& group, bool error_feedback,
                       double topk_ratio, int64_t topk_warmup_steps, int powersgd_rank,
                       int64_t powersgd_warmup_steps, size_t min_bytes, uint64_t seed) {
             cohort::compress::CompressionOptions o;
             o.error_feedback = error_feedback;
             o.topk_ratio = topk_ratio;
             o.topk_warmup_steps = topk_warmup_steps;
             o.powersgd_rank = powersgd_rank;
             o.powersgd_warmup_steps = powersgd_warmup_steps;
             o.min_bytes = min_bytes;
             o.seed = seed;
             // Destroyed with the GIL let go: joining its thread may wait for a bucket's exchange
             // to end, which other Python threads need not wait for.
             return std::shared_ptr<cohort::dist::CompressionHooks>(
                 new cohort::dist::CompressionHooks(group, o),
                 [](cohort::dist::CompressionHooks* h) {
                   py::gil_scoped_release unlocked;
                   delete h;
                 });
           }),
           py::arg("group"), py::arg("error_feedback"), py::arg("topk_ratio"),
           py::arg("topk_warmup_steps"), py::arg("powersgd_rank"), py::arg("powersgd_warmup_steps"),
           py::arg("min_bytes"), py::arg("seed"))
      .def("start",
           [](cohort::dist::CompressionHooks& hooks, const std::string& method,
              const at::Tensor& buffer, size_t index, const std::vector<at::Tensor>& gradients,
              const std::shared_ptr<torch::jit::PythonFutureWrapper>& future,
              const py::object& result) {
             // The hooks' thread completes the torch future without the GIL: the value DDP reads
             // back (a Python object, as for any Python hook) is made here, on this Python thread,
             // and handed to the future, which holds it from then on. A thread that took the GIL
             // there could wait forever on an interpreter that is exiting.
             c10::intrusive_ptr<c10::ivalue::Future> fut = future->fut;
             c10::IValue value = torch::jit::toIValue(result, c10::PyObjectType::get());
             hooks.start(cohort::compress::parse_method(method), buffer, index, gradients,
                         [fut, value = std::move(value)](const std::string& error) mutable {
                           if (error.empty()) {
                             fut->markCompleted(std::move(value));
                           } else {
                             fut->setError(std::make_exception_ptr(cohort::Error(error)));
                           }
                         });
           });
}
