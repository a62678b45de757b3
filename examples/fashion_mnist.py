#!/usr/bin/python3
"""Fashion-MNIST with PyTorch on N ranks: the small CNN of
examples/fashion_mnist.cpp trained with kolo.torch's DistributedOptimizer
(Horovod's API; docs/training.md).

    build/bin/kolorun -np 2 env PYTHONPATH=build/python \\
        /usr/bin/python3 examples/fashion_mnist.py --epochs 3

Each rank reads its shard of the training set (a distributed sampler:
disjoint shards of equal length, reshuffled every epoch from --seed, the
same permutation on every rank) and computes gradients on --batch-size
images; the optimizer averages them across ranks before every step. The
learning rate is the base --lr scaled by the number of ranks (--scale) and
reached by a linear warm-up over --warmup-epochs, advanced every step
(Goyal et al.). Rank 0 draws a progress bar per epoch on stderr, then
prints the epoch's training loss (averaged over ranks), the accuracy on the
full test set (each rank evaluates a part, the counts are summed), images
per second (all ranks, over the slowest rank's time) and the time. A 1-rank
run records its results as JSON (the scheme of the C++ example) in
--baseline; a run on more ranks prints its speedup over that record, beside
the machine's ceiling when the record carries one (scripts/demo.py adds it:
two 1-rank runs at once), and says so when the record's run was of other
steps or batches.

--mode chooses how the ranks combine their work (docs/parameter_server.md):
allreduce (the default, above), or parameter servers: sync-ps, downpour,
easgd, which need servers among the ranks; with 1 server and 3 workers:

    build/bin/kolorun --servers 1 -np 4 env PYTHONPATH=build/python \\
        /usr/bin/python3 examples/fashion_mnist.py --mode downpour

sync-ps averages the workers' gradients on the servers (one allreduce step,
the optimizer's state on the servers; --scale linear as allreduce);
downpour applies each worker's gradient on its own as it arrives, at most
--staleness-bound versions stale (one worker's batch per update, so its
default --scale is none), and easgd steps each worker's own optimizer and
exchanges the elastic difference with the center every --easgd-period
steps (--easgd-alpha; --scale linear by default, measured better than none
on the center's accuracy: docs/performance-history.md, "Parameter servers"). Before evaluating, the workers
load the servers' parameters (easgd: the center variable; a worker's own
parameters are restored after). The JSON record adds each epoch's test
accuracy, for bench/ps_convergence.sh.

The data are the IDX files of Debian's dataset-fashion-mnist package, read
with gzip and NumPy (no download), or with --image-folder DIR JPEG files in
class folders (DIR/<class>/*.jpg, or DIR/train and DIR/test as
build/bin/fmnist-to-jpeg writes them: the C++ example's --data DIR),
decoded and resized to 28 x 28 grayscale by kolo's C++ reader on a
background thread (kolo.data.ImageFolderLoader) while the model trains:

    build/bin/fmnist-to-jpeg /tmp/fmnist-jpeg
    build/bin/kolorun -np 2 env PYTHONPATH=build/python \\
        /usr/bin/python3 examples/fashion_mnist.py --image-folder /tmp/fmnist-jpeg
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import kolo.torch as kolo
import kolo.torch.ps as ps

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530
DEFAULT_LR = {"sgd": 0.02, "adam": 0.001, "lars": 2.0}
MODES = {"allreduce": None, "sync-ps": "sync", "downpour": "downpour", "easgd": "easgd"}
# --decay names (those of the C++ example) -> kolo.lr.LRSchedule's.
DECAYS = {"constant": "none", "cosine": "cosine", "step": "step",
          "exp": "exponential"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Train a small CNN on Fashion-MNIST with kolo.torch")
    p.add_argument("--epochs", type=int, default=3, help="passes over the training set")
    p.add_argument("--batch-size", type=int, default=64, help="images per rank per step")
    p.add_argument("--lr", type=float, default=None,
                   help="the 1-rank learning rate (sgd 0.02, adam 0.001, lars 2.0)")
    p.add_argument("--mode", choices=list(MODES), default="allreduce",
                   help="allreduce, or parameter servers (kolorun --servers S): "
                        "sync-ps, downpour, easgd")
    p.add_argument("--staleness-bound", type=int, default=4,
                   help="downpour: a push more than this many versions stale is "
                        "refused and the worker pulls")
    p.add_argument("--easgd-alpha", type=float, default=0.5,
                   help="easgd: the elastic force")
    p.add_argument("--easgd-period", type=int, default=4,
                   help="easgd: steps between exchanges with the center")
    p.add_argument("--scale", choices=["linear", "sqrt", "none"], default=None,
                   help="scaling of --lr by the number of ranks (default: linear; "
                        "none for downpour)")
    p.add_argument("--warmup-epochs", type=float, default=0.0,
                   help="linear warm-up from --lr to the scaled rate over K epochs")
    p.add_argument("--decay", choices=sorted(DECAYS), default="constant",
                   help="after warm-up (cosine ends at the last epoch; step/exp "
                        "every epochs/3, factor 0.1)")
    p.add_argument("--optimizer", choices=["sgd", "adam", "lars"], default="adam",
                   help="SGD (momentum 0.9), Adam, or LARS (momentum 0.9, "
                        "weight decay 5e-4)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--seed", type=int, default=42,
                   help="model initialisation and shuffling")
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the IDX files")
    p.add_argument("--image-folder", default=None, metavar="DIR",
                   help="train on JPEG files instead of the IDX files: DIR/<class>/"
                        "*.jpg, or DIR/train (and DIR/test, then the test set) as "
                        "fmnist-to-jpeg writes them")
    p.add_argument("--test-folder", default=None, metavar="DIR",
                   help="test on the JPEG files of DIR/<class>/*.jpg (default: "
                        "DIR/test of --image-folder if there, else the IDX test set)")
    p.add_argument("--json", default=None, help="write the run's results as JSON")
    p.add_argument("--baseline", default=None,
                   help="the 1-rank record (default: fashion_mnist_py_1rank.json "
                        "in the build directory, else the current one)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop each epoch after this many steps (0: the whole shard)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.threads < 1 or a.max_steps < 0:
        p.error("--epochs, --batch-size and --threads must be >= 1, --max-steps >= 0")
    if a.scale is None:
        a.scale = "none" if a.mode == "downpour" else "linear"
    return a


# ---------------------------------------------------------------- data


def _read_idx(path, magic, what):
    """The payload of an IDX file (gzip or plain) as a uint8 array of the
    header's shape, after checking its magic number and size."""
    if not os.path.exists(path):
        plain = path[:-3] if path.endswith(".gz") else path
        if os.path.exists(plain):
            path = plain
        else:
            raise FileNotFoundError(
                "Fashion-MNIST %s not found: %s (install Debian's package: "
                "apt-get install dataset-fashion-mnist, or pass --data DIR)"
                % (what, path))
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: too short for an IDX header" % path)
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        raise ValueError("%s: IDX magic number 0x%x, expected 0x%x" % (path, got, magic))
    dims = magic & 0xFF
    header = 4 + 4 * dims
    shape = struct.unpack(">%dI" % dims, data[4:header])
    count = int(np.prod(shape))
    if len(data) - header != count:
        raise ValueError("%s: %d bytes of data, the header %s says %d"
                         % (path, len(data) - header, list(shape), count))
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def load_fashion_mnist(directory, train):
    """(images uint8 [n, 28, 28], labels int64 [n]) as torch tensors."""
    prefix = "train" if train else "t10k"
    images = _read_idx(os.path.join(directory, prefix + "-images-idx3-ubyte.gz"),
                       0x803, "images")
    labels = _read_idx(os.path.join(directory, prefix + "-labels-idx1-ubyte.gz"),
                       0x801, "labels")
    if images.shape[0] != labels.shape[0]:
        raise ValueError("%s: %d images but %d labels"
                         % (directory, images.shape[0], labels.shape[0]))
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def to_input(images):
    """uint8 [n, 28, 28] -> normalized float [n, 1, 28, 28]."""
    return ((images.float() * (1.0 / 255) - MEAN) / STD).unsqueeze(1)


