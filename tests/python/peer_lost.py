"""A rank that dies surfaces on the others as kolo.PeerLostError naming it
(never an abort of the Python process). Run under kolorun with 2 ranks:
    kolorun -np 2 /usr/bin/python3 tests/python/peer_lost.py
Rank 1 leaves abruptly (os._exit) after a barrier; rank 0 waits on an
allreduce that rank 1 never submits and must get PeerLostError; then every
later submission fails the same way. Exit status 0 on success."""

import os
import sys

import numpy as np

import kolo
import kolo.numpy as kn

kolo.init()
kn.barrier()
if kolo.rank() == 1:
    os._exit(0)
try:
    kn.allreduce(np.ones(4), name="never.answered")
except kolo.PeerLostError as e:
    print(f"rank 0: PeerLostError code {e.code}: {e}", flush=True)
    ok = "rank 1" in str(e)
except kolo.KoloError as e:
    print(f"rank 0: wrong class {type(e).__name__}: {e}", flush=True)
    sys.exit(2)
else:
    print("rank 0: no error", flush=True)
    sys.exit(3)
try:
    kn.allreduce(np.ones(4), name="later")
except kolo.KoloError as e:
    print(f"rank 0: later: {type(e).__name__}: {e}", flush=True)
os._exit(0 if ok else 4)
