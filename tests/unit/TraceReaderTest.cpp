// Unit tests of the trace reader: damaged, truncated, foreign and missing files are refused with
// a reason; a directory with some of them still yields the good ranks.

#include "attnscope/analysis/TraceReader.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "TraceTestData.h"

namespace attnscope {
namespace {

using analysis::RankTrace;
using analysis::readRankTrace;
using testdata::TempDir;

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string readError(const std::string& path) {
  RankTrace t;
  std::string error;
  if (readRankTrace(path, &t, &error)) return "<read>";
  return error;
}

TEST(TraceReaderTest, MissingEmptyAndForeignFilesAreRefusedWithAReason) {
  TempDir dir;
  EXPECT_EQ(readError(dir.file("rank-0.sqlite")), "cannot open: No such file or directory");
  writeAll(dir.file("empty.sqlite"), "");
  EXPECT_EQ(readError(dir.file("empty.sqlite")), "empty file (0 bytes)");
  writeAll(dir.file("text.sqlite"), std::string(5000, 'x'));
  EXPECT_EQ(readError(dir.file("text.sqlite")),
            "not a readable SQLite database: file is not a database");
  EXPECT_EQ(readError(dir.path()), "not a regular file");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("other.sqlite").c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  EXPECT_EQ(readError(dir.file("other.sqlite")), "not an attnscope trace (no such table: meta)");
}

TEST(TraceReaderTest, TruncatedFileIsRefused) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 1, 4, 5, 200);
  const std::string bytes = readAll(dir.file("rank-0.sqlite"));
  ASSERT_GT(bytes.size(), 40000u);
  writeAll(dir.file("rank-0.sqlite"), bytes.substr(0, bytes.size() / 2));
  const std::string error = readError(dir.file("rank-0.sqlite"));
  EXPECT_EQ(error.rfind("corrupt or truncated", 0), 0u) << error;
  std::printf("truncated: %s\n", error.c_str());
}

TEST(TraceReaderTest, OverwrittenPagesAreRefused) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 1, 4, 5, 200);
  std::string bytes = readAll(dir.file("rank-0.sqlite"));
  for (size_t i = 4096 * 2; i < bytes.size(); i += 4096) {
    for (size_t j = 0; j < 64; ++j)
      bytes[i + j] = static_cast<char>(0xA5 ^ j);  // every page header
  }
  writeAll(dir.file("rank-0.sqlite"), bytes);
  const std::string error = readError(dir.file("rank-0.sqlite"));
  EXPECT_TRUE(error.rfind("corrupt or truncated", 0) == 0 ||
              error.rfind("not a readable SQLite", 0) == 0)
      << error;
}

TEST(TraceReaderTest, UndecodableStepRecordsAreLeftOutAndCounted) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 1, 2, 1, 10);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("rank-0.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "UPDATE steps SET data = x'0501' WHERE step = 4", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  RankTrace t;
  std::string error;
  ASSERT_TRUE(readRankTrace(dir.file("rank-0.sqlite"), &t, &error)) << error;
  EXPECT_EQ(t.steps.size(), 9u);
  EXPECT_EQ(t.badSteps, 1u);
  EXPECT_EQ(t.firstBadStep, "step 4: call count 5 too large at byte 1 of 2");
}

TEST(TraceReaderTest, BadMetadataIsRefusedNamingTheValue) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 2, 2, 1, 10);
  const auto setMeta = [&](const char* key, const char* value) {
    sqlite3* db = nullptr;
    sqlite3_open(dir.file("rank-0.sqlite").c_str(), &db);
    const std::string sql =
        std::string("UPDATE meta SET value = '") + value + "' WHERE key = '" + key + "'";
    sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
    sqlite3_close(db);
  };
  setMeta("world_size", "0");
  EXPECT_EQ(readError(dir.file("rank-0.sqlite")), "metadata world_size=\"0\" is not above rank 0");
  setMeta("world_size", "2");
  setMeta("rank", "-1");
  EXPECT_EQ(readError(dir.file("rank-0.sqlite")),
            "metadata rank=\"-1\" is not a rank (0 to 16777215)");
  setMeta("rank", "0");
  setMeta("format", "attnscope.trace/9");
  EXPECT_EQ(readError(dir.file("rank-0.sqlite")),
            "format \"attnscope.trace/9\" is not attnscope.trace/1");
}

