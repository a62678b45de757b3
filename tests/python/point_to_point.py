"""kolo.torch.send/recv/isend/irecv on 3 ranks:
    kolorun -np 3 /usr/bin/python3 tests/python/point_to_point.py
Every dtype and shape, non-contiguous tensors both ways, (peer, tag)
order, a mismatch naming both ranks, bad arguments, a process set whose
messages never meet the world's, and at the end a rank that dies: the
receive waiting for it raises PeerLostError naming it within KOLO_TIMEOUT.
Prints "point_to_point ok" on every surviving rank."""

import os
import sys
import time

import torch

import kolo.torch as kolo

kolo.init()
me, n = kolo.rank(), kolo.size()
assert n == 3, "run on 3 ranks"
right, left = (me + 1) % n, (me - 1) % n
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.int8, torch.complex64]


def value(rank, shape, dtype):
    x = torch.arange(int(torch.Size(shape).numel()), dtype=torch.float64) + 100 * rank
    if dtype is torch.bool:
        return (x.reshape(shape) % 2) == 0
    return x.reshape(shape).to(dtype)


# A ring in both directions at once, every dtype and shape: posting never
# waits for the peer.
for i, dtype in enumerate(DTYPES):
    for shape in [(), (0,), (5,), (3, 4, 2)]:
        out = value(me, shape, dtype)
        got = torch.empty(shape, dtype=dtype)
        hs = kolo.isend(out, right, tag=i)
        hr = kolo.irecv(got, left, tag=i)
        assert kolo.synchronize(hr) is got
        assert kolo.synchronize(hs) is out
        assert torch.equal(got, value(left, shape, dtype)), (dtype, shape, got)

# Non-contiguous on both ends; large (beyond the 1 MiB shm ring).
big = value(me, (700, 600), torch.float64).t()
into = torch.zeros(700, 600, dtype=torch.float64).t()  # transposed view
hr = kolo.irecv(into, left, tag=1 << 30)
kolo.send(big, right, tag=1 << 30)
kolo.synchronize(hr)
assert torch.equal(into, value(left, (700, 600), torch.float64).t())

# Order per (peer, tag): receives posted in another order than the sends.
if me == 0:
    for k in range(3):
        kolo.send(torch.full((2,), float(k)), 1, tag=5)
    kolo.send(torch.full((2,), 9.0), 1, tag=6)
elif me == 1:
    six = kolo.recv(torch.empty(2), 0, tag=6)
    firsts = [kolo.irecv(torch.empty(2), 0, tag=5) for _ in range(3)]
    assert [kolo.synchronize(h)[0].item() for h in firsts] == [0.0, 1.0, 2.0]
    assert six[0].item() == 9.0

# A mismatch names both ranks; the tensor is untouched; the next message
# still arrives.
if me == 0:
    kolo.send(torch.ones(4), 2, tag=7)
    kolo.send(torch.ones(4, dtype=torch.float64), 2, tag=7)
    kolo.send(torch.ones(3), 2, tag=7)
elif me == 2:
    t = torch.full((3,), -1.0)
    for want in [torch.full((3,), -1.0), torch.full((4,), -1.0)]:
        try:
            kolo.recv(want, 0, tag=7)
            raise AssertionError("no mismatch")
        except kolo.MismatchError as e:
            text = str(e)
            assert "rank 2 posted a receive of" in text and "rank 0 sent" in text, text
            assert torch.equal(want, torch.full_like(want, -1.0))
    assert torch.equal(kolo.recv(t, 0, tag=7), torch.ones(3))

# Bad arguments fail at once.
for bad, text in [(lambda: kolo.isend(torch.ones(1), 7), "not a rank"),
                  (lambda: kolo.isend(torch.ones(1), right, tag=-1), "tag must be"),
                  (lambda: kolo.isend(torch.ones(1), me), "this rank itself"),
                  (lambda: kolo.irecv([1.0], left), "torch.Tensor")]:
    try:
        bad()
        raise AssertionError("accepted: " + text)
    except kolo.InvalidArgumentError as e:
        assert text in str(e), str(e)

# A process set of ranks 1 and 2: peers are global ranks; its tag 3 never
# meets the world's tag 3.
ps = kolo.add_process_set([1, 2])
if me == 1:
    kolo.send(torch.full((2,), 1.0), 2, tag=3)
    kolo.send(torch.full((2,), 2.0), 2, tag=3, process_set=ps)
elif me == 2:
    in_set = kolo.recv(torch.empty(2), 1, tag=3, process_set=ps)
    in_world = kolo.recv(torch.empty(2), 1, tag=3)
    assert in_set[0].item() == 2.0 and in_world[0].item() == 1.0
    try:
        kolo.isend(torch.ones(1), 0, process_set=ps)
        raise AssertionError("accepted a non-member")
    except kolo.InvalidArgumentError as e:
        assert "not a member" in str(e), str(e)
kolo.barrier()
kolo.remove_process_set(ps)
kolo.barrier()

# A rank that dies: the receive waiting for it names it.
if me == 2:
    os._exit(0)
if me == 1:
    started = time.monotonic()
    try:
        kolo.recv(torch.empty(3), 2, tag=11)
        print("rank 1: no error", flush=True)
        os._exit(3)
    except kolo.PeerLostError as e:
        assert "rank 2" in str(e), str(e)
        print("rank 1: PeerLostError after %.1f s: %s" % (time.monotonic() - started, e),
              flush=True)
print("point_to_point ok", flush=True)
sys.stdout.flush()
os._exit(0)