class DistributedSampler:
    """Indices of this rank's shard of n samples. Every epoch (set_epoch) a
    permutation drawn from (seed, epoch), the same on every rank, is padded
    with its first elements to a multiple of the number of ranks and dealt
    round-robin: the shards are disjoint (apart from the fewer than `size`
    padded repeats) and of equal length, so every rank takes the same number
    of steps."""

    def __init__(self, n, rank, size, seed):
        self.n, self.rank, self.size, self.seed = n, rank, size, seed
        self.num_samples = (n + size - 1) // size
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def indices(self):
        g = torch.Generator().manual_seed(self.seed * 1000003 + self.epoch)
        order = torch.randperm(self.n, generator=g)
        pad = self.num_samples * self.size - self.n
        if pad:
            order = torch.cat([order, order[:pad]])
        return order[self.rank::self.size]


def image_folder_roots(image_folder, test_folder):
    """(training root or None, test root or None) of --image-folder and
    --test-folder: a folder holding train/ is the fmnist-to-jpeg layout (as
    the C++ example's --data), whose test/ is the test set unless
    --test-folder names one."""
    train_root = image_folder
    if image_folder and os.path.isdir(os.path.join(image_folder, "train")):
        train_root = os.path.join(image_folder, "train")
        test = os.path.join(image_folder, "test")
        if test_folder is None and os.path.isdir(test):
            test_folder = test
    return train_root, test_folder


