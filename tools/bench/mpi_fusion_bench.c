/* mpi-fusion-bench: the MPI baseline of bench/fusion.sh, one MPI_Allreduce
 * per tensor.
 *
 *   build/bin/kolo-fusion-bench --print-tensors resnet50 > /tmp/resnet50.txt
 *   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *     mpirun -np 2 --oversubscribe build/bin/mpi-fusion-bench \
 *       --tensors /tmp/resnet50.txt --workload resnet50
 *
 * The tensor file lists one tensor per line in submission order, its
 * element count first (the rest of the line, a name and shape, is ignored;
 * lines starting with '#' are comments), as kolo-fusion-bench
 * --print-tensors writes it. One step: for every tensor in that order, a
 * blocking MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM) and a division by
 * the number of ranks (an average, as kolo-fusion-bench asks of the
 * runtime).
 *
 * Method (kolo-fusion-bench's): WARMUP untimed steps, WARMUP more timed for
 * rank 0 to pick the steps per window so that a window lasts about
 * --window-time seconds; --windows
 * windows, each after a barrier, a window's time the maximum over ranks;
 * the median of the windows' steps/s is reported. Then the inputs are
 * refilled with kolo-fusion-bench's rank-dependent values, one more step
 * runs and every element is compared with the average. Exit 1 on a wrong
 * element, 2 on a bad flag.
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const char* tensors;
  const char* workload;
  int windows;
  double window_time;
  long steps, warmup;
  int json;
} Options;

static int rank_ = 0, size_ = 1;

static void usage(FILE* out) {
  fprintf(out,
          "usage: mpirun -np N mpi-fusion-bench --tensors FILE [options]\n"
          "  --tensors FILE      element counts in submission order, one per line\n"
          "  --workload NAME     label for the output (the file's name)\n"
          "  --windows N         timed windows (5)\n"
          "  --window-time S     seconds per window (0.5)\n"
          "  --steps N           steps per window instead of --window-time\n"
          "  --warmup N          untimed steps (3)\n"
          "  --json              one JSON object\n");
}

static int bad_flag(const char* flag, const char* value, const char* what) {
  if (rank_ == 0) {
    fprintf(stderr, "mpi-fusion-bench: %s '%s': %s\n", flag, value ? value : "", what);
  }
  return 2;
}

static int parse_long(const char* text, long lo, long* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno != 0 || v < lo) return 0;
  *out = v;
  return 1;
}

static int parse(int argc, char** argv, Options* o) {
  o->tensors = NULL;
  o->workload = "-";
  o->windows = 5;
  o->window_time = 0.5;
  o->steps = 0;
  o->warmup = 3;
  o->json = 0;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
      if (rank_ == 0) usage(stdout);
      return 1;
    }
    if (strcmp(flag, "--json") == 0) {
      o->json = 1;
      continue;
    }
    if (i + 1 >= argc) return bad_flag(flag, "", "needs a value (or unknown flag)");
    const char* v = argv[++i];
    long n = 0;
    if (strcmp(flag, "--tensors") == 0) {
      o->tensors = v;
    } else if (strcmp(flag, "--workload") == 0) {
      o->workload = v;
    } else if (strcmp(flag, "--windows") == 0) {
      if (!parse_long(v, 1, &n)) return bad_flag(flag, v, "expected an integer >= 1");
      o->windows = (int)n;
    } else if (strcmp(flag, "--window-time") == 0) {
      char* end = NULL;
      o->window_time = strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(o->window_time > 0 && o->window_time < 3600)) {
        return bad_flag(flag, v, "expected seconds in (0, 3600)");
      }
    } else if (strcmp(flag, "--steps") == 0) {
      if (!parse_long(v, 1, &n)) return bad_flag(flag, v, "expected an integer >= 1");
      o->steps = n;
    } else if (strcmp(flag, "--warmup") == 0) {
      if (!parse_long(v, 0, &n)) return bad_flag(flag, v, "expected an integer >= 0");
      o->warmup = n;
    } else {
      return bad_flag(flag, v, "unknown flag");
    }
  }
  if (o->tensors == NULL) return bad_flag("--tensors", "", "required");
  return 0;
}

/* Reads the counts; returns how many (0 with a message on failure). */
static size_t read_counts(const char* path, long** counts) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "mpi-fusion-bench: rank %d: cannot open --tensors '%s': %s\n", rank_,
            path, strerror(errno));
    return 0;
  }
  size_t n = 0, cap = 256;
  *counts = malloc(cap * sizeof(long));
  char line[512];
  while (fgets(line, sizeof line, f) != NULL) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char* end = NULL;
    long v = strtol(line, &end, 10);
    if (end == line || v < 0) {
      fprintf(stderr, "mpi-fusion-bench: rank %d: %s: line '%.40s' has no count\n", rank_,
              path, line);
      fclose(f);
      return 0;
    }
    if (n == cap) *counts = realloc(*counts, (cap *= 2) * sizeof(long));
    (*counts)[n++] = v;
  }
  fclose(f);
  if (n == 0) fprintf(stderr, "mpi-fusion-bench: %s: no tensors\n", path);
  return n;
}

