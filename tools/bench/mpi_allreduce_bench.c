/* mpi-bench: the OpenMPI baseline of kolo-bench.
 *
 * Measures MPI_Allreduce (and MPI_Bcast, MPI_Allgather) exactly as kolo-bench
 * measures kolo's collectives, and prints the same columns, so that
 * bench/compare_allreduce.sh can line the numbers up:
 *
 *   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *     mpirun -np 2 --oversubscribe build/bin/mpi-bench -b 8 -e 64M -f 4
 *
 * Method (the nccl-tests method, shared with kolo-bench and gloo_allreduce.py):
 * for each size, WARMUP untimed iterations, then a barrier, then ITERS
 * back-to-back iterations timed together; a rank's time is total / ITERS and
 * the reported time is the maximum over ranks. With --min-time S the
 * iteration count is raised (rank 0 decides from the warm-up and broadcasts
 * it) so that the timed loop lasts about S seconds. algbw = bytes / time,
 * busbw = algbw * factor (allreduce 2(n-1)/n, allgather (n-1)/n, bcast 1).
 * After the timed loop the inputs are refilled with rank-dependent integers
 * (exact in the dtype), the collective is run once more and every element
 * is verified.
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum Op { kAllreduce, kBroadcast, kAllgather };

typedef struct {
  enum Op op;
  size_t min_bytes, max_bytes, factor;
  size_t sizes[64];
  int num_sizes; /* > 0: explicit --sizes list */
  long iters, warmup;
  double min_time;
  int is_double; /* MPI_DOUBLE instead of MPI_FLOAT */
  int json, check;
} Options;

static const char* const kOpNames[] = {"allreduce", "broadcast", "allgather"};

static void usage(FILE* out) {
  fprintf(
      out,
      "usage: mpirun -np N mpi-bench [options]\n"
      "  -o allreduce|broadcast|allgather   collective (allreduce)\n"
      "  -b MINBYTES -e MAXBYTES -f FACTOR  sizes (8 .. 64M, x2); 1K, 4M, 1G accepted\n"
      "  --sizes LIST                       explicit sizes, e.g. 8,1K,1M\n"
      "  -n ITERS -w WARMUP                 timed / untimed iterations (20, 5)\n"
      "  --min-time SECONDS                 raise ITERS so a size runs this long\n"
      "  -d float|double                    element type (float)\n"
      "  --json                             one JSON object per size\n"
      "  --check / --no-check               verify results (on)\n");
}

static int rank_ = 0;

static void badFlag(const char* flag, const char* value, const char* why) {
  if (rank_ == 0) {
    if (value != NULL) {
      fprintf(stderr, "mpi-bench: %s '%s': %s\n", flag, value, why);
    } else {
      fprintf(stderr, "mpi-bench: %s: %s\n", flag, why);
    }
    fprintf(stderr, "run 'mpi-bench --help' for the options\n");
  }
  MPI_Finalize();
  exit(2);
}

/* "8", "1K", "64M", "1G" (binary multiples; an optional trailing B / iB). */
static int parseSize(const char* text, size_t* out) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || errno != 0 || text[0] == '-') return 0;
  unsigned long long mult = 1;
  if (*end == 'k' || *end == 'K') {
    mult = 1ULL << 10;
    ++end;
  } else if (*end == 'm' || *end == 'M') {
    mult = 1ULL << 20;
    ++end;
  } else if (*end == 'g' || *end == 'G') {
    mult = 1ULL << 30;
    ++end;
  }
  if (mult > 1 && *end == 'i') ++end;
  if (*end == 'b' || *end == 'B') ++end;
  if (*end != '\0') return 0;
  if (v > (unsigned long long)SIZE_MAX / mult) return 0;
  *out = (size_t)(v * mult);
  return 1;
}

static long parseCount(const char* flag, const char* text, long min) {
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < min) {
    char why[64];
    snprintf(why, sizeof why, "expected an integer >= %ld", min);
    badFlag(flag, text, why);
  }
  return v;
}

