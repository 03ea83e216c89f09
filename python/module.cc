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
#include "job_worker.h"

namespace py = pybind11;

namespace {

// The job this process is a worker of, when `cohort run` started it (job_worker.h).
std::shared_ptr<cohort::python::JobWorker> g_job;

c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  if (g_job) {
    if (auto comm = g_job->claim(rank, size, timeout)) {
      return c10::make_intrusive<cohort::dist::ProcessGroupCohort>(store, std::move(comm),
                                                                   g_job->group_settings());
    }
  }
  // Any other group of a job's worker (new_group) has the job's settings too: its token, the
  // job file's transport and integrity, and the clock of the time the script is blocked, so that
  // its step log counts waits on every group.
  return c10::make_intrusive<cohort::dist::ProcessGroupCohort>(
      store, rank, size, timeout,
      g_job ? g_job->group_settings() : cohort::dist::settings_from_environment());
}

cohort::python::JobWorker& job() {
  if (!g_job)
    throw cohort::ConfigError("this process is not a worker of a job `cohort run` started");
  return *g_job;
}

}  // namespace

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
  py::register_exception<cohort::elastic::ExcludedError>(m, "ExcludedError", error.ptr());

  m.def("_create_process_group", &create_process_group, py::arg("store"), py::arg("rank"),
        py::arg("world_size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "The creator torch.distributed calls for init_process_group('cohort') and new_group().");

  // The job worker (job_worker.h), driven by cohort/__init__.py and cohort/job.py.
  m.def(
      "_job_start",
      [] {
        if (g_job) return true;
        auto options = cohort::python::JobWorker::options_from_environment();
        if (!options) return false;
        g_job = std::make_shared<cohort::python::JobWorker>(*options);
        return true;
      },
      py::call_guard<py::gil_scoped_release>(),
      "Joins the job `cohort run` started this process for; False when it did not.");
  m.def(
      "_job_rank", [] { return job().rank(); }, "This worker's rank in the job.");
  // Membership, for cohort.elastic: (epoch, rank in the epoch, world size).
  auto place = [](const cohort::elastic::Membership& m) {
    return py::make_tuple(m.epoch, m.rank_of(job().rank()), m.members.size());
  };
  m.def("_job_join", [place] {
    cohort::elastic::Membership m;
    {
      py::gil_scoped_release release;
      m = job().join();
    }
    return place(m);
  });
  m.def(
      "_job_rejoin",
      [place](const std::string& info, const std::string& reason) {
        cohort::elastic::Membership m;
        {
          py::gil_scoped_release release;
          m = job().rejoin(nlohmann::json::parse(info), reason);
        }
        return place(m);
      },
      py::arg("info"), py::arg("reason"));
  m.def("_job_change_requested", [] { return job().change_requested(); });
  m.def("_job_comm_failure", [] { return job().comm_failure(); });
  m.def(
      "_job_report", [](const std::string& record) { job().report(nlohmann::json::parse(record)); },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_job_finish",
      [](const std::string& summary) {
        if (g_job) g_job->finish(nlohmann::json::parse(summary));
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_job_failed",
      [](const std::string& what, bool timed_out) {
        if (g_job) g_job->fail(what, timed_out);
      },
      py::call_guard<py::gil_scoped_release>());

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
      .def("start", [](cohort::dist::CompressionHooks& hooks, const std::string& method,
                       const at::Tensor& buffer, size_t index,
                       const std::vector<at::Tensor>& gradients,
                       const std::vector<at::Tensor>& parameters,
                       const std::shared_ptr<torch::jit::PythonFutureWrapper>& future,
                       const py::object& result) {
        // The hooks' thread completes the torch future without the GIL: the value DDP reads
        // back (a Python object, as for any Python hook) is made here, on this Python thread,
        // and handed to the future, which holds it from then on. A thread that took the GIL
        // there could wait forever on an interpreter that is exiting.
        c10::intrusive_ptr<c10::ivalue::Future> fut = future->fut;
        c10::IValue value = torch::jit::toIValue(result, c10::PyObjectType::get());
        hooks.start(cohort::compress::parse_method(method), buffer, index, gradients, parameters,
                    [fut, value = std::move(value)](const std::string& error) mutable {
                      if (error.empty()) {
                        fut->markCompleted(std::move(value));
                      } else {
                        fut->setError(std::make_exception_ptr(cohort::Error(error)));
                      }
                    });
      });
}