static long num_tensors_;
static long* counts_;
static float** bufs_;

static float input_value(int rank, size_t tensor, size_t j) {
  return (float)(((size_t)rank * 3 + tensor + j) % 11);
}

static void fill_all(void) {
  for (long t = 0; t < num_tensors_; ++t) {
    for (long j = 0; j < counts_[t]; ++j) bufs_[t][j] = input_value(rank_, t, j);
  }
}

static void step(void) {
  const float scale = 1.0f / (float)size_;
  for (long t = 0; t < num_tensors_; ++t) {
    MPI_Allreduce(MPI_IN_PLACE, bufs_[t], (int)counts_[t], MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    float* p = bufs_[t];
    for (long j = 0; j < counts_[t]; ++j) p[j] *= scale;
  }
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  Options o;
  int rc = parse(argc, argv, &o);
  if (rc != 0) {
    MPI_Finalize();
    return rc == 1 ? 0 : 2;
  }
  num_tensors_ = (long)read_counts(o.tensors, &counts_);
  int have = num_tensors_ > 0, all = 0;
  MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    MPI_Finalize();
    return 2;
  }
  size_t bytes = 0;
  bufs_ = malloc(num_tensors_ * sizeof(float*));
  for (long t = 0; t < num_tensors_; ++t) {
    bufs_[t] = malloc((counts_[t] > 0 ? counts_[t] : 1) * sizeof(float));
    bytes += counts_[t] * sizeof(float);
  }
  fill_all();

  for (long i = 0; i < o.warmup; ++i) step();
  long steps = o.steps;
  if (steps == 0) {
    /* Timed after the warm-up (as kolo-fusion-bench does). */
    const long calibrate = o.warmup > 0 ? o.warmup : 1;
    double t0 = MPI_Wtime();
    for (long i = 0; i < calibrate; ++i) step();
    double per_step = (MPI_Wtime() - t0) / calibrate;
    double want = ceil(o.window_time / (per_step > 1e-9 ? per_step : 1e-9));
    steps = want < 1 ? 1 : want > 1e7 ? 10000000 : (long)want;
    MPI_Bcast(&steps, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  }
  double* per_second = malloc(o.windows * sizeof(double));
  for (int w = 0; w < o.windows; ++w) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < steps; ++i) step();
    double seconds = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&seconds, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    per_second[w] = worst > 0 ? steps / worst : 0;
  }

  /* Check: fresh inputs, one step, every element against the average. */
  fill_all();
  step();
  int good = 1;
  for (long t = 0; t < num_tensors_ && good; ++t) {
    for (long j = 0; j < counts_[t]; ++j) {
      double sum = 0;
      for (int r = 0; r < size_; ++r) sum += input_value(r, t, j);
      double expected = sum / size_;
      if (fabs(bufs_[t][j] - expected) >
          1e-5 * (fabs(expected) > 1 ? fabs(expected) : 1)) {
        fprintf(stderr,
                "mpi-fusion-bench: rank %d: tensor %ld (%ld floats): wrong average at "
                "index %ld: expected %g, got %g\n",
                rank_, t, counts_[t], j, expected, bufs_[t][j]);
        good = 0;
        break;
      }
    }
  }
  int all_good = 0;
  MPI_Allreduce(&good, &all_good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

  if (rank_ == 0) {
    double* sorted = malloc(o.windows * sizeof(double));
    memcpy(sorted, per_second, o.windows * sizeof(double));
    qsort(sorted, o.windows, sizeof(double), cmp_double);
    double med = o.windows % 2 ? sorted[o.windows / 2]
                               : (sorted[o.windows / 2 - 1] + sorted[o.windows / 2]) / 2;
    if (o.json) {
      printf(
          "{\"tool\":\"mpi-fusion-bench\",\"mode\":\"per-tensor\",\"workload\":\"%s\","
          "\"case\":\"mpi\",\"ranks\":%d,\"tensors\":%ld,\"bytes\":%zu,\"steps\":%ld,"
          "\"windows\":[",
          o.workload, size_, num_tensors_, bytes, steps);
      for (int w = 0; w < o.windows; ++w) printf("%s%.3f", w ? "," : "", per_second[w]);
      printf("],\"steps_per_s\":%.3f,\"step_ms\":%.4f,\"check\":\"%s\"}\n", med,
             med > 0 ? 1e3 / med : 0, all_good ? "ok" : "FAIL");
    } else {
      printf("# mpi-fusion-bench %s: %d ranks, %ld tensors, %zu bytes\n", o.workload,
             size_, num_tensors_, bytes);
      printf("#   windows of %ld steps (steps/s):", steps);
      for (int w = 0; w < o.windows; ++w) printf(" %.2f", per_second[w]);
      printf("\n  mpi  steps/s %.2f  step %.3f ms  check %s\n", med,
             med > 0 ? 1e3 / med : 0, all_good ? "ok" : "FAIL");
    }
    fflush(stdout);
    free(sorted);
  }
  for (long t = 0; t < num_tensors_; ++t) free(bufs_[t]);
  free(bufs_);
  free(counts_);
  free(per_second);
  MPI_Finalize();
  return all_good ? 0 : 1;
}
