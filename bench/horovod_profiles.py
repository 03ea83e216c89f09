#!/usr/bin/python3
"""Write `cohort simulate` profiles for Horovod's published tf_cnn_benchmarks runs.

Horovod's benchmark (docs/benchmarks.rst in horovod/horovod) ran tf_cnn_benchmarks
with synthetic data, batch 64 per GPU and --variable_update horovod on servers with
4 Pascal GPUs each, connected by a RoCE-capable 25 Gbit/s network. Its published
scaling efficiencies are the figures `cohort simulate` is checked against:

    GPUs   servers  Inception V3  ResNet-101  VGG-16   source
    128    32       90%           90%         79%      README, 2017-10-17 (6bb6a2db)
    512    128      90%           90%         68%      docs/benchmarks.rst

This script builds one profile per model from public figures only (each cited in
the profile's "sources"): every trainable tensor of the model as tf_cnn_benchmarks
defines it, in the order backward produces it, with the time at which it is ready
computed from the layer's share of the model's multiply-accumulates; the single-GPU
step time from Horovod's own baseline on that cluster; and link figures for PCIe
within a server and 25 Gbit/s RoCE between servers.

Usage: /usr/bin/python3 bench/horovod_profiles.py [OUT_DIR]   (default bench/profiles)
Standard library only.
"""

import json
import os
import sys

NCLASS = 1001  # tf_cnn_benchmarks' ImageNet label count (models/model.py, nclass=1001)

# ---------------------------------------------------------------------------------------
# Hardware figures (public or stated assumptions; each is repeated in "sources").
# ---------------------------------------------------------------------------------------
HBM2_GBYTES_PER_S = 732.0          # Tesla P100 (16 GB, SXM2 and PCIe) HBM2 peak bandwidth
REDUCE_BYTES_MOVED_PER_OUT = 3.0   # reduce a += b: read a, read b, write a
PCIE_GBYTES_PER_S = 10.0           # NCCL busbw over PCIe 3.0 x16 within a server (assumption)
PCIE_LATENCY_US = 10.0             # assumption
NET_GBYTES_PER_S = 25.0 / 8.0      # 25 Gbit/s RoCE = 3.125 GB/s per direction
NET_LATENCY_US = 10.0              # NCCL over RoCE (assumption)
HOST_CORES = 32                    # assumption: Horovod does not publish the servers' CPUs
RANKS_PER_HOST = 4                 # 4 Pascal GPUs per server, one process per GPU
BATCH = 64

# Horovod README at d54e3a88 (2017-09-05), "Baseline single-GPU (batch size=64)" on the
# 4-server, 4-Pascal-GPU, RoCE 25 Gbit/s cluster, images/sec.
BASELINE_IMAGES_PER_S = {"inception3": 134.4, "resnet101": 119.4, "vgg16": 130.9}
# Published scaling efficiency (128 GPUs: README 2017-10-17; 512 GPUs: docs/benchmarks.rst).
PUBLISHED = {"inception3": (90, 90), "resnet101": (90, 90), "vgg16": (79, 68)}
# Trainable parameter counts the layer lists below must reproduce (the totals of an
# independent per-model parameter-count formula; asserted in build_profile).
EXPECTED_PARAMS = {"vgg16": 138361641, "resnet101": 44551209, "inception3": 23819401}


