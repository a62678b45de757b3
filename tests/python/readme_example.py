"""The README's PyTorch example, run as it is written: this script takes the
first ```python block under "## A PyTorch job" of README.md, runs it
(under kolorun, one process per rank), then checks what the example
promises: every rank ends with the same model as rank 0 (the parameters
broadcast at the start, the gradients averaged at every step) and the model
learned (its loss fell below the loss of the first step)."""

import os
import re
import sys

import torch

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def example_code():
    with open(README) as f:
        text = f.read()
    section = text.split("## A PyTorch job", 1)
    if len(section) != 2:
        sys.exit(f"{README}: no section '## A PyTorch job'")
    block = re.search(r"```python\n(.*?)```", section[1], re.S)
    if block is None:
        sys.exit(f"{README}: no ```python block under '## A PyTorch job'")
    return block.group(1)


def main():
    code = example_code()
    ns = {}
    exec(compile(code, README, "exec"), ns)
    hvd, model, x, y = ns["hvd"], ns["model"], ns["x"], ns["y"]
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    root = hvd.broadcast(params.clone(), root_rank=0, name="readme.params")
    if not torch.equal(params, root):
        sys.exit(f"rank {hvd.rank()}: parameters differ from rank 0's after the README "
                 f"example: {params.tolist()} against {root.tolist()}")
    # The same data, the starting model again: the trained model must do better.
    torch.manual_seed(hvd.rank())
    start = torch.nn.Linear(10, 1)
    hvd.broadcast_parameters(start.state_dict(), root_rank=0)
    before = torch.nn.functional.mse_loss(start(x), y).item()
    after = torch.nn.functional.mse_loss(model(x), y).item()
    if not after < before:
        sys.exit(f"rank {hvd.rank()}: the README example did not learn: "
                 f"loss {after:.4f} after training, {before:.4f} before")
    print(f"readme example: rank {hvd.rank()} has rank 0's parameters, "
          f"loss {before:.4f} -> {after:.4f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