class IdxTrainSet:
    """The IDX training set in memory, sharded by DistributedSampler."""

    def __init__(self, directory, rank, size, seed, batch_size):
        self.x, self.y = load_fashion_mnist(directory, train=True)
        self.sampler = DistributedSampler(len(self.y), rank, size, seed)
        self.batch_size = batch_size
        self.size, self.num_samples = len(self.y), self.sampler.num_samples
        self.classes = 10

    def epoch(self, epoch, steps):
        """(x, y) of the first `steps` batches of this rank's shard."""
        self.sampler.set_epoch(epoch)
        order = self.sampler.indices()
        for b in range(steps):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield to_input(self.x[idx]), self.y[idx]


class FolderTrainSet:
    """An image folder (kolo.data.ImageFolderLoader: kolo's C++ sampler and
    JPEG reader, decoding ahead on a background thread)."""

    def __init__(self, root, rank, size, seed, batch_size):
        from kolo.data import ImageFolderLoader
        self.loader = ImageFolderLoader(root, batch_size, image_size=28, channels=1,
                                        rank=rank, size=size, seed=seed, shuffle=True)
        self.size, self.num_samples = len(self.loader.folder), self.loader.num_samples
        self.classes = len(self.loader.classes)

    def epoch(self, epoch, steps):
        for images, labels in self.loader.batches(epoch, limit=steps):
            yield normalize(torch.from_numpy(images)), torch.from_numpy(labels)


def normalize(images):
    """float [n, 1, 28, 28] in [0, 1] -> normalized."""
    return (images - MEAN) / STD


class IdxTestSet:
    def __init__(self, directory):
        self.x, self.y = load_fashion_mnist(directory, train=False)
        self.size, self.classes = len(self.y), None

    def batch(self, lo, hi):
        return to_input(self.x[lo:hi]), self.y[lo:hi]


class FolderTestSet:
    def __init__(self, root):
        import kolo.data
        self.folder = kolo.data.ImageFolder(root, 28, 1)
        self.size, self.classes = len(self.folder), list(self.folder.classes)

    def batch(self, lo, hi):
        images, labels = self.folder.load_batch(list(range(lo, hi)))
        return normalize(torch.from_numpy(images)), torch.from_numpy(labels)


