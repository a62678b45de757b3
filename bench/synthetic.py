#!/usr/bin/python3
"""Synthetic training benchmark (in the manner of Horovod's synthetic
benchmark and tf_cnn_benchmarks): a named model trained on random data with
kolo.torch's DistributedOptimizer; prints images per second per rank and in
total.

    build/bin/kolorun -np 2 env PYTHONPATH=build/python \\
        /usr/bin/python3 bench/synthetic.py --model resnet50 --image-size 128

Models: resnet50 (torchvision, Debian's python3-torchvision), resnet18,
or cnn (the small CNN of examples/fashion_mnist.py, 1 x 28 x 28 inputs by
default). Each rank makes one random batch of --batch-size images of
--image-size and random labels and trains on it again and again (no data
pipeline: only compute and the gradients' allreduce are measured). After
--num-warmup-batches steps, --num-iters timed iterations of
--num-batches-per-iter steps each; per iteration images/s =
batch x steps / seconds. Rank 0 prints each iteration's rate and, at the
end, the mean per rank with a 95% interval (1.96 standard deviations of the
iterations) and the total (times the number of ranks). The ranks' rates are
averaged across ranks for the summary, so a slow rank shows.

--image-folder DIR feeds real images instead: the JPEG files of
DIR/<class>/*.jpg (DIR/train when DIR holds one, as build/bin/fmnist-to-jpeg
writes it), each rank reading its shard (kolo.data.ImageFolderLoader: kolo's
C++ sampler and reader, decoding and resizing to --image-size, 3 channels
for the resnets, 1 for cnn, on a background thread). Every step takes the
next batch, epoch after epoch, so the timings include what decoding the
background thread does not hide:

    build/bin/fmnist-to-jpeg /tmp/fmnist-jpeg
    build/bin/kolorun -np 2 env PYTHONPATH=build/python /usr/bin/python3 \\
        bench/synthetic.py --model resnet50 --image-size 128 \\
        --image-folder /tmp/fmnist-jpeg
"""

import argparse
import math
import os
import sys
import timeit

import torch
import torch.nn.functional as F

import kolo.torch as kolo


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="kolo.torch synthetic benchmark")
    p.add_argument("--model", default="resnet50",
                   help="resnet50, resnet18 (torchvision) or cnn (the example CNN)")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    p.add_argument("--image-size", type=int, default=None,
                   help="height = width (default: 224 for resnets, 28 for cnn)")
    p.add_argument("--num-classes", type=int, default=None,
                   help="classes (default: 1000 for resnets, 10 for cnn)")
    p.add_argument("--num-warmup-batches", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="compress gradients to float16 for the allreduce")
    p.add_argument("--no-kolo", action="store_true",
                   help="plain torch optimizer, no allreduce (a rank's ceiling)")
    p.add_argument("--json", default=None, help="rank 0 writes the summary as JSON")
    p.add_argument("--image-folder", default=None, metavar="DIR",
                   help="train on the JPEG files of DIR/<class>/*.jpg (or DIR/train) "
                        "instead of random data")
    a = p.parse_args(argv)
    if min(a.batch_size, a.num_batches_per_iter, a.num_iters, a.threads) < 1 or \
            a.num_warmup_batches < 0:
        p.error("sizes and counts must be >= 1 (warm-up >= 0)")
    return a


def build_model(name, num_classes, channels):
    if name == "cnn":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "examples"))
        from fashion_mnist import Cnn
        model = Cnn(channels)
        if num_classes != 10:
            model.fc2 = torch.nn.Linear(128, num_classes)
        return model
    try:
        import torchvision.models
    except ImportError:
        raise SystemExit("synthetic.py: --model %s needs torchvision (apt-get install "
                         "python3-torchvision)" % name)
    if not hasattr(torchvision.models, name):
        raise SystemExit("synthetic.py: torchvision has no model %r" % name)
    return getattr(torchvision.models, name)(num_classes=num_classes)


def image_folder_root(path):
    """DIR, or DIR/train when DIR holds one (fmnist-to-jpeg's layout)."""
    train = os.path.join(path, "train")
    return train if os.path.isdir(train) else path


