"""kolo.torch answers as Horovod does (issue 15): the names Horovod scripts
use, Horovod's gradients, global root ranks with process sets, Horovod's
join, uneven reducescatter, scaling of integer tensors, sparse gradients,
optimizer state with None entries, the naming rule shared with kolo.numpy.

Run: build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_horovod.py
(PYTHONPATH=build/python). Every rank runs the same tests in the same order.
"""

import numpy as np
import pytest
import torch

import kolo
import kolo.numpy as kn
import kolo.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def job():
    hvd.init()
    yield
    hvd.barrier()


def rank():
    return hvd.rank()


def size():
    return hvd.size()


def test_horovod_names_exist():
    for name in ["grouped_allgather", "grouped_allgather_async",
                 "grouped_reducescatter", "grouped_reducescatter_async",
                 "sparse_allreduce_async", "HorovodInternalError",
                 "HostsUpdatedInterrupt", "gloo_built", "mpi_built", "nccl_built"]:
        assert hasattr(hvd, name), name
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert hvd.HostsUpdatedInterrupt(True).skip_sync
    # Every error of an operation is a HorovodInternalError, as in Horovod.
    if size() > 1:
        with pytest.raises(hvd.HorovodInternalError, match="hz.shape"):
            hvd.allreduce(torch.ones(rank() + 1), name="hz.shape")


def test_generated_names_follow_one_counter_for_both_front_ends():
    # One counter of unnamed operations for every kind, process set and
    # front end: kolo.numpy's and kolo.torch's unnamed operations interleave.
    h1 = hvd.allreduce_async(torch.ones(2))
    h2 = kn.allgather_async(np.ones(1, np.float32))
    h3 = hvd.broadcast_async(torch.ones(1), root_rank=0)
    n1 = int(h1.name.split(".")[-1])
    assert h1.name.startswith("allreduce.noname.")
    assert h2.name == "allgather.noname.%d" % (n1 + 1)
    assert h3.name == "broadcast.noname.%d" % (n1 + 2)
    named = hvd.allreduce_async(torch.ones(2), name="hz.named")
    h4 = hvd.allreduce_async(torch.ones(2))
    assert h4.name == "allreduce.noname.%d" % (n1 + 3)  # named ones do not count
    for h in (h1, h2, h3, named, h4):
        hvd.synchronize(h)
    g = hvd.grouped_allreduce_async([torch.ones(1), torch.ones(2)], name="hz.g")
    assert hvd.synchronize(g)[1].tolist() == [1.0, 1.0]


def test_grouped_allgather_and_reducescatter():
    r, n = rank(), size()
    outs = hvd.grouped_allgather([torch.full((r + 1, 2), float(r)),
                                  torch.arange(3, dtype=torch.int16) + r],
                                 name="hz.gag")
    assert outs[0].shape == (n * (n + 1) // 2, 2)
    assert outs[0][:, 0].tolist() == [float(q) for q in range(n) for _ in range(q + 1)]
    assert outs[1].dtype == torch.int16
    assert outs[1].tolist() == [q + i for q in range(n) for i in range(3)]
    blocks = hvd.grouped_reducescatter(
        [torch.ones(2 * n, 3) * (r + 1), torch.arange(n, dtype=torch.int64)],
        op=hvd.Sum, name="hz.grs")
    total = n * (n + 1) // 2
    assert torch.equal(blocks[0], torch.full((2, 3), float(total)))
    assert blocks[1].tolist() == [n * r]


def test_reducescatter_uneven_first_dimension_splits_as_horovod():
    r, n = rank(), size()
    rows = 2 * n + 1  # the first rows % n ranks get one row more
    x = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2)
    out = hvd.reducescatter(x, op=hvd.Sum, name="hz.uneven")
    small, extra = divmod(rows, n)
    start = r * small + min(r, extra)
    mine = small + (1 if r < extra else 0)
    assert torch.equal(out, x[start:start + mine] * n)


def test_scaling_integer_tensors_as_horovod():
    n = size()
    x = torch.arange(-6, 6, dtype=torch.int32).repeat(n)
    pre = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.37, name="hz.pre")
    want = (x.double() * 0.37).to(torch.int32)[rank() * 12:(rank() + 1) * 12] * n
    assert pre.dtype == torch.int32 and torch.equal(pre, want)
    post = hvd.reducescatter(x, op=hvd.Sum, postscale_factor=0.37, name="hz.post")
    want = ((x[rank() * 12:(rank() + 1) * 12] * n).double() * 0.37).to(torch.int32)
    assert torch.equal(post, want)


def test_sparse_allreduce_async_equals_dense_allreduce():
    dense = torch.zeros(6, 3)
    dense[rank() % 6] = 1.0 + rank()
    dense[5] = 2.0
    for op in (hvd.Sum, hvd.Average):
        handle = hvd.sparse_allreduce_async(dense.to_sparse(), name="hz.sparse.%d" % op,
                                            op=op)
        got = handle()
        assert got.is_sparse
        want = hvd.allreduce(dense, op=op, name="hz.dense.%d" % op)
        assert torch.allclose(got.to_dense(), want)


def test_broadcast_gradient_is_the_average_on_the_root():
    x = torch.full((3,), float(rank()), requires_grad=True)
    y = hvd.broadcast(x, root_rank=0, name="hz.bgrad")
    (y * (rank() + 1)).sum().backward()
    average = sum(q + 1 for q in range(size())) / size()
    want = average if rank() == 0 else 0.0
    assert torch.allclose(x.grad, torch.full((3,), want))