def evaluation_range(n, rank, size):
    """This rank's contiguous part of a validation set of n, unpadded: the
    parts cover it exactly once."""
    return n * rank // size, n * (rank + 1) // size


# ---------------------------------------------------------------- model


class Cnn(nn.Module):
    """conv 3x3 16, pool, conv 3x3 32, pool, fc 128, fc 10 (as the C++ example)."""

    def __init__(self, channels=1, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 16, 3)
        self.conv2 = nn.Conv2d(16, 32, 3)
        self.fc1 = nn.Linear(32 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 28 -> 26 -> 13
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 13 -> 11 -> 5
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def make_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return kolo.lr.LARS(params, lr=lr, momentum=0.9, weight_decay=5e-4)


def distribute(args, optimizer, model):
    """allreduce: kolo's DistributedOptimizer (gradients averaged across the
    ranks, then the optimizer steps on every rank); the other modes: the
    parameter servers' (kolo.torch.ps), which seed from worker 0 and make
    every worker pull before its first step."""
    if args.mode == "allreduce":
        optimizer = kolo.DistributedOptimizer(optimizer,
                                              named_parameters=model.named_parameters())
        kolo.broadcast_optimizer_state(optimizer, root_rank=0)
        return optimizer
    if args.optimizer == "lars":
        raise ValueError("--optimizer lars is not supported with --mode %s (the "
                         "parameter servers take sgd and adam)" % args.mode)
    return ps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                   mode=MODES[args.mode],
                                   staleness_bound=args.staleness_bound,
                                   easgd_alpha=args.easgd_alpha,
                                   easgd_period=args.easgd_period)


class servers_parameters:
    """Around an evaluation: with parameter servers, the model holds the
    servers' parameters (every worker has pushed its epoch, so all load the
    same version); easgd's center replaces the worker's own variables for
    the evaluation only."""

    def __init__(self, mode, optimizer, model):
        self.mode, self.optimizer, self.model = mode, optimizer, model
        self.saved = None

    def __enter__(self):
        if self.mode == "easgd":
            self.saved = [p.detach().clone() for p in self.model.parameters()]
        if self.mode != "allreduce":
            self.optimizer.pull()
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            with torch.no_grad():
                for p, v in zip(self.model.parameters(), self.saved):
                    p.copy_(v)
        return False


# ---------------------------------------------------------------- output


def progress_bar(epoch, epochs, done, total, loss, rate):
    width = 30
    filled = width * done // max(total, 1)
    bar = ("=" * filled + (">" if filled < width else "")).ljust(width)
    sys.stderr.write("\repoch %d/%d [%s] %3d%% %d/%d loss %.4f %.0f img/s"
                     % (epoch, epochs, bar, 100 * done // max(total, 1), done, total,
                        loss, rate))
    sys.stderr.flush()


def default_baseline_path():
    """<build>/fashion_mnist_py_1rank.json when kolo is imported from a build
    tree (<build>/python/kolo), else in the current directory."""
    build = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(kolo.__file__))))
    if os.path.exists(os.path.join(build, "CMakeCache.txt")):
        return os.path.join(build, "fashion_mnist_py_1rank.json")
    return "fashion_mnist_py_1rank.json"


