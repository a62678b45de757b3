// RANK_CHECK(cond, code): in a rank process's body (a function with an int
// `rank` in scope that returns the process's exit code), prints the failed
// condition with its line and kolo_last_error(), and returns `code`.
#pragma once

#include <kolo/kolo.h>

#include <cstdio>

#define RANK_CHECK(cond, code)                                                     \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::printf("rank %d: check failed at line %d: %s (last error: %s)\n", rank, \
                  __LINE__, #cond, kolo_last_error());                             \
      std::fflush(stdout);                                                         \
      return code;                                                                 \
    }                                                                              \
  } while (0)
