// What the tests of the whole runtime over real communicators share
// (runtime_test, runtime_join_test, runtime_reports_test): n ranks as
// threads of the test process (support/comm_world.h), each with its own
// Runtime, fast options, an allreduce request, the error text of a handle,
// and the contents of a report file.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/runtime.h"
#include "support/comm_world.h"

namespace kolo::runtime::runtime_world {

inline std::shared_ptr<Communicator> borrow(Communicator& c) {
  return std::shared_ptr<Communicator>(&c, [](Communicator*) {});
}

inline RuntimeOptions fastOptions() {
  RuntimeOptions o;
  o.cycleTimeMs = 0.5;
  o.stallWarningSeconds = 0;  // no warnings in tests
  return o;
}

// Runs fn(runtime, rank) on n ranks; every rank then passes a barrier
// through the runtime before shutting it down, so no rank stops the others
// early.
inline void withRuntimes(int n, const RuntimeOptions& options,
                         const std::function<void(Runtime&, int)>& fn,
                         const std::string& transport = "auto") {
  test::withCommunicators(n, test::testSettings(transport), [&](Communicator& c) {
    Runtime rt(borrow(c), options);
    fn(rt, c.rank());
    OpRequest end;
    end.spec.name = "test.end";
    end.spec.kind = OpKind::kBarrier;
    rt.enqueue(end)->wait();
    rt.shutdown();
  });
}

// The contents of the file at `path` (empty when it cannot be read), which
// is then removed.
inline std::string takeFile(const std::string& path) {
  std::string text;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    char chunk[4096];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) text.append(chunk, got);
    std::fclose(f);
  }
  std::remove(path.c_str());
  return text;
}

inline OpRequest allreduce(const std::string& name, std::vector<float>& buf,
                           ReduceOp op = ReduceOp::kSum) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = DataType::kFloat32;
  r.spec.op = op;
  r.spec.shape = {static_cast<int64_t>(buf.size())};
  r.input = r.output = buf.data();
  return r;
}

inline std::string errorText(const HandlePtr& h, ErrorCode* code = nullptr) {
  try {
    h->wait();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

}  // namespace kolo::runtime::runtime_world