def speedup_line(one, run):
    """The speedup of the record `run` over the 1-rank record `one`: with
    one's ceiling (ceiling_images_per_second: two 1-rank runs at once, written
    by scripts/demo.py) how near the run comes to what the machine allows,
    else the efficiency against ranks x one. Records of another batch size,
    number of steps per epoch or of epochs are not comparable: the line says
    which differ. None when `one` has no throughput."""
    r1 = float(one.get("images_per_second", 0))
    if r1 <= 0:
        return None
    rate, size = run["images_per_second"], run["ranks"]
    differ = [what for key, what in (("batch_size", "batch size"),
                                     ("steps_per_epoch", "steps per epoch"),
                                     ("epochs", "epochs"))
              if key in one and one[key] != run[key]]
    note = " [the 1-rank run used another %s]" % ", ".join(differ) if differ else ""
    ceiling = float(one.get("ceiling_images_per_second", 0))
    if ceiling > 0:
        return ("speedup over 1 rank: %.2fx (%.0f -> %.0f images/s); ceiling of this "
                "machine (two 1-rank runs at once): %.2fx; kolo reaches %.0f%% of it%s"
                % (rate / r1, r1, rate, ceiling / r1, 100 * rate / ceiling, note))
    return ("speedup over 1 rank: %.2fx (%.0f -> %.0f images/s; efficiency %.0f%%)%s"
            % (rate / r1, r1, rate, 100 * rate / r1 / size, note))


def global_value(value, name, op):
    t = torch.tensor(float(value), dtype=torch.float64)
    return float(kolo.allreduce(t, name="metric." + name, op=op).item())


