#!/usr/bin/python3
# A Horovod PyTorch training script, written against Horovod's API exactly as
# its MNIST example is, on synthetic MNIST-shaped data (10 classes, 1x28x28
# images: a bright block whose place is the class, plus noise) so it needs no download.
# Only the import line differs from a Horovod script: `import kolo.torch as
# hvd` instead of `import horovod.torch as hvd`.
#
#   build/bin/kolorun -np 2 /usr/bin/python3 examples/horovod_style_mnist.py
#   (PYTHONPATH=build/python; flags: --epochs, --batch-size, --lr,
#    --fp16-allreduce, --use-adasum, --gradient-predivide-factor)
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import kolo.torch as hvd

parser = argparse.ArgumentParser(description="Horovod-style synthetic MNIST")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--test-batch-size", type=int, default=100)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--train-samples", type=int, default=1024)
parser.add_argument("--test-samples", type=int, default=512)
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--use-adasum", action="store_true", default=False)
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--min-accuracy", type=float, default=0.0,
                    help="exit with status 1 if the final test accuracy is lower")


def synthetic_mnist(samples, seed):
    # class c: a bright 8x8 block at one of 10 places, plus noise
    patterns = torch.zeros(10, 1, 28, 28)
    for c in range(10):
        row, col = 2 + 9 * (c // 4), 1 + 7 * (c % 4)
        patterns[c, 0, row:row + 8, col:col + 6] = 1.0
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (samples,), generator=g)
    images = patterns[labels] + 0.5 * torch.randn(samples, 1, 28, 28, generator=g)
    return torch.utils.data.TensorDataset(images, labels)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def train(epoch):
    model.train()
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
    loss = metric_average(loss.item(), "train_loss")
    if hvd.rank() == 0:
        print("Train Epoch: {} last batch loss (averaged over {} ranks): {:.6f}".format(
            epoch, hvd.size(), loss), flush=True)


def test():
    model.eval()
    test_loss = 0.0
    test_accuracy = 0.0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.data.max(1, keepdim=True)[1]
            test_accuracy += pred.eq(target.data.view_as(pred)).float().sum().item()
    test_loss /= len(test_sampler)
    test_accuracy /= len(test_sampler)
    test_loss = metric_average(test_loss, "avg_loss")
    test_accuracy = metric_average(test_accuracy, "avg_accuracy")
    if hvd.rank() == 0:
        print("Test set: Average loss: {:.4f}, Accuracy: {:.2f}%".format(
            test_loss, 100.0 * test_accuracy), flush=True)
    return test_accuracy


if __name__ == "__main__":
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_dataset = synthetic_mnist(args.train_samples, seed=1)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    test_dataset = synthetic_mnist(args.test_samples, seed=2)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(
        test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net()
    # By default Adasum doesn't need scaling up the learning rate.
    lr_scaler = hvd.size() if not args.use_adasum else 1
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler,
                          momentum=args.momentum)

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=compression,
        op=hvd.Adasum if args.use_adasum else hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor)

    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        accuracy = test()
    if accuracy < args.min_accuracy:
        if hvd.rank() == 0:
            print("accuracy {:.2f}% is below --min-accuracy {:.2f}%".format(
                100.0 * accuracy, 100.0 * args.min_accuracy), flush=True)
        raise SystemExit(1)
