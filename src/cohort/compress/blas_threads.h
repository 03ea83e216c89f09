// The width of OpenBLAS's thread pool: PowerSGD's matrix products and libtorch's (its linear
// layers and their gradients) both run on it.
//
// OpenBLAS sizes the pool when it loads, before main(), from OPENBLAS_NUM_THREADS, else
// OMP_NUM_THREADS, else every CPU of the machine, and a pool thread with nothing to do polls
// with sched_yield for a while before it sleeps. Launchers that know a worker's thread budget put
// it in the worker's environment (cli/launchers.cc); a worker started any other way (by hand, by
// a cluster manager, `cohort worker --join`) would otherwise run every matrix product on as many
// threads as the machine has CPUs, and keep them polling between products, beside the other
// workers of its host. Measured on 2 CPUs, 4 workers of the CNN, one thread each: 98 ms a step
// with the machine-wide pool, 78 ms with one thread; 140 against 81 ms with PowerSGD.
#pragma once

namespace cohort::compress {

// Matrix products from now on use at most `threads` (>= 1) threads.
void set_blas_threads(int threads);
// The threads a matrix product may use now.
int blas_threads();

}  // namespace cohort::compress
