#include "attnscope/analysis/TraceReader.h"

#include <dirent.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace attnscope {
namespace analysis {
namespace {

constexpr int64_t kMaxLayerId = 1 << 20;
constexpr int64_t kMaxRank = 1 << 24;

class Db {
 public:
  ~Db() { sqlite3_close(db_); }
  sqlite3*& handle() { return db_; }
  sqlite3* get() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

class Query {
 public:
  Query(sqlite3* db, const char* sql) {
    ok_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) == SQLITE_OK;
  }
  ~Query() { sqlite3_finalize(s_); }
  bool ok() const { return ok_; }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int step() { return sqlite3_step(s_); }
  int64_t i(int c) const { return sqlite3_column_int64(s_, c); }
  double d(int c) const { return sqlite3_column_double(s_, c); }
  int type(int c) const { return sqlite3_column_type(s_, c); }
  std::string text(int c) const {
    const unsigned char* t = sqlite3_column_text(s_, c);
    return t == nullptr
               ? std::string()
               : std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s_, c));
  }
  const uint8_t* blob(int c, size_t* size) const {
    const void* p = sqlite3_column_blob(s_, c);
    *size = static_cast<size_t>(sqlite3_column_bytes(s_, c));
    return static_cast<const uint8_t*>(p);
  }

 private:
  sqlite3_stmt* s_ = nullptr;
  bool ok_ = false;
};

bool parseNumber(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parseInteger(const std::string& text, int64_t lo, int64_t hi, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || v < lo || v > hi) return false;
  *out = v;
  return true;
}

double finiteOr0(double v) { return std::isfinite(v) ? v : 0.0; }

bool readMeta(sqlite3* db, RankTrace* out, std::string* error) {
  Query q(db, "SELECT key, value FROM meta");
  if (!q.ok()) {
    *error = std::string("not an attnscope trace (") + sqlite3_errmsg(db) + ")";
    return false;
  }
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) out->meta[q.text(0)] = q.text(1);
  if (rc != SQLITE_DONE) {
    *error = std::string("metadata unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  if (out->meta.empty()) {
    *error = "no metadata: the rank stopped before its first commit";
    return false;
  }
  const auto value = [&](const char* key) {
    const auto it = out->meta.find(key);
    return it == out->meta.end() ? std::string() : it->second;
  };
  if (value("format") != "attnscope.trace/1") {
    *error = "format \"" + value("format") + "\" is not attnscope.trace/1";
    return false;
  }
  int64_t rank = 0, world = 0;
  if (!parseInteger(value("rank"), 0, kMaxRank - 1, &rank)) {
    *error = "metadata rank=\"" + value("rank") + "\" is not a rank (0 to 16777215)";
    return false;
  }
  if (!parseInteger(value("world_size"), 1, kMaxRank, &world) || rank >= world) {
    *error = "metadata world_size=\"" + value("world_size") + "\" is not above rank " +
             std::to_string(rank);
    return false;
  }
  out->rank = static_cast<int>(rank);
  out->worldSize = static_cast<int>(world);
  out->node = value("node");
  double interval = 0;
  if (!parseNumber(value("interval_s"), &interval) || interval <= 0) {
    *error = "metadata interval_s=\"" + value("interval_s") + "\" is not a positive number";
    return false;
  }
  out->intervalSeconds = interval;
  parseNumber(value("start_unix"), &out->startUnix);
  parseNumber(value("stop_unix"), &out->stopUnix);
  parseNumber(value("last_commit_unix"), &out->lastCommitUnix);
  return true;
}