# ---------------------------------------------------------------------------------------
# A tiny model builder that mirrors tf_cnn_benchmarks' ConvNetBuilder (convnet_builder.py):
# the same layer calls, variable scopes and counters, the same output-size rules, but it
# only records each layer's trainable tensors and multiply-accumulates.
# ---------------------------------------------------------------------------------------
def out_dim(size, k, stride, mode):
    """Output length along one axis, as TensorFlow computes it."""
    if mode == "SAME":
        return -(-size // stride)                      # ceil(size / stride)
    if mode == "VALID":
        return (size - k) // stride + 1
    if mode == "SAME_RESNET":
        # convnet_builder.conv: stride 1 uses 'SAME'; otherwise pads k-1 (beg (k-1)//2)
        # explicitly and runs 'VALID'.
        if stride == 1:
            return -(-size // stride)
        return (size + (k - 1) - k) // stride + 1
    raise ValueError(mode)


class Builder:
    def __init__(self, image, channels=3, batch_norm=False, bn_scale=False):
        self.h = self.w = image
        self.c = channels
        self.use_batch_norm = batch_norm
        self.bn_scale = bn_scale
        self.counts = {}
        self.scope = []
        self.layers = []  # forward (creation) order

    def _count(self, key):
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        return key + str(n)

    def _prefix(self):
        return "".join(s + "/" for s in self.scope)

    def conv(self, cout, kh, kw, sh=1, sw=1, mode="SAME", inp=None, use_batch_norm=None,
             bias=True):
        """convnet_builder.conv: kernel [kh, kw, cin, cout] without bias; 'biases' only
        when there is no batch norm (and bias is not None); batch norm adds beta, and gamma
        when scale=True."""
        h, w, cin = inp if inp is not None else (self.h, self.w, self.c)
        oh, ow = out_dim(h, kh, sh, mode), out_dim(w, kw, sw, mode)
        bn = self.use_batch_norm if use_batch_norm is None else use_batch_norm
        name = self._prefix() + self._count("conv")
        tensors = [(name + "/conv2d/kernel", cout, cin * kh * kw)]   # PyTorch [out, in*kh*kw]
        if bn:
            bnname = name + "/" + self._count("batchnorm")
            # tf.layers.BatchNormalization (use_tf_layers defaults to True) creates gamma, then beta.
            if self.bn_scale:
                tensors.append((bnname + "/gamma", 1, cout))
            tensors.append((bnname + "/beta", 1, cout))
        elif bias:
            tensors.append((name + "/biases", 1, cout))
        self.layers.append({"name": name, "macs": oh * ow * cout * cin * kh * kw,
                            "tensors": tensors})
        self.h, self.w, self.c = oh, ow, cout
        return (oh, ow, cout)

    def pool(self, kh, kw, sh, sw, mode, inp=None):
        """mpool/apool: no parameters; the output size only (work neglected)."""
        h, w, c = inp if inp is not None else (self.h, self.w, self.c)
        self.h, self.w, self.c = out_dim(h, kh, sh, mode), out_dim(w, kw, sw, mode), c
        return (self.h, self.w, self.c)

    def reshape(self, features):
        self.h, self.w, self.c = 1, 1, features

    def affine(self, cout):
        """convnet_builder.affine: weights [in, out] and biases [out]; PyTorch's Linear
        weight is [out, in], so rows = out, cols = in."""
        cin = self.h * self.w * self.c
        name = self._prefix() + self._count("affine")
        self.layers.append({"name": name, "macs": cin * cout,
                            "tensors": [(name + "/weights", cout, cin),
                                        (name + "/biases", 1, cout)]})
        self.h, self.w, self.c = 1, 1, cout

    def inception_module(self, name, cols):
        """convnet_builder.inception_module: columns in order, each column's first layer on
        the module's input, ('share',) reuses the previous column's layer at that depth,
        the output is the channel concatenation of each column's last layer."""
        inp = (self.h, self.w, self.c)
        self.scope.append(self._count(name))
        col_out = []
        for c, col in enumerate(cols):
            col_out.append([])
            cur = inp
            for l, layer in enumerate(col):
                kind, args = layer[0], layer[1:]
                if kind == "conv":
                    cout, kh, kw = args[0], args[1], args[2]
                    sh, sw = (args[3], args[4]) if len(args) > 3 else (1, 1)
                    mode = args[5] if len(args) > 5 else "SAME"
                    cur = self.conv(cout, kh, kw, sh, sw, mode, inp=cur)
                elif kind in ("mpool", "apool"):
                    kh, kw, sh, sw = args[0], args[1], args[2], args[3]
                    mode = args[4] if len(args) > 4 else "VALID"
                    cur = self.pool(kh, kw, sh, sw, mode, inp=cur)
                elif kind == "share":
                    cur = col_out[c - 1][l]
                else:
                    raise KeyError(kind)
                col_out[c].append(cur)
        self.scope.pop()
        outs = [col[-1] for col in col_out]
        assert all(o[:2] == outs[0][:2] for o in outs), (name, outs)
        self.h, self.w = outs[0][0], outs[0][1]
        self.c = sum(o[2] for o in outs)


# ---------------------------------------------------------------------------------------
# The three models, call for call as tf_cnn_benchmarks builds them.
# ---------------------------------------------------------------------------------------
def vgg16():
    """models/vgg_model.py: _construct_vgg(cnn, [2, 2, 3, 3, 3]) at 224x224; convs 3x3 'SAME'
    with biases (no batch norm); mpool(2, 2) (stride 2, 'VALID'); affine 4096, 4096; then
    model.py's final affine(nclass)."""
    b = Builder(224)
    for n, width in zip([2, 2, 3, 3, 3], [64, 128, 256, 512, 512]):
        for _ in range(n):
            b.conv(width, 3, 3)
        b.pool(2, 2, 2, 2, "VALID")
    assert (b.h, b.w, b.c) == (7, 7, 512)
    b.reshape(512 * 7 * 7)
    b.affine(4096)
    b.affine(4096)
    b.affine(NCLASS)
    return b.layers


def resnet101():
    """models/resnet_model.py, resnet101 = ResnetModel('resnet101', (3, 4, 23, 3)), version v1
    (stride on the block's first 1x1 conv), batch norm with scale=True, convs with bias=None;
    the projection shortcut (1x1 conv + batch norm, created first in the block) where the
    depth changes; spatial_mean then model.py's final affine(nclass)."""
    b = Builder(224, batch_norm=True, bn_scale=True)
    b.conv(64, 7, 7, 2, 2, mode="SAME_RESNET")
    b.pool(3, 3, 2, 2, "SAME")
    assert (b.h, b.w) == (56, 56)
    for stage, (n, depth, bott) in enumerate(zip((3, 4, 23, 3), (256, 512, 1024, 2048),
                                                 (64, 128, 256, 512))):
        for i in range(n):
            stride = 2 if (stage > 0 and i == 0) else 1
            inp = (b.h, b.w, b.c)
            b.scope.append(b._count("resnet_v1"))
            if depth != inp[2]:
                b.conv(depth, 1, 1, stride, stride, inp=inp)          # shortcut (no relu)
            # depth == in_size with stride 2 would be an apool shortcut: never happens here.
            b.conv(bott, 1, 1, stride, stride, inp=inp)
            b.conv(bott, 3, 3, 1, 1, mode="SAME_RESNET")
            b.conv(depth, 1, 1, 1, 1)
            b.scope.pop()
    assert (b.h, b.w, b.c) == (7, 7, 2048)
    b.reshape(2048)  # spatial_mean
    b.affine(NCLASS)
    return b.layers


def inception3():
    """models/inception_model.py, Inceptionv3Model(auxiliary=False) at 299x299; batch norm
    with the builder's default config (scale=False: beta only), convs without biases; the
    final apool(8, 8) and reshape, then model.py's final affine(nclass)."""
    b = Builder(299, batch_norm=True, bn_scale=False)

    def a(n):
        b.inception_module("incept_v3_a", [
            [("conv", 64, 1, 1)], [("conv", 48, 1, 1), ("conv", 64, 5, 5)],
            [("conv", 64, 1, 1), ("conv", 96, 3, 3), ("conv", 96, 3, 3)],
            [("apool", 3, 3, 1, 1, "SAME"), ("conv", n, 1, 1)]])

    def b_():
        b.inception_module("incept_v3_b", [
            [("conv", 384, 3, 3, 2, 2, "VALID")],
            [("conv", 64, 1, 1), ("conv", 96, 3, 3), ("conv", 96, 3, 3, 2, 2, "VALID")],
            [("mpool", 3, 3, 2, 2, "VALID")]])

    def c(n):
        b.inception_module("incept_v3_c", [
            [("conv", 192, 1, 1)],
            [("conv", n, 1, 1), ("conv", n, 1, 7), ("conv", 192, 7, 1)],
            [("conv", n, 1, 1), ("conv", n, 7, 1), ("conv", n, 1, 7), ("conv", n, 7, 1),
             ("conv", 192, 1, 7)],
            [("apool", 3, 3, 1, 1, "SAME"), ("conv", 192, 1, 1)]])

    def d():
        b.inception_module("incept_v3_d", [
            [("conv", 192, 1, 1), ("conv", 320, 3, 3, 2, 2, "VALID")],
            [("conv", 192, 1, 1), ("conv", 192, 1, 7), ("conv", 192, 7, 1),
             ("conv", 192, 3, 3, 2, 2, "VALID")],
            [("mpool", 3, 3, 2, 2, "VALID")]])

    def e(pooltype):
        b.inception_module("incept_v3_e", [
            [("conv", 320, 1, 1)], [("conv", 384, 1, 1), ("conv", 384, 1, 3)],
            [("share",), ("conv", 384, 3, 1)],
            [("conv", 448, 1, 1), ("conv", 384, 3, 3), ("conv", 384, 1, 3)],
            [("share",), ("share",), ("conv", 384, 3, 1)],
            [("mpool" if pooltype == "max" else "apool", 3, 3, 1, 1, "SAME"),
             ("conv", 192, 1, 1)]])

    b.conv(32, 3, 3, 2, 2, mode="VALID")
    assert (b.h, b.w) == (149, 149)
    b.conv(32, 3, 3, 1, 1, mode="VALID")
    b.conv(64, 3, 3, 1, 1, mode="SAME")
    assert (b.h, b.w) == (147, 147)
    b.pool(3, 3, 2, 2, "VALID")
    b.conv(80, 1, 1, 1, 1, mode="VALID")
    assert (b.h, b.w) == (73, 73)
    b.conv(192, 3, 3, 1, 1, mode="VALID")
    assert (b.h, b.w) == (71, 71)
    b.pool(3, 3, 2, 2, "VALID")
    assert (b.h, b.w, b.c) == (35, 35, 192)
    a(32)
    assert (b.h, b.w, b.c) == (35, 35, 256)
    a(64)
    a(64)
    assert (b.h, b.w, b.c) == (35, 35, 288)
    b_()
    assert (b.h, b.w, b.c) == (17, 17, 768)
    for n in (128, 160, 160, 192):
        c(n)
    assert (b.h, b.w, b.c) == (17, 17, 768)
    d()
    assert (b.h, b.w, b.c) == (8, 8, 1280)
    e("avg")
    e("max")
    assert (b.h, b.w, b.c) == (8, 8, 2048)
    b.pool(8, 8, 1, 1, "VALID")
    b.reshape(2048)
    b.affine(NCLASS)
    return b.layers


# ---------------------------------------------------------------------------------------
# Profile assembly.
# ---------------------------------------------------------------------------------------
def r6(x):
    return round(x, 6)


HOROVOD_SOURCES = [
    "Target: horovod/horovod docs/benchmarks.rst: '128 servers with 4 Pascal GPUs each connected by a "
    "RoCE-capable 25 Gbit/s network. Horovod achieves 90% scaling efficiency for both Inception V3 and "
    "ResNet-101, and 68% scaling efficiency for VGG-16' (512 GPUs); run as tf_cnn_benchmarks.py --model "
    "<model> --batch_size 64 --variable_update horovod (synthetic data, the default).",
    "Target: horovod/horovod README.md at 6bb6a2db (2017-10-17, 'README updates (#44)'): 128-GPU benchmark "
    "on 32 servers with 4 Pascal GPUs each, RoCE-capable 25 Gbit/s: 90% (Inception V3), 90% (ResNet-101), "
    "79% (VGG-16) scaling efficiency.",
]


def build_profile(key, title, layers, arch_source, arch_notes):
    # ---- tensors in backward order, ready times from cumulative backward MACs ----
    total_macs = sum(l["macs"] for l in layers)
    step_ms = BATCH / BASELINE_IMAGES_PER_S[key] * 1e3
    total_bytes = sum(4 * r * c for l in layers for (_, r, c) in l["tensors"])
    params = total_bytes // 4
    assert params == EXPECTED_PARAMS[key], (key, params, EXPECTED_PARAMS[key])

    optimizer_ms = r6(total_bytes * 3 / (HBM2_GBYTES_PER_S * 1e9) * 1e3)
    fb_ms = step_ms - optimizer_ms
    forward_ms = r6(fb_ms / 3.0)
    backward_ms = r6(fb_ms - forward_ms)

    grads = []
    cum = 0
    last = 0.0
    for layer in reversed(layers):
        cum += layer["macs"]
        ready = min(r6(backward_ms * cum / total_macs), backward_ms)
        # Within a layer, backward yields the batch-norm (or bias) gradients before the
        # kernel's: reverse creation order. All share the layer's ready time.
        for (name, rows, cols) in reversed(layer["tensors"]):
            assert ready >= last
            grads.append({"name": name, "bytes": 4 * rows * cols, "rows": rows, "cols": cols,
                          "ready_ms": ready})
            last = ready
    assert cum == total_macs and grads[-1]["ready_ms"] == backward_ms
    assert sum(g["bytes"] for g in grads) == total_bytes
    for g in grads:
        assert g["rows"] * g["cols"] * 4 == g["bytes"]

    n128, n512 = PUBLISHED[key]
    sources = HOROVOD_SOURCES + [
        "Published scaling efficiency for %s: %d%% at 128 GPUs, %d%% at 512 GPUs." % (title, n128, n512),
        "Compute: horovod/horovod README.md at d54e3a88 (2017-09-05, 'Update README (#19)'): 'The first "
        "benchmark was done on 4 servers with 4 Pascal GPUs each connected by RoCE-capable 25 Gbit/s "
        "network', 'Baseline single-GPU (batch size=64)': %s %.1f images/sec. Step time = 64 / %.1f = "
        "%.3f ms = forward_ms + backward_ms + optimizer_ms (data_ms = 0: tf_cnn_benchmarks' synthetic "
        "data is generated on the GPU)." % (title, BASELINE_IMAGES_PER_S[key], BASELINE_IMAGES_PER_S[key],
                                            step_ms),
        "Assumption: forward : backward = 1 : 2 of (step - optimizer) - backward computes gradients with "
        "respect to both the activations and the weights, each about as costly as the forward pass (the "
        "usual rule of thumb, not a measurement).",
        "Assumption: each layer's backward time is proportional to its multiply-accumulates (conv: "
        "out_h x out_w x cout x cin x kh x kw; fully connected: in x out; total %.4g MACs per image); "
        "batch norm, bias, ReLU and pooling are folded into the layer they follow. ready_ms = backward_ms "
        "x the cumulative MAC fraction up to and including the tensor's layer, walking layers in reverse "
        "forward (variable-creation) order; the first convolution's tensors are ready at backward_ms."
        % total_macs,
        "Optimizer: tf_cnn_benchmarks' default --optimizer=sgd (plain gradient descent, "
        "scripts/tf_cnn_benchmarks/benchmark_cnn.py): w -= lr x g reads w and g and writes w, 12 bytes "
        "per fp32 parameter = %d bytes x 3 / 732 GB/s = %.3f ms (memory-bound, at HBM2 peak)."
        % (total_bytes, optimizer_ms),
        "Architecture: %s (github.com/tensorflow/benchmarks, scripts/tf_cnn_benchmarks/models/), built "
        "with scripts/tf_cnn_benchmarks/convnet_builder.py (conv: kernel without bias under batch norm, "
        "'biases' otherwise; affine: weights and biases) and models/model.py's final "
        "affine(nclass=1001). %s Trainable parameters: %d (%d tensors, %d bytes fp32), asserted by the "
        "generator bench/horovod_profiles.py. Tensor names follow tf_cnn_benchmarks' variable scopes "
        "(without the tower prefix); rows x cols in PyTorch's convention (conv [out, in*kh*kw], "
        "linear [out, in], vectors 1 x n)."
        % (arch_source, arch_notes, params, len(grads), total_bytes),
        "Assumption: host.cores = 32 per server (Horovod does not publish the servers' CPUs); "
        "ranks_per_host = 4 (one process per GPU, 4 Pascal GPUs per server).",
        "Kernels: reduce_gbytes_per_s = 732 / 3 = 244: NVIDIA Tesla P100 HBM2 peak bandwidth 732 GB/s "
        "(NVIDIA Tesla P100 datasheet / 'NVIDIA Tesla P100' whitepaper, 16 GB SXM2 and PCIe parts); a "
        "reduction a += b moves 3 bytes (read a, read b, write a) per output byte. Assumption: the "
        "Pascal GPUs are P100s (Horovod says only 'Pascal').",
        "Transports within a server (shm, and tcp given the same figures): the GPUs sit on PCIe 3.0 x16, "
        "15.75 GB/s theoretical per direction; NCCL's measured bus bandwidth over PCIe within a server "
        "is about 10 GB/s - assumption: 10 GB/s, latency 10 us.",
        "Network between servers: 25 Gbit/s RoCE = 3.125 GB/s per direction, one stream can fill it; "
        "NCCL over RoCE (GPUDirect/RDMA, no host copy). Assumption: latency 10 us "
        "for NCCL over RoCE.",
        "Note (not added to latency): Horovod's background thread negotiates and launches collectives "
        "once per cycle of 5 ms - hard-coded sleep_for(milliseconds(5)) in horovod/tensorflow/mpi_ops.cc "
        "at d54e3a88 (2017) through v0.11, horovod/common/operations.cc in v0.12; HOROVOD_CYCLE_TIME "
        "(default 5 ms) from commit 92454dae (2018-06, v0.13.3) on.",
        "Note: Horovod's Tensor Fusion (README at d54e3a88) fuses the tensors ready in a cycle into "
        "one allreduce, fusion buffer HOROVOD_FUSION_THRESHOLD default 64 MB "
        "(tensor_fusion_threshold = 64 * 1024 * 1024 in horovod/tensorflow/mpi_ops.cc).",
    ]

    profile = {
        "profile": 1,
        "name": "horovod-%s: tf_cnn_benchmarks %s, batch 64/GPU, 4 Pascal GPUs/server, 25 Gbit/s RoCE"
                % (key, title),
        "sources": sources,
        "host": {"cores": HOST_CORES, "ranks_per_host": RANKS_PER_HOST},
        "transports": {
            "tcp": {"latency_us": PCIE_LATENCY_US, "gbytes_per_s": PCIE_GBYTES_PER_S},
            "shm": {"latency_us": PCIE_LATENCY_US, "gbytes_per_s": PCIE_GBYTES_PER_S},
            "network": {"latency_us": NET_LATENCY_US, "gbytes_per_s": NET_GBYTES_PER_S},
        },
        "kernels": {"reduce_gbytes_per_s": r6(HBM2_GBYTES_PER_S / REDUCE_BYTES_MOVED_PER_OUT)},
        "compute": {
            "device": "gpu",
            "threads": 1,
            "batch_per_worker": BATCH,
            "data_ms": 0,
            "forward_ms": forward_ms,
            "backward_ms": backward_ms,
            "optimizer_ms": optimizer_ms,
            "gradients": grads,
        },
    }
    summary = ("%-10s %4d tensors, %11d bytes (%d params), %.4g MACs/image; step %.3f ms = "
               "forward %.3f + backward %.3f + optimizer %.3f ms"
               % (key, len(grads), total_bytes, params, total_macs, step_ms, forward_ms,
                  backward_ms, optimizer_ms))
    return profile, summary


MODELS = [
    ("inception3", "Inception V3", inception3, "models/inception_model.py (Inceptionv3Model)",
     "299x299 input, no auxiliary head; batch norm with the builder's default scale=False (beta only)."),
    ("resnet101", "ResNet-101", resnet101, "models/resnet_model.py (resnet101, v1)",
     "224x224 input; layer counts (3, 4, 23, 3); batch norm scale=True (gamma and beta); projection "
     "shortcut (1x1 conv + batch norm) where the depth changes, stride 2 on the first 1x1 conv of "
     "stages 2-4."),
    ("vgg16", "VGG-16", vgg16, "models/vgg_model.py (Vgg16Model)",
     "224x224 input; 13 3x3 convs with biases, no batch norm; affine 4096, 4096, 1001 with biases."),
]


def main(argv):
    if len(argv) > 2:
        sys.stderr.write("usage: %s [OUT_DIR]\n" % argv[0])
        return 2
    out = argv[1] if len(argv) == 2 else os.path.join("bench", "profiles")
    os.makedirs(out, exist_ok=True)
    for key, title, fn, arch_source, arch_notes in MODELS:
        profile, summary = build_profile(key, title, fn(), arch_source, arch_notes)
        path = os.path.join(out, "horovod-%s.json" % key)
        with open(path, "w") as f:
            json.dump(profile, f, indent=2)
            f.write("\n")
        print("%s -> %s" % (summary, path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
