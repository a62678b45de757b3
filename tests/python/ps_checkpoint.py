"""Run under kolorun --servers 2 -np 4 (2 workers, 2 servers): ps.save and
ps.load checkpoint the servers' parameters, optimizer state (Adam's moments
and step count) and version exactly. Save, train on, load: the parameters
equal the saved ones bit for bit, the same batches then give bit for bit
the same trajectory as after the save (so the optimizer state came back
too), and the version is the saved one. A missing checkpoint, a torn shard
file, a corrupted one and a manifest of another model are clear errors that
leave the servers as they were."""
import os
import shutil
import tempfile

import torch
import kolo
import kolo.torch as hvd
import kolo.torch.ps as ps

hvd.init()
me = hvd.rank()
torch.manual_seed(5)
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
opt = ps.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                              named_parameters=model.named_parameters(), mode="sync")
root = hvd.broadcast_object(tempfile.mkdtemp(prefix="kolo-ps-ckpt-") if me == 0 else None,
                            name="root")
path = os.path.join(root, "ckpt")


def step(t):
    g = torch.Generator().manual_seed(10 * t + me)
    x, y = torch.randn(8, 5, generator=g), torch.randn(8, 3, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def params():
    return [p.detach().clone() for p in model.parameters()]


def expect_error(fn, kind, *texts):
    try:
        fn()
    except kind as e:
        for text in texts:
            assert text in str(e), (text, str(e))
        return
    raise AssertionError("no error, expected " + " / ".join(texts))


for t in range(3):
    step(t)
saved = params()
saved_version = [s["version"] for s in ps.stats()]
assert saved_version == [3, 3], saved_version
ps.save(path)
files = sorted(os.listdir(path))
assert "manifest.kps" in files and len([f for f in files if f.startswith("shard-")]) == 2, \
    files

after = []
for t in range(3, 6):
    step(t)
    after.append(params())
assert not torch.equal(after[-1][0], saved[0]), "training did not move the parameters"

ps.load(path)
for p, q in zip(params(), saved):
    assert torch.equal(p, q), (me, (p - q).abs().max().item())
assert [s["version"] for s in ps.stats()] == saved_version
for k, t in enumerate(range(3, 6)):
    step(t)
    for p, q in zip(params(), after[k]):
        assert torch.equal(p, q), ("step", t, me, (p - q).abs().max().item())

# A second save into the same directory replaces the first; stale shard
# files are removed.
ps.save(path)
assert len([f for f in os.listdir(path) if f.startswith("shard-")]) == 2, os.listdir(path)
step(6)  # the servers now differ from every checkpoint
now = params()

# Errors, each leaving the servers as they were (shard 0's file is good in
# the torn and corrupt copies: it must not be loaded alone either).
expect_error(lambda: ps.load(os.path.join(root, "missing")), kolo.KoloError,
             "manifest", os.path.join(root, "missing"))
if me == 0:
    shard = sorted(f for f in os.listdir(path) if f.startswith("shard-1-"))[0]
    shutil.copytree(path, os.path.join(root, "torn"))
    with open(os.path.join(root, "torn", shard), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(root, "torn", shard)) - 10)
    shutil.copytree(path, os.path.join(root, "corrupt"))
    with open(os.path.join(root, "corrupt", shard), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    shutil.copytree(path, os.path.join(root, "other"))
    manifest = os.path.join(root, "other", "manifest.kps")
    text = open(manifest).read().replace("tensor 1 7\n", "tensor 1 8\n")
    open(manifest, "w").write(text)
hvd.broadcast_object(None, name="copies made")
expect_error(lambda: ps.load(os.path.join(root, "torn")), kolo.KoloError, "torn",
             "shard-1-of-2")
expect_error(lambda: ps.load(os.path.join(root, "corrupt")), kolo.KoloError,
             "checksum mismatch", "shard-1-of-2")
expect_error(lambda: ps.load(os.path.join(root, "other")), kolo.KoloError,
             "does not fit this job", "tensor 1 has 8 elements saved, 7 in this job")
opt.pull()
for p, q in zip(params(), now):
    assert torch.equal(p, q), ("a failed load changed the servers", me)

hvd.broadcast_object(None, name="done")
if me == 0:
    shutil.rmtree(root)
print("worker %d: checkpoint save/load exact, errors clear" % me, flush=True)
hvd.shutdown()
