"""Framework-neutral data loading for distributed training (docs/python.md,
"Data"): kolo's own C++ readers (src/data/) behind NumPy arrays.

``ImageFolderLoader`` reads JPEG files laid out as ``root/<class>/*.jpg``
(as ``build/bin/fmnist-to-jpeg`` writes Fashion-MNIST), decoding them with
libjpeg-turbo on a background C++ thread while Python trains, and gives
each rank its shard of every epoch::

    import torch
    import kolo.torch as hvd
    from kolo.data import ImageFolderLoader

    hvd.init()
    loader = ImageFolderLoader("fmnist-jpeg/train", batch_size=64,
                               image_size=28, channels=1)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for images, labels in loader:        # float32 (N, C, H, W), int64 (N,)
            x, y = torch.from_numpy(images), torch.from_numpy(labels)
            ...

The shards follow kolo's C++ ``DistributedSampler`` (bound here as
``DistributedSampler``): each epoch a permutation drawn from (seed, epoch),
the same on every rank, padded with its first elements to a multiple of the
number of ranks and dealt round-robin, so the shards are disjoint, of equal
length (every rank takes the same number of steps) and reshuffled each
epoch. ``evaluation_range`` splits a validation set without padding.
"""

import os

from kolo import _native

__all__ = [
    "ImageFolder",
    "ImageFolderLoader",
    "DistributedSampler",
    "evaluation_range",
    "decode_jpeg",
    "encode_jpeg",
    "resize_bilinear",
    "MAKE_FOLDER_HINT",
]

MAKE_FOLDER_HINT = (
    "an image folder holds JPEG files as ROOT/<class name>/*.jpg; write "
    "Fashion-MNIST as one with `build/bin/fmnist-to-jpeg OUT [--limit N]` "
    "(OUT/train and OUT/test; needs apt-get install dataset-fashion-mnist)")

if not getattr(_native, "HAVE_DATA", False):  # pragma: no cover - build-dependent
    raise ImportError(
        "kolo.data: this kolo._native was built without kolo's data readers "
        "(zlib and libjpeg were not found: apt-get install zlib1g-dev "
        "libjpeg62-turbo-dev, then rebuild)")

from kolo._native import (  # noqa: E402,F401  (re-exported)
    BatchPrefetcher,
    DistributedSampler,
    ImageFolder as _NativeImageFolder,
    decode_jpeg,
    encode_jpeg,
    evaluation_range,
    resize_bilinear,
)


def _size_pair(image_size):
    """image_size as (height, width): an int for a square, or a pair."""
    if isinstance(image_size, int):
        h = w = image_size
    else:
        h, w = (int(v) for v in image_size)
    if h < 1 or w < 1:
        raise ValueError("image_size %r: expected >= 1" % (image_size,))
    return h, w


def ImageFolder(root, image_size, channels):
    """The native ImageFolder of ``root`` (images resized to image_size, an
    int or (height, width)), with errors that say how to make a folder: a
    missing directory, or one without ``<class>/*.jpg`` files, raises
    FileNotFoundError naming the path."""
    root = os.fspath(root)
    h, w = _size_pair(image_size)
    if not os.path.isdir(root):
        raise FileNotFoundError("image folder %s not found: %s" % (root, MAKE_FOLDER_HINT))
    try:
        return _NativeImageFolder(root, w, h, channels)
    except _native.KoloError as e:
        if getattr(e, "code", None) == _native.ERR_IO:
            raise FileNotFoundError("%s: %s" % (e, MAKE_FOLDER_HINT)) from e
        raise


def _default_layout():
    """(rank, size) of the running job, or (0, 1) before kolo.init()."""
    if _native.is_initialized():
        return _native.rank(), _native.size()
    return 0, 1