def test_alltoall_gradient_is_the_reverse_alltoall():
    n = size()
    splits = [q + 1 for q in range(n)]  # rank r sends q + 1 rows to rank q
    x = torch.arange(sum(splits), dtype=torch.float32).unsqueeze(1).repeat(1, 2)
    x.requires_grad_(True)
    y, received = hvd.alltoall(x, splits=splits, name="hz.a2a")
    assert received.tolist() == [rank() + 1] * n
    (y * (rank() + 1)).sum().backward()
    # Rows sent to rank q come back weighted by q + 1.
    want = torch.cat([torch.full((q + 1, 2), float(q + 1)) for q in range(n)])
    assert torch.equal(x.grad, want)


def test_reducescatter_and_grouped_allreduce_gradients():
    n = size()
    x = torch.ones(2 * n, 2, requires_grad=True)
    y = hvd.reducescatter(x, op=hvd.Sum, name="hz.rsgrad")
    (y * (rank() + 1)).sum().backward()
    # The allgather of each rank's gradient, times n for Sum.
    want = torch.cat([torch.full((2, 2), float((q + 1) * n)) for q in range(n)])
    assert torch.equal(x.grad, want)
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum, name="hz.gagrad")
    (ya.sum() * 2 + yb.sum() * (rank() + 1)).backward()
    assert torch.equal(a.grad, torch.full((2,), 2.0 * n))
    assert torch.equal(b.grad, torch.full((3,), float(n * (n + 1) // 2)))


def test_root_rank_is_global_with_a_process_set():
    # One set per rank parity; each rank broadcasts from the set's last
    # member, given as a global rank.
    evens = hvd.ProcessSet(list(range(0, size(), 2)))
    odds = hvd.ProcessSet(list(range(1, size(), 2)))
    hvd.add_process_set(evens)
    if odds.ranks:
        hvd.add_process_set(odds)
    mine = evens if rank() % 2 == 0 else odds
    root = mine.ranks[-1]
    got = hvd.broadcast(torch.tensor([float(rank())]), root_rank=root,
                        name="hz.psroot", process_set=mine)
    assert got.item() == float(root)
    obj = hvd.broadcast_object({"from": rank()}, root_rank=root, process_set=mine,
                               name="hz.psobj")
    assert obj == {"from": root}
    with pytest.raises(kolo.InvalidArgumentError, match="not a member"):
        other = 1 - rank() % 2
        hvd.broadcast(torch.ones(1), root_rank=other, process_set=mine,
                      name="hz.psbad")
    hvd.remove_process_set(evens)
    if odds.ranks:
        hvd.remove_process_set(odds)


def test_join_is_horovods():
    if size() < 2:
        pytest.skip("needs 2 ranks")
    first = 0
    if rank() == first:
        last = hvd.join()
    else:
        x = torch.full((4,), 10, dtype=torch.int32)
        avg = hvd.allreduce(x, name="hz.join.avg")  # Average over every rank
        assert avg.tolist() == [10 * (size() - 1) // size()] * 4
        with pytest.raises(RuntimeError, match="has joined"):
            hvd.allgather(torch.ones(1), name="hz.join.gather")
        with pytest.raises(RuntimeError, match="has joined"):
            hvd.broadcast(torch.ones(1), root_rank=1, name="hz.join.bcast")
        last = hvd.join()
    assert last != first
    assert hvd.allgather_object(last) == [last] * size()


def test_broadcast_optimizer_state_with_none_and_non_tensor_entries():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (rank() + 1), momentum=0.9,
                          nesterov=True, weight_decay=1e-4)
    opt.param_groups[0]["maximize"] = False
    opt.param_groups[0]["foreach"] = None  # a None option
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    # A fresh optimizer got its state as in Horovod: zero gradients, one step.
    assert model.weight.grad is not None
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
    assert opt.param_groups[0]["foreach"] is None
    buf = opt.state[model.weight]["momentum_buffer"]
    assert torch.equal(hvd.broadcast(buf, root_rank=0, name="hz.momentum"), buf)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients_in_distributed_optimizer(sparse_as_dense):
    torch.manual_seed(5)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    idx = torch.tensor([rank() % 10, 7])
    emb(idx).sum().backward()
    before = emb.weight.detach().clone()
    opt.step()
    # Rows hit by every rank: the average of the ranks' gradients (ones).
    counts = torch.zeros(10)
    for q in range(size()):
        counts[q % 10] += 1
        counts[7] += 1
    want = before - (counts / size()).unsqueeze(1)
    assert torch.allclose(emb.weight.detach(), want)


def test_duplicate_pending_name_is_an_error_for_reducescatter():
    # Rank 0's operation stays pending until the others submit theirs after
    # the barrier, so its second submission meets a pending name.
    t = torch.ones(3 * size(), 2)
    if rank() == 0:
        h = hvd.reducescatter_async(t, name="hz.dup")
        with pytest.raises(ValueError, match="hz.dup"):
            hvd.reducescatter_async(t, name="hz.dup")
    hvd.barrier()
    if rank() != 0:
        h = hvd.reducescatter_async(t, name="hz.dup")
    assert torch.equal(hvd.synchronize(h), torch.full((3, 2), 1.0))


def test_join_realigns_generated_names():
    # Rank 0 joins at once and skips the others' unnamed allreduce; after the
    # join every rank continues from the largest count of unnamed operations.
    if rank() == 0:
        hvd.join()
    else:
        hvd.allreduce(torch.ones(1))
        hvd.join()
    h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum)
    assert hvd.allgather_object(h.name) == [h.name] * size()
    assert hvd.synchronize(h).item() == size()
