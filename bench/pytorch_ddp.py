#!/usr/bin/python3
"""PyTorch DDP baseline for Cohort's training benchmark.

Trains the same models (Cohort's model zoo: mlp, cnn), on the same data (Fashion-MNIST from
Debian's dataset-fashion-mnist), with the same hyperparameters (SGD, lr, momentum, per-worker batch
size, epochs) and one thread per worker, using torch.distributed with the Gloo backend. Launch with
torchrun (Debian's needs --redirects 1 --tee 1 on Python 3.11):

  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
      bench/pytorch_ddp.py --model cnn --epochs 1 --batch-size 64 --lr 0.05 --momentum 0.9

Rank 0 prints one JSON line: samples_per_sec (all samples trained on by all ranks / training wall
time, data loading and evaluation excluded, like Cohort's summary.json), test_accuracy, and times.

Time to accuracy (like Cohort's train.eval_every_steps and train.stop_at_accuracy):
--eval-every-steps N evaluates on the test set every N steps (all ranks, each its share, like
Cohort) and rank 0 prints {"event": "eval", "step", "test_accuracy", "train_seconds"} with the
training time so far, evaluations excluded; --stop-at-accuracy A stops at the first evaluation
that reaches A. --fp16-hook compresses gradients to fp16 for the allreduce with PyTorch's own
communication hook (ddp_comm_hooks.default_hooks.fp16_compress_hook).

--post-local-sgd H trains with PyTorch's post-local SGD (post_localSGD_hook and
PostLocalSGDOptimizer with a PeriodicModelAverager of period H, after --local-sgd-warmup steps of
synchronous training).
--powersgd-hook R compresses gradients with PyTorch's PowerSGD hook (ddp_comm_hooks.powerSGD_hook,
rank R, error feedback and warm start on, plain allreduce for the first --powersgd-start steps).
On Gloo (torch 1.13) the hook as shipped aborts or hangs once a model has more than one bucket:
it starts its P and Q allreduces from future callbacks, which Gloo completes on its worker
threads, so the ranks issue their collectives in different orders and Gloo, which matches them by
a per-group counter, pairs different operations ("op.preamble.length <= op.nbytes"). It runs here
wrapped so that each bucket's hook finishes before the next starts (what a PyTorch user on Gloo
must do; it costs the hook's overlap with backward). batched_powerSGD_hook fails in torch 1.13
whatever the backend (a 2-D Q given to a 3-D _orthogonalize).

--memory-format channels_last runs the convolutional model in NHWC, the one line a PyTorch user
adds for it (model.to(memory_format=torch.channels_last), and the same for each input batch);
contiguous (the default) is PyTorch's NCHW. The result line names the layout.

--backend cohort runs the same script on Cohort's torch.distributed backend (import cohort; the
package from the build tree on PYTHONPATH) instead of Gloo: the one word a PyTorch user changes.
The result line names the backend.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import (default_hooks, post_localSGD_hook,
                                                         powerSGD_hook)
from torch.distributed.algorithms.model_averaging import averagers
from torch.distributed.optim import PostLocalSGDOptimizer


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(path, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(path, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(path, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    raise SystemExit(f"unknown model {name}")


def bind_to_share(local_rank, local_world):
    """Every thread of this process onto a contiguous, disjoint share of the CPUs it may use, when
    there are at most as many workers as CPUs (Cohort's base/cpu_binding.h, mpirun's default)."""
    cpus = sorted(os.sched_getaffinity(0))
    if local_world < 2 or local_world > len(cpus):
        return
    each, extra = divmod(len(cpus), local_world)
    begin = local_rank * each + min(local_rank, extra)
    share = cpus[begin:begin + each + (1 if local_rank < extra else 0)]
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), share)


def add_training_arguments(p):
    """What every DDP harness here takes: the model, the data, the hyperparameters, the threads,
    the memory layout and the CPU binding (setup_worker applies the last three)."""
    p.add_argument("--model", default="cnn")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--memory-format", choices=["contiguous", "channels_last"],
                   default="contiguous")
    p.add_argument("--bind-to", choices=["none", "auto"], default="none",
                   help="auto: each worker on its own share of the CPUs (by LOCAL_RANK), as "
                        "mpirun binds its ranks and `cohort run` its workers; torchrun binds "
                        "nothing (none, the default)")


def setup_worker(args):
    """Binds this worker (--bind-to) and sets its threads; returns its memory format."""
    if args.bind_to == "auto":
        bind_to_share(int(os.environ.get("LOCAL_RANK", "0")),
                      int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(args.threads)
    return (torch.channels_last if args.memory_format == "channels_last"
            else torch.contiguous_format)


def main():
    p = argparse.ArgumentParser()
    add_training_arguments(p)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--eval-every-steps", type=int, default=0)
    p.add_argument("--stop-at-accuracy", type=float, default=0)
    p.add_argument("--fp16-hook", action="store_true")
    p.add_argument("--powersgd-hook", type=int, default=0, metavar="RANK")
    p.add_argument("--powersgd-start", type=int, default=10)
    p.add_argument("--post-local-sgd", type=int, default=0, metavar="PERIOD")
    p.add_argument("--local-sgd-warmup", type=int, default=0, metavar="STEPS")
    p.add_argument("--backend", choices=["gloo", "cohort"], default="gloo")
    args = p.parse_args()
    layout = setup_worker(args)
    if args.backend == "cohort":
        import cohort  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    x_train, y_train = load(args.data, "train")
    x_test, y_test = load(args.data, "test")
    model = make_model(args.model).to(memory_format=layout)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    if args.fp16_hook:
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    if args.powersgd_hook:
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=args.powersgd_hook,
            start_powerSGD_iter=max(2, args.powersgd_start))

        def powersgd_in_bucket_order(state, bucket):
            fut = powerSGD_hook.powerSGD_hook(state, bucket)
            fut.wait()  # every collective of this bucket issued before the next bucket's
            return fut

        ddp.register_comm_hook(state, powersgd_in_bucket_order)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    if args.post_local_sgd:
        # Post-local SGD as PyTorch documents it: the hook allreduces gradients for the first
        # --local-sgd-warmup steps and then not at all (post_local_gradient_allreduce=False: no
        # intra-node allreduce, every worker is a host of its own), and the optimizer averages
        # the models every PERIOD steps.
        ddp.register_comm_hook(
            post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=None,
                                                 start_localSGD_iter=args.local_sgd_warmup,
                                                 post_local_gradient_allreduce=False),
            post_localSGD_hook.post_localSGD_hook)
        # The averager counts its calls from 0 and averages at call warmup_steps and every
        # period after it: warmup_steps = W + H - 1 averages after steps W + H, W + 2H, ..., as
        # Cohort's local_sgd does, so that evaluations every multiple of H see an averaged model
        # in both.
        opt = PostLocalSGDOptimizer(
            optim=opt, averager=averagers.PeriodicModelAverager(
                period=args.post_local_sgd,
                warmup_steps=args.local_sgd_warmup + args.post_local_sgd - 1))
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(len(y_train)), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)

    def evaluate():
        model.eval()
        correct = torch.zeros(2, dtype=torch.float64)
        with torch.no_grad():
            sel = torch.arange(rank, len(y_test), world)
            for s in range(0, len(sel), 1000):
                b = sel[s:s + 1000]
                xb = x_test[b].to(memory_format=layout)
                correct[0] += (model(xb).argmax(1) == y_test[b]).sum()
                correct[1] += len(b)
        dist.all_reduce(correct)
        model.train()
        return (correct[0] / correct[1]).item()

    samples = step = 0
    eval_seconds = 0.0
    accuracy = None
    done = False
    dist.barrier()
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        for start in range(0, len(idx), args.batch_size):
            b = idx[start:start + args.batch_size]
            xb, yb = x_train[b].to(memory_format=layout), y_train[b]
            opt.zero_grad()
            loss = F.cross_entropy(ddp(xb), yb)
            loss.backward()
            opt.step()
            samples += len(b)
            step += 1
            accuracy = None
            if args.eval_every_steps > 0 and step % args.eval_every_steps == 0:
                te = time.perf_counter()
                trained = te - t0 - eval_seconds  # training time so far, evaluations excluded
                accuracy = evaluate()
                eval_seconds += time.perf_counter() - te
                if rank == 0:
                    print(json.dumps({"event": "eval", "step": step, "test_accuracy": accuracy,
                                      "train_seconds": trained}), flush=True)
                done = args.stop_at_accuracy > 0 and accuracy >= args.stop_at_accuracy
            if rank == 0 and step % 10 == 0:  # how far it got, should it be stopped from outside
                print(json.dumps({"event": "step", "step": step}), flush=True)
            if done or (args.max_steps > 0 and step >= args.max_steps):
                done = True
                break
        if done:
            break
    dist.barrier()
    train_seconds = time.perf_counter() - t0 - eval_seconds

    if accuracy is None:
        accuracy = evaluate()
    total = torch.tensor([samples], dtype=torch.float64)
    dist.all_reduce(total)
    if rank == 0:
        print(json.dumps({
            "library": "pytorch-ddp", "model": args.model, "workers": world,
            "memory_format": args.memory_format, "backend": args.backend,
            "bind_to": args.bind_to, "cpus_per_worker": len(os.sched_getaffinity(0)),
            "samples": int(total.item()), "train_seconds": train_seconds,
            "samples_per_sec": total.item() / train_seconds,
            "test_accuracy": accuracy, "steps": step, "eval_seconds": eval_seconds,
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