bool readLayers(sqlite3* db, RankTrace* out, std::string* error) {
  Query q(db, "SELECT id, name FROM layers ORDER BY id");
  if (!q.ok()) {
    *error = std::string("layers unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    const int64_t id = q.i(0);
    if (id < 0 || id >= kMaxLayerId) {
      *error = "layer id " + std::to_string(id) + " out of range (0 to " +
               std::to_string(kMaxLayerId - 1) + ")";
      return false;
    }
    if (static_cast<size_t>(id) >= out->layers.size()) out->layers.resize(id + 1);
    out->layers[id] = q.text(1);
  }
  if (rc != SQLITE_DONE) {
    *error = std::string("layers unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  return true;
}

bool readSteps(sqlite3* db, RankTrace* out, std::string* error) {
  Query q(db, "SELECT step, end_unix, step_ns, data FROM steps ORDER BY step");
  if (!q.ok()) {
    *error = std::string("steps unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    TraceStep s;
    size_t size = 0;
    const uint8_t* data = q.blob(3, &size);
    std::string why;
    const double end = q.d(1);
    if (q.i(0) < 0 || q.i(2) < 0 || !std::isfinite(end)) {
      why = "step, time or duration out of range";
    } else if (q.type(3) != SQLITE_BLOB && size > 0) {
      why = "record is not a blob";
    } else if (!traceformat::decodeCalls(data, size, &s.calls, &why)) {
      // why filled
    }
    if (!why.empty()) {
      if (out->badSteps++ == 0) out->firstBadStep = "step " + std::to_string(q.i(0)) + ": " + why;
      continue;
    }
    s.step = static_cast<uint64_t>(q.i(0));
    s.endUnix = end;
    s.stepNs = q.i(2);
    out->steps.push_back(std::move(s));
  }
  if (rc != SQLITE_DONE) {
    *error = std::string("steps unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  return true;
}

bool readSummaries(sqlite3* db, RankTrace* out, std::string* error) {
  {
    Query q(db,
            "SELECT interval, start_unix, end_unix, last_step, steps, sampled_steps, forward_s, "
            "backward_s, step_s, peak_bytes, collective_wait_s, top_layer, top_phase, top_kind, "
            "top_share FROM windows ORDER BY interval");
    if (!q.ok()) {
      *error = std::string("windows unreadable: ") + sqlite3_errmsg(db);
      return false;
    }
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      TraceWindowRow w;
      w.interval = static_cast<uint64_t>(q.i(0));
      w.startUnix = finiteOr0(q.d(1));
      w.endUnix = finiteOr0(q.d(2));
      RankWindow& r = w.window;
      r.rank = out->rank;
      r.present = true;
      r.lastStep = static_cast<uint64_t>(std::max<int64_t>(0, q.i(3)));
      r.steps = static_cast<uint32_t>(std::clamp<int64_t>(q.i(4), 0, UINT32_MAX));
      r.sampledSteps = static_cast<uint32_t>(std::clamp<int64_t>(q.i(5), 0, UINT32_MAX));
      r.forwardSeconds = finiteOr0(q.d(6));
      r.backwardSeconds = finiteOr0(q.d(7));
      r.stepSeconds = finiteOr0(q.d(8));
      r.peakBytes = q.i(9);
      r.collectiveWaitSeconds = finiteOr0(q.d(10));
      r.topLayer = static_cast<int32_t>(std::clamp<int64_t>(q.i(11), -1, kMaxLayerId));
      r.topPhase = static_cast<Phase>(std::clamp<int64_t>(q.i(12), 0, kNumPhases - 1));
      r.topKind = static_cast<OpKind>(std::clamp<int64_t>(q.i(13), 0, kNumOpKinds - 1));
      r.topShare = finiteOr0(q.d(14));
      out->windows.push_back(w);
    }
    if (rc != SQLITE_DONE) {
      *error = std::string("windows unreadable: ") + sqlite3_errmsg(db);
      return false;
    }
  }
  {
    Query q(db,
            "SELECT round, rank, unix, present, score, attention_s, straggler, hung, missing, "
            "last_step FROM rounds ORDER BY round, rank");
    if (!q.ok()) {
      *error = std::string("rounds unreadable: ") + sqlite3_errmsg(db);
      return false;
    }
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      TraceRoundRow r;
      r.round = static_cast<uint64_t>(std::max<int64_t>(0, q.i(0)));
      r.rank = static_cast<int32_t>(std::clamp<int64_t>(q.i(1), -1, kMaxRank));
      r.unix = finiteOr0(q.d(2));
      r.present = q.i(3) != 0;
      r.score = finiteOr0(q.d(4));
      r.attentionSeconds = finiteOr0(q.d(5));
      r.straggler = q.i(6) != 0;
      r.hung = q.i(7) != 0;
      r.missing = q.i(8) != 0;
      r.lastStep = static_cast<uint64_t>(std::max<int64_t>(0, q.i(9)));
      out->rounds.push_back(r);
    }
    if (rc != SQLITE_DONE) {
      *error = std::string("rounds unreadable: ") + sqlite3_errmsg(db);
      return false;
    }
  }
  Query q(db,
          "SELECT kind, rank, first_round, last_round, max_score, layer, phase, op_kind, share, "
          "description FROM findings ORDER BY first_round, rank");
  if (!q.ok()) {
    *error = std::string("findings unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    TraceFindingRow f;
    f.kind = q.text(0);
    f.rank = static_cast<int32_t>(std::clamp<int64_t>(q.i(1), -1, kMaxRank));
    f.firstRound = static_cast<uint64_t>(std::max<int64_t>(0, q.i(2)));
    f.lastRound = static_cast<uint64_t>(std::max<int64_t>(0, q.i(3)));
    f.maxScore = finiteOr0(q.d(4));
    f.layer = q.text(5);
    f.phase = q.text(6);
    f.opKind = q.text(7);
    f.share = finiteOr0(q.d(8));
    f.description = q.text(9);
    out->findings.push_back(f);
  }
  if (rc != SQLITE_DONE) {
    *error = std::string("findings unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  return true;
}

// Whether the file has `table` (optional tables: files written before them have none).
bool hasTable(sqlite3* db, const char* table, bool* has, std::string* error) {
  Query exists(db, (std::string("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '") +
                    table + "'")
                       .c_str());
  const int rc = exists.ok() ? exists.step() : SQLITE_ERROR;
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    *error = std::string("schema unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  *has = rc == SQLITE_ROW;
  return true;
}

// The cell outlier each window reported, onto its window row. Rows for an interval without a
// window, or with a key out of range, are left out.
bool readWindowCells(sqlite3* db, RankTrace* out, std::string* error) {
  bool has = false;
  if (!hasTable(db, "window_cells", &has, error)) return false;
  if (!has) return true;
  Query q(db,
          "SELECT interval, layer, phase, kind, factor, share FROM window_cells ORDER BY interval");
  if (!q.ok()) {
    *error = std::string("window_cells unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  std::map<uint64_t, RankWindow*> byInterval;
  for (TraceWindowRow& w : out->windows) byInterval[w.interval] = &w.window;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    const int64_t interval = q.i(0), layer = q.i(1), phase = q.i(2), kind = q.i(3);
    const double factor = q.d(4), share = q.d(5);
    const auto it =
        interval >= 0 ? byInterval.find(static_cast<uint64_t>(interval)) : byInterval.end();
    if (it == byInterval.end() || layer < 0 || layer > kMaxLayerId || phase < 0 ||
        phase >= kNumPhases || kind < 0 || kind >= kNumOpKinds || !std::isfinite(factor) ||
        !(factor >= 0) || !std::isfinite(share)) {
      continue;
    }
    RankWindow& w = *it->second;
    w.cellLayer = static_cast<int32_t>(layer);
    w.cellPhase = static_cast<Phase>(phase);
    w.cellKind = static_cast<OpKind>(kind);
    w.cellFactor = factor;
    w.cellShare = share;
  }
  if (rc != SQLITE_DONE) {
    *error = std::string("window_cells unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  return true;
}

// The roofline table is optional: files written before it (or by a build without it) have none.
bool readRoofline(sqlite3* db, RankTrace* out, std::string* error) {
  bool has = false;
  if (!hasTable(db, "roofline", &has, error)) return false;
  if (!has) return true;
  Query q(db,
          "SELECT interval, layer, phase, kind, ops, seconds, modelled_seconds, flops, bytes, "
          "wide_flops "
          "FROM roofline ORDER BY interval, layer, phase, kind");
  if (!q.ok()) {
    *error = std::string("roofline unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    // Every value is checked: a key out of range, a negative or non-finite figure, or a row whose
    // modelled part exceeds the whole leaves the row out (counted).
    const int64_t interval = q.i(0), layer = q.i(1), phase = q.i(2), kind = q.i(3), ops = q.i(4);
    double v[5];
    bool ok = interval >= 0 && layer >= 0 && layer < kMaxLayerId && phase >= 0 &&
              phase < kNumPhases && kind >= 0 && kind < kNumOpKinds && ops >= 0;
    for (int c = 0; c < 5; ++c) {
      v[c] = q.d(5 + c);
      ok = ok && (q.type(5 + c) == SQLITE_FLOAT || q.type(5 + c) == SQLITE_INTEGER) &&
           std::isfinite(v[c]) && v[c] >= 0;
    }
    ok = ok && v[1] <= v[0] * (1 + 1e-9) && v[4] <= v[2] * (1 + 1e-9);
    if (!ok) {
      ++out->badRooflineRows;
      continue;
    }
    TraceRooflineRow r;
    r.layer = static_cast<int32_t>(layer);
    r.phase = static_cast<Phase>(phase);
    r.kind = static_cast<OpKind>(kind);
    r.ops = static_cast<uint64_t>(ops);
    r.seconds = v[0];
    r.modelledSeconds = std::min(v[1], v[0]);
    r.flops = v[2];
    r.bytes = v[3];
    r.wideFlops = std::min(v[4], v[2]);
    out->roofline.push_back(r);
    out->rooflineIntervals.push_back(static_cast<uint64_t>(interval));
  }
  if (rc != SQLITE_DONE) {
    *error = std::string("roofline unreadable: ") + sqlite3_errmsg(db);
    return false;
  }
  return true;
}

// Integrity first (a truncated or damaged file fails here), then every table.
bool readOpen(sqlite3* db, const std::string& name, RankTrace* out, std::string* error) {
  out->path = name;
  std::string why;
  {
    const auto unreadable = [&] {
      const int code = sqlite3_errcode(db);
      *error = std::string(code == SQLITE_CORRUPT ? "corrupt or truncated: "
                                                  : "not a readable SQLite database: ") +
               sqlite3_errmsg(db);
      return false;
    };
    Query check(db, "PRAGMA quick_check(1)");
    if (!check.ok()) return unreadable();
    const int rc = check.step();
    if (rc != SQLITE_ROW) return unreadable();
    const std::string result = check.text(0);
    if (result != "ok") {
      *error = "corrupt or truncated (integrity check: " + result + ")";
      return false;
    }
  }
  return readMeta(db, out, error) && readLayers(db, out, error) && readSteps(db, out, error) &&
         readSummaries(db, out, error) && readWindowCells(db, out, error) &&
         readRoofline(db, out, error);
}

}  // namespace

std::string RankTrace::layerName(int32_t id) const {
  if (id >= 0 && static_cast<size_t>(id) < layers.size() && !layers[id].empty()) return layers[id];
  return "layer " + std::to_string(id);
}

bool readRankTrace(const std::string& path, RankTrace* out, std::string* error) {
  *out = RankTrace();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *error = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = "not a regular file";
    return false;
  }
  if (st.st_size == 0) {
    *error = "empty file (0 bytes)";
    return false;
  }
  Db db;
  if (sqlite3_open_v2(path.c_str(), &db.handle(), SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    *error = std::string("cannot open: ") + (db.get() ? sqlite3_errmsg(db.get()) : "out of memory");
    return false;
  }
  sqlite3_busy_timeout(db.get(), 2000);
  return readOpen(db.get(), path, out, error);
}

bool readRankTraceImage(const uint8_t* data, size_t size, const std::string& name, RankTrace* out,
                        std::string* error) {
  *out = RankTrace();
  if (size == 0) {
    *error = "empty file (0 bytes)";
    return false;
  }
  Db db;
  if (sqlite3_open_v2(":memory:", &db.handle(), SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    *error = "cannot open an in-memory database";
    return false;
  }
  auto* copy = static_cast<unsigned char*>(sqlite3_malloc64(size));
  if (copy == nullptr) {
    *error = "out of memory";
    return false;
  }
  std::memcpy(copy, data, size);
  // A file written in WAL mode says so in its header (bytes 18 and 19 = 2); an in-memory image has
  // no log beside it, so it is read as a rollback-journal database (1).
  if (size >= 20 && copy[18] == 2 && copy[19] == 2) copy[18] = copy[19] = 1;
  if (sqlite3_deserialize(db.get(), "main", copy, static_cast<sqlite3_int64>(size),
                          static_cast<sqlite3_int64>(size),
                          SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) !=
      SQLITE_OK) {
    *error = std::string("not a readable SQLite database: ") + sqlite3_errmsg(db.get());
    return false;
  }
  return readOpen(db.get(), name, out, error);
}

bool readTraceDirectory(const std::string& dir, std::vector<RankTrace>* traces,
                        std::vector<SkippedFile>* skipped, std::string* error) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    *error = "cannot read directory " + dir + ": " + std::strerror(errno);
    return false;
  }
  std::vector<std::pair<int64_t, std::string>> files;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string prefix = "rank-", suffix = ".sqlite";
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    int64_t rank = 0;
    const std::string number =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    const std::string path = dir + (dir.back() == '/' ? "" : "/") + name;
    if (!parseInteger(number, 0, kMaxRank - 1, &rank)) {
      skipped->push_back({path, "file name does not carry a rank (expected rank-<r>.sqlite)"});
      continue;
    }
    files.emplace_back(rank, path);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  for (const auto& [rank, path] : files) {
    RankTrace t;
    std::string why;
    if (!readRankTrace(path, &t, &why)) {
      skipped->push_back({path, why});
    } else if (t.rank != rank) {
      skipped->push_back({path, "metadata says rank " + std::to_string(t.rank) +
                                    ", the file name rank " + std::to_string(rank)});
    } else {
      traces->push_back(std::move(t));
    }
  }
  return true;
}

}  // namespace analysis
}  // namespace attnscope
