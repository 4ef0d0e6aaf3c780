#include "attnscope/trace/TraceStore.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace attnscope {
namespace {

constexpr char kSchema[] = R"SQL(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS layers(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps(step INTEGER PRIMARY KEY, end_unix REAL NOT NULL,
                                 step_ns INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS windows(interval INTEGER PRIMARY KEY, start_unix REAL NOT NULL,
  end_unix REAL NOT NULL, last_step INTEGER NOT NULL, steps INTEGER NOT NULL,
  sampled_steps INTEGER NOT NULL, forward_s REAL NOT NULL, backward_s REAL NOT NULL,
  step_s REAL NOT NULL, peak_bytes INTEGER NOT NULL, collective_wait_s REAL NOT NULL,
  top_layer INTEGER NOT NULL, top_phase INTEGER NOT NULL, top_kind INTEGER NOT NULL,
  top_share REAL NOT NULL);
CREATE TABLE IF NOT EXISTS window_cells(interval INTEGER PRIMARY KEY, layer INTEGER NOT NULL,
  phase INTEGER NOT NULL, kind INTEGER NOT NULL, factor REAL NOT NULL, share REAL NOT NULL);
CREATE TABLE IF NOT EXISTS rounds(round INTEGER NOT NULL, rank INTEGER NOT NULL,
  unix REAL NOT NULL, present INTEGER NOT NULL, score REAL NOT NULL, attention_s REAL NOT NULL,
  straggler INTEGER NOT NULL, hung INTEGER NOT NULL, missing INTEGER NOT NULL,
  last_step INTEGER NOT NULL, PRIMARY KEY(round, rank)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS findings(kind TEXT NOT NULL, rank INTEGER NOT NULL,
  first_round INTEGER NOT NULL, last_round INTEGER NOT NULL, max_score REAL NOT NULL,
  layer TEXT NOT NULL, phase TEXT NOT NULL, op_kind TEXT NOT NULL, share REAL NOT NULL,
  description TEXT NOT NULL, PRIMARY KEY(kind, rank, first_round)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS roofline(interval INTEGER, layer INTEGER, phase INTEGER, kind INTEGER,
  ops INTEGER, seconds REAL, modelled_seconds REAL, flops REAL, bytes REAL, wide_flops REAL,
  PRIMARY KEY(interval, layer, phase, kind)) WITHOUT ROWID;
)SQL";

std::string sqliteError(sqlite3* db, const std::string& what) {
  return what + ": " + (db != nullptr ? sqlite3_errmsg(db) : "out of memory");
}

// mkdir -p
bool makeDirectories(const std::string& dir, std::string* error) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST) {
      *error = "cannot create directory " + partial + ": " + std::strerror(errno);
      return false;
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = dir + " is not a directory";
    return false;
  }
  return true;
}

int64_t sizeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// A prepared statement, finalised at scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    ok_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) == SQLITE_OK;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  bool ok() const { return ok_; }
  sqlite3_stmt* get() { return stmt_; }
  // Runs to completion and resets for the next bindings.
  bool run() {
    const int rc = sqlite3_step(stmt_);
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return rc == SQLITE_DONE || rc == SQLITE_ROW;
  }
  void bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void bindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  bool ok_ = false;
};

int64_t queryInt(sqlite3* db, const char* sql) {
  Statement s(db, sql);
  if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) return -1;
  return sqlite3_column_int64(s.get(), 0);
}

}  // namespace

std::string TraceStore::fileName(int rank) { return "rank-" + std::to_string(rank) + ".sqlite"; }

std::unique_ptr<TraceStore> TraceStore::open(const std::string& dir, int rank, int64_t maxBytes,
                                             std::string* error) {
  if (!makeDirectories(dir, error)) return nullptr;
  const std::string path = dir + (dir.back() == '/' ? "" : "/") + fileName(rank);
  // A trace belongs to one run: an older run's file of the same rank is replaced.
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((path + suffix).c_str());
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    *error = sqliteError(db, "cannot open " + path);
    sqlite3_close(db);
    return nullptr;
  }
  std::unique_ptr<TraceStore> store(new TraceStore(db, path, maxBytes));
  // The write-ahead log is checkpointed into the main file at about a quarter of the cap (at most
  // the SQLite default of 1000 pages) and truncated back to that size afterwards.
  const int64_t walBytes =
      std::max<int64_t>(64 * 1024, std::min<int64_t>(maxBytes / 4, 4096 * 1000));
  const std::string pragmas =
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=2000;"
      "PRAGMA wal_autocheckpoint=" +
      std::to_string(walBytes / 4096) +
      ";"
      "PRAGMA journal_size_limit=" +
      std::to_string(walBytes) + ";";
  std::string what;
  if (!store->exec(pragmas.c_str(), &what) || !store->exec(kSchema, &what)) {
    *error = "cannot set up " + path + ": " + what;
    return nullptr;
  }
  return store;
}