# ---------------------------------------------------------------- main


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    kolo.init()
    rank, size = kolo.rank(), kolo.size()
    lead = rank == 0

    train_root, test_root = image_folder_roots(args.image_folder, args.test_folder)
    if train_root:
        train = FolderTrainSet(train_root, rank, size, args.seed, args.batch_size)
    else:
        train = IdxTrainSet(args.data, rank, size, args.seed, args.batch_size)
    test = FolderTestSet(test_root) if test_root else IdxTestSet(args.data)
    if train_root and test_root and list(train.loader.classes) != test.classes:
        raise ValueError("the class folders of %s and %s differ: %s vs %s"
                         % (train_root, test_root, list(train.loader.classes),
                            test.classes))
    if test.classes is not None and len(test.classes) > train.classes:
        raise ValueError("%s has %d classes, the training set %d"
                         % (test_root, len(test.classes), train.classes))

    torch.manual_seed(args.seed)
    model = Cnn(1, train.classes)
    kolo.broadcast_parameters(model.state_dict(), root_rank=0)

    base = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    per_rank = train.num_samples
    batches = (per_rank + args.batch_size - 1) // args.batch_size
    steps = min(batches, args.max_steps) if args.max_steps else batches
    decay = DECAYS[args.decay]
    # As the C++ example: step and exp decay by 0.1 every epochs/3 epochs
    # (at least 1); the schedule counts full epochs even with --max-steps.
    interval = max(1.0, args.epochs / 3.0)
    schedule = kolo.lr.LRSchedule(
        world_size=size, scaling=args.scale, warmup=args.warmup_epochs, decay=decay,
        gamma=0.1 ** (1.0 / interval) if decay == "exponential" else 0.1,
        step_size=interval if decay == "step" else None,
        total=args.epochs if decay == "cosine" else None, steps_per_epoch=batches)
    peak = kolo.lr.scale_lr(base, size, args.scale)

    optimizer = make_optimizer(args.optimizer, model.parameters(), schedule.lr(base, 0))
    optimizer = distribute(args, optimizer, model)

    if lead:
        print("fashion_mnist.py: %d %s, %d training images (%d per rank), batch "
              "%d per rank, %s lr %.5g -> %.5g (%s, warm-up %.3g epochs, %s decay), "
              "%d thread(s)%s, mode %s" % (
                  size, "rank(s)" if args.mode == "allreduce" else "worker(s)",
                  train.size, per_rank, args.batch_size, args.optimizer, base, peak,
                  args.scale, args.warmup_epochs, args.decay, args.threads,
                  ", %d steps per epoch" % steps if steps < batches else "",
                  args.mode), flush=True)
        if train_root or test_root:
            print("image folders: training %s (%d classes), test %s (%d images)"
                  % (train_root or args.data + " (IDX)", train.classes,
                     test_root or args.data + " (IDX)", test.size), flush=True)

    epoch_seconds, epoch_rates, epoch_accuracy = [], [], []
    accuracy = loss_avg = 0.0
    for epoch in range(args.epochs):
        model.train()
        loss_sum = 0.0
        start = last_draw = time.perf_counter()
        for b, (x, y) in enumerate(train.epoch(epoch, steps)):
            lr = schedule.lr(base, epoch * batches + b)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            now = time.perf_counter()
            if lead and not args.no_progress and (b + 1 == steps or now - last_draw > 0.2):
                progress_bar(epoch + 1, args.epochs, b + 1, steps, loss_sum / (b + 1),
                             (b + 1) * args.batch_size * size / max(now - start, 1e-9))
                last_draw = now
        seconds = time.perf_counter() - start
        if lead and not args.no_progress:
            sys.stderr.write("\n")
        # Global figures: the slowest rank's time, every rank's loss, the
        # whole test set's accuracy.
        seconds = global_value(seconds, "epoch_seconds", kolo.Max)
        loss_avg = global_value(loss_sum / steps, "train_loss", kolo.Average)
        model.eval()
        correct = 0
        lo, hi = evaluation_range(test.size, rank, size)
        with torch.no_grad(), servers_parameters(args.mode, optimizer, model):
            for i in range(lo, hi, 1000):
                x, y = test.batch(i, min(i + 1000, hi))
                correct += int((model(x).argmax(1) == y).sum())
        correct = global_value(correct, "test_correct", kolo.Sum)
        epoch_accuracy.append(correct / test.size)
        accuracy = correct / test.size
        images = min(steps * args.batch_size, per_rank) * size
        rate = images / seconds
        epoch_seconds.append(seconds)
        epoch_rates.append(rate)
        if lead:
            print("epoch %d/%d: loss %.4f, test accuracy %.2f%%, %.0f images/s, %.1f s"
                  % (epoch + 1, args.epochs, loss_avg, 100 * accuracy, rate, seconds),
                  flush=True)

    if lead and args.mode != "allreduce":
        st = ps.stats()
        print("parameter servers: %s" % "; ".join(
            "server %d: version %d, %d updates, %d refused, largest staleness %d"
            % (i, s["version"], s["updates"], s["rejected"], s["max_staleness"])
            for i, s in enumerate(st)), flush=True)
    # Throughput: the mean over epochs, leaving out the first (warming up)
    # when there are several.
    rates = epoch_rates[1:] if len(epoch_rates) > 1 else epoch_rates
    rate = sum(rates) / len(rates)
    if lead:
        record = {"ranks": size, "epochs": args.epochs, "batch_size": args.batch_size,
                  "threads": args.threads, "optimizer": args.optimizer,
                  "base_lr": base, "peak_lr": peak, "scale": args.scale,
                  "train_loss": loss_avg, "test_accuracy": accuracy,
                  "images_per_second": rate, "steps_per_epoch": steps,
                  "epoch_seconds": epoch_seconds,
                  "mode": args.mode, "epoch_accuracy": epoch_accuracy}
        text = json.dumps(record) + "\n"
        if args.json:
            with open(args.json, "w") as f:
                f.write(text)
        baseline = args.baseline or default_baseline_path()
        print("final: test accuracy %.2f%%, %.0f images/s on %d rank(s)"
              % (100 * accuracy, rate, size))
        if size == 1:
            with open(baseline, "w") as f:
                f.write(text)
            print("recorded as the 1-rank baseline in %s" % baseline)
        elif os.path.exists(baseline):
            with open(baseline) as f:
                line = speedup_line(json.load(f), record)
            if line:
                print(line)
        else:
            print("no 1-rank baseline at %s: run with -np 1 first for the speedup"
                  % baseline)
        sys.stdout.flush()
    kolo.shutdown()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (FileNotFoundError, ValueError, kolo.KoloError) as e:
        sys.stderr.write("\nfashion_mnist.py: %s\n" % e)
        sys.exit(1)