class ImageFolderLoader:
    """Batches of this rank's shard of an image folder, one epoch per pass.

    Arguments:
      root        the folder, ``root/<class>/*.jpg``
      batch_size  images per batch (per rank); the epoch's last batch may be
                  smaller unless drop_last
      image_size  int (square) or (height, width): every image is resized
                  bilinearly to it
      channels    1 (grayscale) or 3 (RGB), converted by libjpeg
      rank, size  this rank and the number of ranks (default: kolo's
                  layout after kolo.init(), else 0 and 1)
      seed        the shuffling seed: the same on every rank
      shuffle     a new permutation each epoch (False: file order)
      drop_last   leave out the last, smaller batch of an epoch
      prefetch    batches decoded ahead on the background thread (>= 1)

    Iterating yields ``(images, labels)``: float32 (N, channels, H, W) with
    values in [0, 1] and int64 (N,). Each ``iter()`` reads one epoch: the
    one named by ``set_epoch`` if it was called since the last pass, else
    the next one (0, 1, 2, ...). The batches are decoded by one C++ thread
    without the GIL, at most ``prefetch`` ahead; a file that cannot be read
    raises (with its path) when its batch is due. Not for use by several
    Python threads at once.
    """

    def __init__(self, root, batch_size, image_size, channels=3, rank=None, size=None,
                 seed=0, shuffle=True, drop_last=False, prefetch=4):
        if batch_size < 1:
            raise ValueError("batch_size %d: expected >= 1" % batch_size)
        if prefetch < 1:
            raise ValueError("prefetch %d: expected >= 1" % prefetch)
        if (rank is None) != (size is None):
            raise ValueError("give both rank and size, or neither")
        if rank is None:
            rank, size = _default_layout()
        self.root = os.fspath(root)
        self.batch_size = int(batch_size)
        self.image_size = _size_pair(image_size)
        self.channels = channels
        self.rank, self.size = int(rank), int(size)
        self.seed, self.shuffle, self.drop_last = int(seed), bool(shuffle), bool(drop_last)
        self.prefetch = int(prefetch)
        self.folder = ImageFolder(self.root, self.image_size, channels)
        self.sampler = DistributedSampler(len(self.folder), self.rank, self.size,
                                          self.seed, shuffle=self.shuffle)
        self._next_epoch = 0

    # ---- the data set

    @property
    def classes(self):
        """Class folder names; label i is classes[i]."""
        return self.folder.classes

    @property
    def num_samples(self):
        """Images of this rank per epoch (the same on every rank)."""
        return self.sampler.num_samples

    def __len__(self):
        """Batches per epoch."""
        n, b = self.num_samples, self.batch_size
        return n // b if self.drop_last else (n + b - 1) // b

    # ---- epochs

    def set_epoch(self, epoch):
        """The epoch the next iter() reads (its shuffle)."""
        self._next_epoch = int(epoch)

    @property
    def epoch(self):
        """The epoch the next iter() reads."""
        return self._next_epoch

    def indices(self, epoch):
        """This rank's sample indices in reading order for an epoch."""
        self.sampler.set_epoch(int(epoch))
        return self.sampler.indices()

    def batches(self, epoch=None, limit=None):
        """An iterator over one epoch's batches (default: the next epoch),
        at most `limit` of them: only those are decoded."""
        if epoch is None:
            epoch = self._next_epoch
        self._next_epoch = int(epoch) + 1
        order = self.indices(epoch).tolist()
        count = len(self)
        if limit is not None:
            count = min(count, max(0, int(limit)))
        b = self.batch_size
        lists = [order[i * b:(i + 1) * b] for i in range(count)]
        return BatchPrefetcher(self.folder, lists, self.prefetch)

    def __iter__(self):
        return self.batches()

    def __repr__(self):
        return ("ImageFolderLoader(%r, %d images, %d classes, batch %d, %dx%dx%d, "
                "rank %d of %d)" % (self.root, len(self.folder), len(self.classes),
                                    self.batch_size, self.channels, self.image_size[0],
                                    self.image_size[1], self.rank, self.size))