TraceStore::TraceStore(sqlite3* db, std::string path, int64_t maxBytes)
    : db_(db), path_(std::move(path)), maxBytes_(maxBytes) {}

TraceStore::~TraceStore() { sqlite3_close(db_); }

bool TraceStore::exec(const char* sql, std::string* error) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    *error = message != nullptr ? message : sqlite3_errmsg(db_);
    sqlite3_free(message);
    return false;
  }
  return true;
}

int64_t TraceStore::fileBytes() const { return sizeOf(path_) + sizeOf(path_ + "-wal"); }

bool TraceStore::commit(const TraceInterval& in, std::string* error) {
  std::string what;
  if (!exec("BEGIN IMMEDIATE", &what)) {
    *error = path_ + ": " + what;
    return false;
  }
  const auto failed = [&](const std::string& step) {
    *error = path_ + ": " + step + ": " + sqlite3_errmsg(db_);
    std::string ignored;
    exec("ROLLBACK", &ignored);
    return false;
  };
  {
    Statement meta(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
    if (!meta.ok()) return failed("meta");
    for (const auto& [key, value] : in.meta) {
      meta.bind(1, key);
      meta.bind(2, value);
      if (!meta.run()) return failed("meta");
    }
  }
  if (in.layerNames.size() > layersWritten_) {
    Statement layer(db_, "INSERT OR REPLACE INTO layers(id, name) VALUES(?, ?)");
    if (!layer.ok()) return failed("layers");
    for (size_t i = layersWritten_; i < in.layerNames.size(); ++i) {
      layer.bind(1, static_cast<int64_t>(i));
      layer.bind(2, in.layerNames[i]);
      if (!layer.run()) return failed("layers");
    }
  }
  if (!in.steps.empty()) {
    Statement step(
        db_, "INSERT OR REPLACE INTO steps(step, end_unix, step_ns, data) VALUES(?, ?, ?, ?)");
    if (!step.ok()) return failed("steps");
    for (const EncodedStep& s : in.steps) {
      step.bind(1, static_cast<int64_t>(s.step));
      step.bind(2, s.endUnix);
      step.bind(3, s.stepNs);
      step.bindBlob(4, s.data);
      if (!step.run()) return failed("steps");
    }
  }
  if (in.haveWindow) {
    Statement w(
        db_, "INSERT OR REPLACE INTO windows VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!w.ok()) return failed("windows");
    const RankWindow& r = in.window;
    w.bind(1, static_cast<int64_t>(nextRound_));
    w.bind(2, in.windowStartUnix);
    w.bind(3, in.windowEndUnix);
    w.bind(4, static_cast<int64_t>(r.lastStep));
    w.bind(5, static_cast<int64_t>(r.steps));
    w.bind(6, static_cast<int64_t>(r.sampledSteps));
    w.bind(7, r.forwardSeconds);
    w.bind(8, r.backwardSeconds);
    w.bind(9, r.stepSeconds);
    w.bind(10, static_cast<int64_t>(r.peakBytes));
    w.bind(11, r.collectiveWaitSeconds);
    w.bind(12, static_cast<int64_t>(r.topLayer));
    w.bind(13, static_cast<int64_t>(r.topPhase));
    w.bind(14, static_cast<int64_t>(r.topKind));
    w.bind(15, r.topShare);
    if (!w.run()) return failed("windows");
    // The cell outlier the window reported (the previous window's, against the other ranks):
    // what the report's replay of the detector needs besides the window's scalars.
    if (r.cellLayer >= 0) {
      Statement c(db_, "INSERT OR REPLACE INTO window_cells VALUES(?, ?, ?, ?, ?, ?)");
      if (!c.ok()) return failed("window_cells");
      c.bind(1, static_cast<int64_t>(nextRound_));
      c.bind(2, static_cast<int64_t>(r.cellLayer));
      c.bind(3, static_cast<int64_t>(r.cellPhase));
      c.bind(4, static_cast<int64_t>(r.cellKind));
      c.bind(5, r.cellFactor);
      c.bind(6, r.cellShare);
      if (!c.run()) return failed("window_cells");
    }
  }
  if (!in.roofline.empty()) {
    // Under the number the interval's window row takes (the next one when it has none).
    Statement r(db_, "INSERT OR REPLACE INTO roofline VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!r.ok()) return failed("roofline");
    for (const TraceRooflineRow& x : in.roofline) {
      r.bind(1, static_cast<int64_t>(nextRound_));
      r.bind(2, static_cast<int64_t>(x.layer));
      r.bind(3, static_cast<int64_t>(x.phase));
      r.bind(4, static_cast<int64_t>(x.kind));
      r.bind(5, static_cast<int64_t>(std::min<uint64_t>(x.ops, INT64_MAX)));
      r.bind(6, x.seconds);
      r.bind(7, x.modelledSeconds);
      r.bind(8, x.flops);
      r.bind(9, x.bytes);
      r.bind(10, x.wideFlops);
      if (!r.run()) return failed("roofline");
    }
  }
  if (in.haveRound) {
    Statement s(db_, "INSERT OR REPLACE INTO rounds VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!s.ok()) return failed("rounds");
    for (const RankStatus& r : in.round.ranks) {
      s.bind(1, static_cast<int64_t>(in.round.round));
      s.bind(2, static_cast<int64_t>(r.rank));
      s.bind(3, in.roundUnix);
      s.bind(4, static_cast<int64_t>(r.present));
      s.bind(5, r.score);
      s.bind(6, r.window.attentionSeconds());
      s.bind(7, static_cast<int64_t>(r.straggler));
      s.bind(8, static_cast<int64_t>(r.hung));
      s.bind(9, static_cast<int64_t>(r.missing));
      s.bind(10, static_cast<int64_t>(r.lastStep));
      if (!s.run()) return failed("rounds");
    }
  }
  if (!in.stragglers.empty() || !in.hangs.empty() || !in.cellOutliers.empty()) {
    Statement f(db_, "INSERT OR REPLACE INTO findings VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!f.ok()) return failed("findings");
    for (const auto* list : {&in.stragglers, &in.hangs, &in.cellOutliers}) {
      // Straggler and cell outlier episodes name a cell (max_score: a cell's factor).
      const bool straggler = list != &in.hangs;
      for (const DetectorEpisode& x : *list) {
        f.bind(1, std::string(list == &in.stragglers                               ? "straggler"
                              : list == &in.cellOutliers                           ? "cell_outlier"
                              : x.description.find("missing") != std::string::npos ? "missing"
                                                                                   : "hang"));
        f.bind(2, static_cast<int64_t>(x.rank));
        f.bind(3, static_cast<int64_t>(x.firstRound));
        f.bind(4, static_cast<int64_t>(x.lastRound));
        f.bind(5, x.maxScore);
        f.bind(6, x.layer);
        f.bind(7, std::string(straggler && !x.layer.empty() ? phaseName(x.phase) : ""));
        f.bind(8, std::string(straggler && !x.layer.empty() ? opKindName(x.kind) : ""));
        f.bind(9, x.share);
        f.bind(10, x.description);
        if (!f.run()) return failed("findings");
      }
    }
  }
  if (!exec("COMMIT", &what)) return failed("commit");
  layersWritten_ = std::max(layersWritten_, in.layerNames.size());
  if (in.haveWindow) ++nextRound_;
  return enforceCap(error);
}

bool TraceStore::enforceCap(std::string* error) {
  const int64_t pageSize = queryInt(db_, "PRAGMA page_size");
  const int64_t pages = queryInt(db_, "PRAGMA page_count");
  const int64_t freePages = queryInt(db_, "PRAGMA freelist_count");
  if (pageSize <= 0 || pages < 0 || freePages < 0) {
    *error = sqliteError(db_, path_ + ": reading the page counts");
    return false;
  }
  const int64_t used = (pages - freePages) * pageSize;
  if (used <= maxBytes_ * 9 / 10) return true;
  // Delete the oldest steps (and, on rank 0, the oldest per-round scores, which grow with the
  // world size) so that used pages fall to about 70% of the cap; freed pages are reused by later
  // commits, so the file stops growing. Metadata, windows and findings are kept.
  const int64_t steps = queryInt(db_, "SELECT count(*) FROM steps");
  const int64_t rounds = queryInt(db_, "SELECT count(DISTINCT round) FROM rounds");
  if (steps <= 0 && rounds <= 1) return true;  // only summaries left: they are kept
  const double fraction =
      static_cast<double>(used - maxBytes_ * 7 / 10) / static_cast<double>(used);
  const auto count = [&](int64_t n) {
    return std::min<int64_t>(n, std::max<int64_t>(1, std::llround(std::ceil(n * fraction))));
  };
  const auto remove = [&](const char* sql, int64_t n) {
    Statement del(db_, sql);
    if (!del.ok()) return false;
    del.bind(1, n);
    return del.run();
  };
  if (steps > 0 &&
      !remove("DELETE FROM steps WHERE step IN (SELECT step FROM steps ORDER BY step LIMIT ?)",
              count(steps))) {
    *error = sqliteError(db_, path_ + ": trimming steps");
    return false;
  }
  if (steps > 0) trimmed_ += static_cast<uint64_t>(count(steps));
  // The newest round always stays: it is the live picture.
  if (rounds > 1 && !remove("DELETE FROM rounds WHERE round IN (SELECT DISTINCT round FROM rounds "
                            "ORDER BY round LIMIT ?)",
                            std::min(count(rounds), rounds - 1))) {
    *error = sqliteError(db_, path_ + ": trimming rounds");
    return false;
  }
  return true;
}

}  // namespace attnscope