static void parseArgs(int argc, char** argv, Options* o) {
  memset(o, 0, sizeof *o);
  o->op = kAllreduce;
  o->min_bytes = 8;
  o->max_bytes = 64u << 20;
  o->factor = 2;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      if (rank_ == 0) usage(stdout);
      MPI_Finalize();
      exit(0);
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
      continue;
    } else if (strcmp(a, "--check") == 0 || strcmp(a, "-c") == 0) {
      o->check = 1;
      continue;
    } else if (strcmp(a, "--no-check") == 0) {
      o->check = 0;
      continue;
    }
    static const char* const kWithValue[] = {"-o", "-b",      "-e",         "-f", "-n",
                                             "-w", "--sizes", "--min-time", "-d"};
    int known = 0;
    for (size_t k = 0; k < sizeof kWithValue / sizeof kWithValue[0]; ++k) {
      if (strcmp(a, kWithValue[k]) == 0) known = 1;
    }
    if (!known) badFlag(a, NULL, "unknown option");
    if (i + 1 >= argc) badFlag(a, NULL, "needs a value");
    const char* v = argv[++i];
    if (strcmp(a, "-o") == 0) {
      int found = 0;
      for (int k = 0; k < 3; ++k) {
        if (strcmp(v, kOpNames[k]) == 0) {
          o->op = (enum Op)k;
          found = 1;
        }
      }
      if (!found) badFlag(a, v, "expected allreduce, broadcast or allgather");
    } else if (strcmp(a, "-b") == 0) {
      if (!parseSize(v, &o->min_bytes)) badFlag(a, v, "not a size (e.g. 8, 1K, 64M)");
    } else if (strcmp(a, "-e") == 0) {
      if (!parseSize(v, &o->max_bytes)) badFlag(a, v, "not a size (e.g. 8, 1K, 64M)");
    } else if (strcmp(a, "-f") == 0) {
      o->factor = (size_t)parseCount(a, v, 2);
    } else if (strcmp(a, "-n") == 0) {
      o->iters = parseCount(a, v, 1);
    } else if (strcmp(a, "-w") == 0) {
      o->warmup = parseCount(a, v, 0);
    } else if (strcmp(a, "--min-time") == 0) {
      char* end = NULL;
      o->min_time = strtod(v, &end);
      if (end == v || *end != '\0' || !(o->min_time >= 0) || o->min_time > 3600) {
        badFlag(a, v, "expected seconds between 0 and 3600");
      }
    } else if (strcmp(a, "-d") == 0) {
      if (strcmp(v, "float") == 0 || strcmp(v, "float32") == 0) {
        o->is_double = 0;
      } else if (strcmp(v, "double") == 0 || strcmp(v, "float64") == 0) {
        o->is_double = 1;
      } else {
        badFlag(a, v, "expected float or double (the MPI baseline measures these)");
      }
    } else if (strcmp(a, "--sizes") == 0) {
      char buf[1024];
      snprintf(buf, sizeof buf, "%s", v);
      o->num_sizes = 0;
      for (char* tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        if (o->num_sizes == 64) badFlag(a, v, "at most 64 sizes");
        if (!parseSize(tok, &o->sizes[o->num_sizes])) badFlag(a, tok, "not a size");
        ++o->num_sizes;
      }
      if (o->num_sizes == 0) badFlag(a, v, "empty list");
    }
  }
  if (o->num_sizes == 0) {
    if (o->min_bytes > o->max_bytes)
      badFlag("-b", NULL, "MINBYTES is larger than MAXBYTES (-e)");
    for (size_t s = o->min_bytes;; s *= o->factor) {
      if (o->num_sizes == 64) badFlag("-f", NULL, "more than 64 sizes");
      o->sizes[o->num_sizes++] = s;
      if (s == 0 || s > o->max_bytes / o->factor) break;
    }
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A small pseudo-random integer per (rank, global index): exact in float, and
 * a block landing at the wrong offset is caught with high probability. */
static double value(int rank, size_t index) {
  uint64_t h = (uint64_t)index * 0x9E3779B97F4A7C15ULL;
  return (double)(((h >> 61) + (uint64_t)rank) % 8);
}

typedef struct {
  void* send;
  void* recv;
  size_t count;    /* elements in the "bytes" buffer */
  size_t per_rank; /* allgather: elements each rank contributes */
} Buffers;

static void store(int is_double, void* buf, size_t i, double v) {
  if (is_double) {
    ((double*)buf)[i] = v;
  } else {
    ((float*)buf)[i] = (float)v;
  }
}

static double load(int is_double, const void* buf, size_t i) {
  return is_double ? ((const double*)buf)[i] : (double)((const float*)buf)[i];
}

static void runOnce(const Options* o, Buffers* b, MPI_Datatype type) {
  int rc = MPI_SUCCESS;
  switch (o->op) {
    case kAllreduce:
      rc = MPI_Allreduce(b->send, b->recv, (int)b->count, type, MPI_SUM, MPI_COMM_WORLD);
      break;
    case kBroadcast:
      rc = MPI_Bcast(b->recv, (int)b->count, type, 0, MPI_COMM_WORLD);
      break;
    case kAllgather:
      rc = MPI_Allgather(b->send, (int)b->per_rank, type, b->recv, (int)b->per_rank, type,
                         MPI_COMM_WORLD);
      break;
  }
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "mpi-bench: rank %d: MPI call failed with code %d\n", rank_, rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Fills the inputs for the check (and the timing), and the output with a
 * sentinel that no correct result holds at that index. */
static void fill(const Options* o, Buffers* b, int rank) {
  const int d = o->is_double;
  switch (o->op) {
    case kAllreduce:
      for (size_t i = 0; i < b->count; ++i) {
        store(d, b->send, i, value(rank, i));
        store(d, b->recv, i, -1.0);
      }
      break;
    case kBroadcast:
      for (size_t i = 0; i < b->count; ++i)
        store(d, b->recv, i, rank == 0 ? value(0, i) : -1.0);
      break;
    case kAllgather:
      for (size_t k = 0; k < b->per_rank; ++k) {
        store(d, b->send, k, value(rank, (size_t)rank * b->per_rank + k));
      }
      for (size_t i = 0; i < b->count; ++i) store(d, b->recv, i, -1.0);
      break;
  }
}

/* Returns 1 when every element is right; else prints the first bad one. */
static int verify(const Options* o, const Buffers* b, int rank, int size) {
  for (size_t i = 0; i < b->count; ++i) {
    double expected = 0;
    switch (o->op) {
      case kAllreduce:
        for (int r = 0; r < size; ++r) expected += value(r, i);
        break;
      case kBroadcast: expected = value(0, i); break;
      case kAllgather: expected = value((int)(i / b->per_rank), i); break;
    }
    double got = load(o->is_double, b->recv, i);
    if (got != expected) {
      fprintf(stderr,
              "mpi-bench: rank %d: %s of %zu elements: wrong result at index %zu: "
              "expected %g, got %g\n",
              rank, kOpNames[o->op], b->count, i, expected, got);
      return 0;
    }
  }
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options o;
  parseArgs(argc, argv, &o);

  const size_t esize = o.is_double ? 8 : 4;
  const MPI_Datatype type = o.is_double ? MPI_DOUBLE : MPI_FLOAT;
  size_t max_bytes = 0;
  for (int s = 0; s < o.num_sizes; ++s) {
    if (o.sizes[s] > max_bytes) max_bytes = o.sizes[s];
  }
  if (max_bytes / esize > (size_t)0x7fffffff)
    badFlag("-e", NULL, "more than 2^31-1 elements");
  Buffers b;
  b.send = aligned_alloc(4096, max_bytes / esize * esize + 4096);
  b.recv = aligned_alloc(4096, max_bytes / esize * esize + 4096);
  if (b.send == NULL || b.recv == NULL) {
    fprintf(stderr, "mpi-bench: rank %d: cannot allocate 2 x %zu bytes\n", rank_,
            max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  const double factor = o.op == kAllreduce   ? 2.0 * (size - 1) / size
                        : o.op == kAllgather ? (double)(size - 1) / size
                                             : 1.0;
  if (rank_ == 0 && !o.json) {
    printf("# mpi-bench: %s  ranks %d  dtype %s  op sum  iters %ld", kOpNames[o.op], size,
           o.is_double ? "float64" : "float32", o.iters);
    if (o.min_time > 0) printf(" (or more to run %.2f s)", o.min_time);
    printf("  warmup %ld  check %s\n", o.warmup, o.check ? "on" : "off");
    printf(
        "# time: back-to-back iterations after a barrier, total / iters, max over "
        "ranks\n");
    printf("# %12s %12s %9s %10s %8s %12s %12s %12s %6s\n", "bytes", "count", "dtype",
           "algorithm", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check");
  }

  int all_ok = 1;
  for (int s = 0; s < o.num_sizes; ++s) {
    b.count = o.sizes[s] / esize;
    b.per_rank = 0;
    if (o.op == kAllgather) {
      b.per_rank = b.count / (size_t)size;
      b.count = b.per_rank * (size_t)size;
    }
    const size_t bytes = b.count * esize;
    fill(&o, &b, rank_);

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (long i = 0; i < o.warmup; ++i) runOnce(&o, &b, type);
    double per_iter = o.warmup > 0 ? (now() - t0) / (double)o.warmup : 0;
    long iters = o.iters;
    if (o.min_time > 0) {
      if (per_iter <= 0) {
        double t = now();
        runOnce(&o, &b, type);
        per_iter = now() - t;
      }
      double want = ceil(o.min_time / (per_iter > 1e-9 ? per_iter : 1e-9));
      long wanted = want > 1e7 ? 10000000L : (long)want;
      if (wanted > iters) iters = wanted;
      MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    for (long i = 0; i < iters; ++i) runOnce(&o, &b, type);
    double elapsed = (now() - t0) / (double)iters;
    double worst = 0;
    MPI_Allreduce(&elapsed, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    const char* check = "-";
    if (o.check) {
      fill(&o, &b, rank_);
      runOnce(&o, &b, type);
      int ok = verify(&o, &b, rank_, size), every = 0;
      MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      check = every ? "ok" : "FAIL";
      if (!every) all_ok = 0;
    }

    const double time_us = worst * 1e6;
    const double algbw = worst > 0 ? (double)bytes / worst / 1e9 : 0;
    const double busbw = algbw * factor;
    if (rank_ == 0) {
      if (o.json) {
        printf(
            "{\"tool\":\"mpi-bench\",\"op\":\"%s\",\"bytes\":%zu,\"count\":%zu,"
            "\"dtype\":\"%s\",\"redop\":\"sum\",\"algorithm\":\"mpi\",\"ranks\":%d,"
            "\"iters\":%ld,\"time_us\":%.3f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,"
            "\"check\":\"%s\"}\n",
            kOpNames[o.op], bytes, b.count, o.is_double ? "float64" : "float32", size,
            iters, time_us, algbw, busbw, check);
      } else {
        printf("  %12zu %12zu %9s %10s %8ld %12.2f %12.3f %12.3f %6s\n", bytes, b.count,
               o.is_double ? "float64" : "float32", "mpi", iters, time_us, algbw, busbw,
               check);
      }
      fflush(stdout);
    }
  }
  free(b.send);
  free(b.recv);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
