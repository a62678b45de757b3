// Whether a path that the ranks of a job share on one host (a file store
// directory, a shared-memory segment) is the job's own: created by this
// user and writable by nobody else. A path under /tmp or /dev/shm with a
// predictable name can be created first by a stranger (another local
// user); kolo refuses such a path by name instead of using it
// (docs/security.md).
//
// Contract
// - requirePrivate(st, what, path, remedy): `st` is the lstat()/fstat() of
//   `path`. Throws Error(kInvalidArgument) naming `what`, `path`, the owner
//   or the mode, and ending with `remedy`, when the owner is not this
//   process's effective user or the group or others may write it. Returns
//   otherwise. Header-only, no state.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/check.h"

namespace kolo {

inline std::string modeText(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

inline void requirePrivate(const struct stat& st, const std::string& what,
                           const std::string& path, const std::string& remedy) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << " '" << path << "' belongs to uid " << st.st_uid
                    << ", not to this user (uid " << me
                    << "): kolo did not create it, and another user could read or "
                       "change what the ranks exchange there; refusing it ("
                    << remedy << ")");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << " '" << path << "' has mode " << modeText(st.st_mode)
                    << ": its group or other users may write it, so what the ranks "
                       "exchange there could be changed by another user; refusing it ("
                    << remedy << ")");
  }
}

}  // namespace kolo
