/* The kolo C API in a few lines: every rank contributes a small float array,
 * allreduce sums it in place, and each rank checks the result.
 *
 *   build/bin/kolorun -np 4 build/bin/c_allreduce
 *   mpirun -np 4 build/bin/c_allreduce
 *
 * Build against an installed kolo:
 *   cc c_allreduce.c $(pkg-config --cflags --libs kolo) -o c_allreduce
 * or, in CMake, find_package(kolo) and link kolo::kolo.
 */
#include <kolo/kolo.h>
#include <stdio.h>

#define COUNT 10

/* Prints why a kolo call failed and returns its code. */
static int report(const char* what, int code) {
  fprintf(stderr, "%s failed: %s (%s)\n", what, kolo_error_name(code), kolo_last_error());
  return code;
}

int main(void) {
  int rc = kolo_init();
  if (rc != KOLO_OK) return report("kolo_init", rc);

  const int rank = kolo_rank();
  const int size = kolo_size();

  /* Rank r contributes r + i at index i; the sum over ranks is
   * size * i + size * (size - 1) / 2, exact in float for small sizes. */
  float data[COUNT];
  for (int i = 0; i < COUNT; ++i) data[i] = (float)(rank + i);

  rc = kolo_allreduce(data, data, COUNT, KOLO_FLOAT32, KOLO_SUM); /* in place */
  if (rc != KOLO_OK) {
    report("kolo_allreduce", rc);
    kolo_finalize();
    return rc;
  }

  int wrong = 0;
  for (int i = 0; i < COUNT; ++i) {
    const float expected = (float)size * (float)i + (float)(size * (size - 1)) / 2.0f;
    if (data[i] != expected) {
      fprintf(stderr, "rank %d: data[%d] = %g, expected %g\n", rank, i, data[i], expected);
      wrong = 1;
    }
  }

  /* Out of place: the largest rank number, seen by everyone. */
  float mine = (float)rank;
  float largest = -1.0f;
  rc = kolo_allreduce(&mine, &largest, 1, KOLO_FLOAT32, KOLO_MAX);
  if (rc != KOLO_OK) {
    report("kolo_allreduce(max)", rc);
    kolo_finalize();
    return rc;
  }
  if (largest != (float)(size - 1)) {
    fprintf(stderr, "rank %d: max = %g, expected %d\n", rank, largest, size - 1);
    wrong = 1;
  }

  if (!wrong) {
    printf("rank %d of %d: allreduce of %d floats ok (data[%d] = %g)\n", rank, size, COUNT,
           COUNT - 1, data[COUNT - 1]);
  }

  rc = kolo_finalize();
  if (rc != KOLO_OK) return report("kolo_finalize", rc);
  return wrong;
}