TEST(TraceReaderTest, DirectoryYieldsGoodRanksAndNamesTheBadOnes) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 4, 2, 2, 20);
  testdata::writeRank(dir.path(), 1, 4, 2, 2, 20);
  testdata::writeRank(dir.path(), 2, 4, 2, 2, 20);
  writeAll(dir.file("rank-1.sqlite"), std::string(8192, '\0'));
  ::rename(dir.file("rank-2.sqlite").c_str(), dir.file("rank-7.sqlite").c_str());
  writeAll(dir.file("rank-x.sqlite"), "x");
  writeAll(dir.file("notes.txt"), "ignored");
  std::vector<RankTrace> traces;
  std::vector<analysis::SkippedFile> skipped;
  std::string error;
  ASSERT_TRUE(analysis::readTraceDirectory(dir.path(), &traces, &skipped, &error)) << error;
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0].rank, 0);
  ASSERT_EQ(skipped.size(), 3u);
  std::map<std::string, std::string> reasons;
  for (const auto& s : skipped) reasons[s.path.substr(dir.path().size() + 1)] = s.reason;
  EXPECT_EQ(reasons["rank-x.sqlite"], "file name does not carry a rank (expected rank-<r>.sqlite)");
  EXPECT_EQ(reasons["rank-7.sqlite"], "metadata says rank 2, the file name rank 7");
  EXPECT_FALSE(reasons["rank-1.sqlite"].empty());
  EXPECT_FALSE(analysis::readTraceDirectory(dir.file("nope"), &traces, &skipped, &error));
  EXPECT_EQ(error, "cannot read directory " + dir.file("nope") + ": No such file or directory");
}

TEST(TraceReaderTest, FileWithoutTheRooflineTableReadsWithNoRows) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 1, 2, 2, 10);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("rank-0.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE roofline", nullptr, nullptr, nullptr),
            SQLITE_OK);  // a file from before it
  sqlite3_close(db);
  RankTrace t;
  std::string error;
  ASSERT_TRUE(readRankTrace(dir.file("rank-0.sqlite"), &t, &error)) << error;
  EXPECT_EQ(t.steps.size(), 20u);
  EXPECT_TRUE(t.roofline.empty());
  EXPECT_EQ(t.badRooflineRows, 0u);
}

TEST(TraceReaderTest, RooflineRowsOutOfRangeAreLeftOutAndCounted) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 1, 2, 1, 10);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("rank-0.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(
          db,
          "INSERT INTO roofline VALUES(1, 0, 0, 1, 5, 0.5, 0.5, 1e9, 1e8, 1e9);"   // good
          "INSERT INTO roofline VALUES(1, 0, 3, 1, 5, 0.5, 0.5, 1e9, 1e8, 1e9);"   // phase 3
          "INSERT INTO roofline VALUES(1, 0, 0, 11, 5, 0.5, 0.5, 1e9, 1e8, 1e9);"  // kind 11
          "INSERT INTO roofline VALUES(1, -1, 0, 2, 5, 0.5, 0.5, 1e9, 1e8, 1e9);"  // layer -1
          "INSERT INTO roofline VALUES(1, 0, 0, 3, -5, 0.5, 0.5, 1e9, 1e8, 1e9);"  // ops < 0
          "INSERT INTO roofline VALUES(1, 0, 0, 4, 5, -0.5, 0, 1e9, 1e8, 1e9);"    // seconds < 0
          "INSERT INTO roofline VALUES(1, 0, 0, 5, 5, 0.5, 0.5, NULL, 1e8, 0);"    // flops NULL
          "INSERT INTO roofline VALUES(1, 0, 0, 6, 5, 0.5, 0.5, 1e999, 1e8, 0);"   // flops inf
          "INSERT INTO roofline VALUES(1, 0, 0, 7, 5, 0.5, 0.9, 1e9, 1e8, 0);"     // modelled > all
          "INSERT INTO roofline VALUES(1, 0, 0, 8, 5, 0.5, 0.5, 1e9, 1e8, 2e9);"   // wide > flops
          "INSERT INTO roofline VALUES(2, 1, 1, 0, 5, 0.5, 0.5, 'x', 1e8, 0);",    // flops text
          nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  static_assert(kNumOpKinds == 11, "the kind row above must be the first kind out of range");
  RankTrace t;
  std::string error;
  ASSERT_TRUE(readRankTrace(dir.file("rank-0.sqlite"), &t, &error)) << error;
  ASSERT_EQ(t.roofline.size(), 1u);
  EXPECT_EQ(t.roofline[0].kind, OpKind::kScoreMatmul);
  EXPECT_EQ(t.badRooflineRows, 10u);
}

TEST(TraceReaderTest, ImageInMemoryReadsLikeTheFile) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 1, 2, 2, 20);
  const std::string bytes = readAll(dir.file("rank-0.sqlite"));
  RankTrace t;
  std::string error;
  ASSERT_TRUE(analysis::readRankTraceImage(reinterpret_cast<const uint8_t*>(bytes.data()),
                                           bytes.size(), "image", &t, &error))
      << error;

  EXPECT_EQ(t.steps.size(), 40u);
  EXPECT_EQ(t.path, "image");
}

}  // namespace
}  // namespace attnscope