def folder_batches(args, image, channels, rank, size, classes):
    """Endless (images, labels) of this rank's shard of --image-folder,
    epoch after epoch, full batches only."""
    from kolo.data import ImageFolderLoader
    try:
        loader = ImageFolderLoader(image_folder_root(args.image_folder), args.batch_size,
                                   image, channels, rank=rank, size=size, seed=1234,
                                   drop_last=True)
    except FileNotFoundError as e:
        raise SystemExit("synthetic.py: %s" % e)
    if len(loader.classes) > classes:
        raise SystemExit("synthetic.py: %s has %d classes, the model %d (--num-classes)"
                         % (loader.root, len(loader.classes), classes))
    if len(loader) == 0:
        raise SystemExit("synthetic.py: %s: %d images per rank, fewer than a batch of %d"
                         % (loader.root, loader.num_samples, args.batch_size))

    def forever():
        while True:
            yield from loader
    return forever()


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    kolo.init()
    rank, size = kolo.rank(), kolo.size()
    cnn = args.model == "cnn"
    image = args.image_size or (28 if cnn else 224)
    classes = args.num_classes or (10 if cnn else 1000)
    channels = 1 if cnn else 3
    if cnn and image != 28:
        raise SystemExit("synthetic.py: the cnn model takes 28 x 28 images")

    torch.manual_seed(1234 + rank)
    model = build_model(args.model, classes, channels)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)
    if not args.no_kolo:
        compression = kolo.Compression.fp16 if args.fp16_allreduce else \
            kolo.Compression.none
        optimizer = kolo.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=compression)
        kolo.broadcast_parameters(model.state_dict(), root_rank=0)
        kolo.broadcast_optimizer_state(optimizer, root_rank=0)

    batches = None
    if args.image_folder:
        batches = folder_batches(args, image, channels, rank, size, classes)
    else:
        data = torch.randn(args.batch_size, channels, image, image)
        target = torch.randint(0, classes, (args.batch_size,))

    def benchmark_step():
        if batches is not None:
            images, labels = next(batches)
            x, y = torch.from_numpy(images), torch.from_numpy(labels)
        else:
            x, y = data, target
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print("Model: %s (%.2fM parameters), image %dx%dx%d, batch %d per rank, "
              "%d rank(s), %d thread(s) each%s" %
              (args.model, params / 1e6, channels, image, image, args.batch_size, size,
               args.threads, " (no allreduce)" if args.no_kolo else
               (", fp16 allreduce" if args.fp16_allreduce else "")), flush=True)
        print("Data: %s" % (image_folder_root(args.image_folder) + " (JPEG, decoded "
                            "on a background thread)" if args.image_folder else
                            "random"), flush=True)
        print("Running warmup...", flush=True)
    if args.num_warmup_batches:
        timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    if rank == 0:
        print("Running benchmark...", flush=True)
    rates = []
    for i in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / t
        rates.append(rate)
        if rank == 0:
            print("Iter #%d: %.1f img/sec per rank" % (i, rate), flush=True)

    mean = sum(rates) / len(rates)
    std = math.sqrt(sum((r - mean) ** 2 for r in rates) / len(rates))
    conf = 1.96 * std
    if not args.no_kolo and size > 1:
        both = kolo.allreduce(torch.tensor([mean, conf], dtype=torch.float64),
                              name="synthetic.summary", op=kolo.Average)
        mean, conf = float(both[0]), float(both[1])
    if rank == 0:
        print("Img/sec per rank: %.1f +-%.1f" % (mean, conf))
        print("Total img/sec on %d rank(s): %.1f +-%.1f" % (size, size * mean,
                                                           size * conf))
        if args.json:
            import json
            with open(args.json, "w") as f:
                json.dump({"model": args.model, "ranks": size, "batch_size":
                           args.batch_size, "image_size": image, "threads":
                           args.threads, "per_rank": mean, "per_rank_ci95": conf,
                           "total": size * mean, "total_ci95": size * conf}, f)
                f.write("\n")
        sys.stdout.flush()
    if not args.no_kolo:
        kolo.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
