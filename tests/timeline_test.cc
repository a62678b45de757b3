// TimelineWriter alone: the file it leaves is valid JSON (parsed by
// Python's json module) in the Trace Event Format, with one named track per
// tensor, balanced B/E pairs, escaped names, and events from several
// threads at once.
#include "runtime/timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <kolo/error.h>

namespace kolo::runtime {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

// Parses the trace and prints a summary, one line per process and track:
//   process PID HEX(name)
//   track PID TID HEX(name) B E I BAD PHASES
// where HEX is the UTF-8 of the decoded name in hex, BAD counts an E without
// its B, a B left open and timestamps going back within the track, and
// PHASES lists the B names in order.
constexpr const char* kSummary = R"PY(
import json, sys
events = json.load(open(sys.argv[1], encoding="utf-8"))
assert isinstance(events, list)
names, counts = {}, {}
for e in events:
    pid = e["pid"]
    if e["ph"] == "M":
        if e["name"] == "process_name":
            print("process", pid, e["args"]["name"].encode().hex())
        elif e["name"] == "thread_name":
            names[(pid, e["tid"])] = e["args"]["name"]
        continue
    key = (pid, e["tid"])
    if key not in names:
        print("event before its track is named:", e)
        continue
    c = counts.setdefault(key, {"B": 0, "E": 0, "i": 0, "bad": 0, "stack": [],
                                "ts": -1, "phases": []})
    if e["ts"] < c["ts"]:
        c["bad"] += 1
    c["ts"] = e["ts"]
    if e["ph"] == "B":
        c["B"] += 1
        c["stack"].append(e["name"])
        c["phases"].append(e["name"])
    elif e["ph"] == "E":
        c["E"] += 1
        if c["stack"]:
            c["stack"].pop()
        else:
            c["bad"] += 1
    elif e["ph"] == "i":
        c["i"] += 1
for key in sorted(names):
    c = counts.get(key, {"B": 0, "E": 0, "i": 0, "bad": 0, "stack": [], "phases": []})
    print("track", key[0], key[1], names[key].encode().hex(), c["B"], c["E"], c["i"],
          c["bad"] + len(c["stack"]), ",".join(c["phases"]) or "-")
)PY";

std::string hex(const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  }
  return out;
}

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
    char dir[] = "/tmp/kolo_timeline_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    std::ofstream(dir_ + "/summary.py") << kSummary;
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  // The summary of a trace file; "ERROR ..." with Python's output when the
  // file does not parse.
  std::string summarize(const std::string& path) {
    const std::string cmd =
        std::string(kPython) + " '" + dir_ + "/summary.py' '" + path + "' 2>&1";
    std::FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return "ERROR popen";
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    if (status != 0) return "ERROR " + out;
    return out;
  }

  std::string dir_;
};

TEST_F(TimelineTest, TracksPairsAndMetadata) {
  const std::string path = dir_ + "/trace.json";
  auto w = TimelineWriter::open(path, 3);
  EXPECT_EQ(w->path(), path);
  const auto t = TimelineWriter::Clock::now();
  using std::chrono::microseconds;
  w->begin("fc1.weight", phase::kNegotiate, "", t);
  w->begin("fc2.bias", phase::kNegotiate, "", t + microseconds(1));
  w->end("fc1.weight", t + microseconds(5));
  w->begin("fc1.weight", phase::kMemcpyIn, "", t + microseconds(6));
  w->end("fc1.weight", t + microseconds(7));
  w->begin("fc1.weight", phase::kCollective,
           timelineArgs({{"algorithm", "ring"}, {"bytes", "4096"}, {"bucket", "0"}}),
           t + microseconds(8));
  w->end("fc2.bias", t + microseconds(8));
  w->end("fc1.weight", t + microseconds(20));
  w->begin("fc1.weight", phase::kMemcpyOut, "", t + microseconds(21));
  w->end("fc1.weight", t + microseconds(22));
  w->instant("stall", "stall warning", t + microseconds(30));
  w->close();
  w->close();                           // idempotent
  w->begin("late", phase::kNegotiate);  // ignored after close
  EXPECT_EQ(summarize(path), "process 3 " + hex("rank 3") + "\n" + "track 3 1 " +
                                 hex("fc1.weight") +
                                 " 4 4 0 0 NEGOTIATE,MEMCPY_IN_FUSION_BUFFER,COLLECTIVE,"
                                 "MEMCPY_OUT_FUSION_BUFFER\n" +
                                 "track 3 2 " + hex("fc2.bias") + " 1 1 0 0 NEGOTIATE\n" +
                                 "track 3 3 " + hex("stall") + " 0 0 1 0 -\n");
  // The args object came through as written.
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find(R"("args":{"algorithm":"ring","bytes":"4096","bucket":"0"})"),
            std::string::npos)
      << text.str();
}

