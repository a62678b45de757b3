"""ElasticSampler: a data sampler that re-shards the rest of an epoch when
the world changes, with no sample lost or repeated.

The epoch's order is a permutation of the dataset (seeded by ``seed +
epoch``, the same on every rank). Of it, the first ``processed_num`` indices
are done; the rest is dealt round-robin: rank r of n takes positions r,
r + n, r + 2n, ... of the remaining list. After k batches of b samples on
every rank, the ranks together have consumed exactly the first k * b * n
remaining positions, so ``record_batch`` can count them and a reset (a new
n, new ranks) deals out exactly what is left.

Unlike Horovod's sampler, nothing is padded: when the remaining count is not
a multiple of n, the first (remaining mod n) ranks get one sample more, so
an epoch covers every sample exactly once. A rank may then run one more
(partial) batch than another at the end of the epoch; use ``hvd.join()``
(or ``drop_last``) there, as with any uneven data (docs/elastic.md).
"""

import random

import torch.utils.data


def _world():
    import kolo.torch as hvd
    return hvd.rank(), hvd.size()


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions ``dataset`` (of constant length) over the ranks and
    re-partitions its unprocessed part after a reset.

    Use: give it to the TorchState, call ``record_batch(i, batch_size)``
    after each batch and ``set_epoch(e)`` at the end of an epoch (it clears
    the processed count).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts ``epoch``: a new order, nothing processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of ``batch_size`` samples on every rank."""
        self.processed_num = min(self.processed_num + batch_size * self.num_replicas,
                                 len(self.dataset))

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self, rank=None, num_replicas=None):
        """Deals the unprocessed indices to the current world (or to the
        given ``rank`` of ``num_replicas``)."""
        if rank is None or num_replicas is None:
            rank, num_replicas = _world()
        if not 0 <= rank < num_replicas:
            raise ValueError("ElasticSampler: rank %d is not in a world of %d"
                             % (rank, num_replicas))
        self.rank, self.num_replicas = rank, num_replicas
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.indices = self.remaining_indices[rank::num_replicas]
        self.num_samples = len(self.indices)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