TEST_F(TimelineTest, OddTensorNamesAreEscaped) {
  const std::string path = dir_ + "/odd.json";
  const std::vector<std::string> names = {
      "quote\"d",
      "back\\slash",
      "new\nline",
      "tab\there",
      std::string("nul\0x", 5),
      "bell\x07",
      "del\x7f",
      "\xc3\xa9t\xc3\xa9",   // été, valid UTF-8
      "\xe2\x82\xac uro",    // euro sign
      "}], {\"ph\": \"E\"",  // looks like JSON
  };
  {
    auto w = TimelineWriter::open(path, 0);
    for (const auto& n : names) {
      w->begin(n, phase::kCollective);
      w->end(n);
    }
    w->begin("stray\xff\xc3", phase::kCollective);  // not UTF-8
    w->end("stray\xff\xc3");
  }  // the destructor closes
  std::string expected = "process 0 " + hex("rank 0") + "\n";
  int tid = 1;
  for (const auto& n : names) {
    expected +=
        "track 0 " + std::to_string(tid++) + " " + hex(n) + " 1 1 0 0 COLLECTIVE\n";
  }
  // Stray bytes read back as the code points of the same values.
  expected += "track 0 " + std::to_string(tid) + " " + hex("stray\xc3\xbf\xc3\x83") +
              " 1 1 0 0 COLLECTIVE\n";
  EXPECT_EQ(summarize(path), expected);
}

TEST(JsonEscape, Characters) {
  EXPECT_EQ(jsonEscape("plain.name/0"), "plain.name/0");
  EXPECT_EQ(jsonEscape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(jsonEscape("\n\t\r\x01\x1f\x7f"), "\\n\\t\\r\\u0001\\u001f\\u007f");
  EXPECT_EQ(jsonEscape("\xc3\xa9"), "\xc3\xa9");
  EXPECT_EQ(jsonEscape("\xc3"), "\\u00c3");                        // truncated sequence
  EXPECT_EQ(jsonEscape("\xed\xa0\x80"), "\\u00ed\\u00a0\\u0080");  // a surrogate
  EXPECT_EQ(jsonEscape("\xc0\xaf"), "\\u00c0\\u00af");             // overlong
}

TEST_F(TimelineTest, ConcurrentWriters) {
  const std::string path = dir_ + "/threads.json";
  constexpr int kThreads = 6;
  constexpr int kTensorsPerThread = 5;
  constexpr int kRounds = 300;  // > 1000 events in all: flushes on the way
  {
    auto w = TimelineWriter::open(path, 1);
    std::vector<std::thread> threads;
    for (int th = 0; th < kThreads; ++th) {
      threads.emplace_back([&, th] {
        for (int round = 0; round < kRounds; ++round) {
          for (int k = 0; k < kTensorsPerThread; ++k) {
            const std::string name =
                "t" + std::to_string(th) + ".layer" + std::to_string(k);
            w->begin(name, phase::kNegotiate);
            w->begin(name, phase::kCollective);
            w->end(name);
            w->end(name);
            if (round % 100 == 0) w->instant(name, "mark");
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    w->close();
  }
  const std::string summary = summarize(path);
  ASSERT_EQ(summary.rfind("ERROR", 0), std::string::npos) << summary;
  std::istringstream lines(summary);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "process 1 " + hex("rank 1"));
  std::vector<std::string> seen;
  std::vector<int> tids;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string word, name, phases;
    int pid, tid, b, e, i, bad;
    f >> word >> pid >> tid >> name >> b >> e >> i >> bad >> phases;
    EXPECT_EQ(word, "track");
    EXPECT_EQ(pid, 1);
    EXPECT_EQ(b, 2 * kRounds) << line;
    EXPECT_EQ(e, 2 * kRounds) << line;
    EXPECT_EQ(i, 3) << line;
    EXPECT_EQ(bad, 0) << line;
    seen.push_back(name);
    tids.push_back(tid);
  }
  ASSERT_EQ(seen.size(), static_cast<size_t>(kThreads * kTensorsPerThread));
  for (int th = 0; th < kThreads; ++th) {
    for (int k = 0; k < kTensorsPerThread; ++k) {
      const std::string name = "t" + std::to_string(th) + ".layer" + std::to_string(k);
      EXPECT_NE(std::find(seen.begin(), seen.end(), hex(name)), seen.end()) << name;
    }
  }
  // Track ids are 1..n, each once.
  std::sort(tids.begin(), tids.end());
  for (size_t k = 0; k < tids.size(); ++k) EXPECT_EQ(tids[k], static_cast<int>(k) + 1);
}

TEST_F(TimelineTest, UnwritablePathNamed) {
  const std::string path = dir_ + "/no/such/dir/trace.json";
  try {
    TimelineWriter::open(path, 0);
    FAIL() << "opened " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST_F(TimelineTest, FlushedBeforeClose) {
  // A run that dies leaves its events up to the last flush; the array
  // lacks only its closing bracket.
  const std::string path = dir_ + "/partial.json";
  auto w = TimelineWriter::open(path, 0);
  for (int k = 0; k < 600; ++k) {
    w->begin("x", phase::kCollective);
    w->end("x");
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string partial = text.str();
  ASSERT_GT(partial.size(), 0u);
  const size_t lastComplete = partial.rfind('}');
  ASSERT_NE(lastComplete, std::string::npos);
  std::ofstream(dir_ + "/patched.json") << partial.substr(0, lastComplete + 1) << "]";
  const std::string summary = summarize(dir_ + "/patched.json");
  EXPECT_EQ(summary.rfind("ERROR", 0), std::string::npos) << summary;
  w->close();
}

}  // namespace
}  // namespace kolo::runtime
