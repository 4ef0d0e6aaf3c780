#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnscope/core/RankWindow.h"
#include "attnscope/trace/TraceFormat.h"
#include "attnscope/trace/TraceStore.h"

namespace attnscope {
namespace analysis {

// One reporting interval of a rank (its "windows" row).
struct TraceWindowRow {
  uint64_t interval = 0;
  double startUnix = 0;
  double endUnix = 0;
  RankWindow window;
};

// Rank 0's live detector, one row per rank per round.
struct TraceRoundRow {
  uint64_t round = 0;
  int32_t rank = -1;
  double unix = 0;
  bool present = false;
  double score = 0;
  double attentionSeconds = 0;
  bool straggler = false;
  bool hung = false;
  bool missing = false;
  uint64_t lastStep = 0;
};

// An episode rank 0's live detector recorded (straggler, hang or missing).
struct TraceFindingRow {
  std::string kind;
  int32_t rank = -1;
  uint64_t firstRound = 0;
  uint64_t lastRound = 0;
  double maxScore = 0;
  std::string layer;
  std::string phase;
  std::string opKind;
  double share = 0;
  std::string description;
};

// Everything one rank's trace file holds, decoded.
struct RankTrace {
  std::string path;
  std::map<std::string, std::string> meta;
  int rank = -1;
  int worldSize = 0;
  std::string node;
  double intervalSeconds = 0;
  double startUnix = 0;
  double stopUnix = 0;  // 0: the rank never stopped cleanly (killed, or still running)
  double lastCommitUnix = 0;
  std::vector<std::string> layers;  // by layer id
  std::vector<TraceStep> steps;     // ordered by step
  std::vector<TraceWindowRow> windows;
  std::vector<TraceRoundRow> rounds;
  std::vector<TraceFindingRow> findings;
  // The roofline cells of every interval ("roofline" table; none in files written before it, or
  // with the roofline off). rooflineIntervals[i] is the interval roofline[i] belongs to.
  std::vector<TraceRooflineRow> roofline;
  std::vector<uint64_t> rooflineIntervals;
  uint64_t badRooflineRows = 0;  // rows with a key or value out of range (left out)
  uint64_t badSteps = 0;         // step records that did not decode (left out)
  std::string firstBadStep;      // why the first of them did not

  // The layer's name, or "layer <id>" when the file does not name it.
  std::string layerName(int32_t id) const;
};

// Reads one rank's trace file (read-only; a file whose writer was killed is read up to its last
// commit). False with `error` saying what is wrong (not a SQLite file, corrupt, truncated, not an
// attnscope trace, a metadata value out of range) when nothing trustworthy can be read.
bool readRankTrace(const std::string& path, RankTrace* out, std::string* error);
// The same from a file image in memory (what the fuzz target feeds it); `name` goes into
// messages.
bool readRankTraceImage(const uint8_t* data, size_t size, const std::string& name, RankTrace* out,
                        std::string* error);

// A rank file that could not be used, by name, and why.
struct SkippedFile {
  std::string path;
  std::string reason;
};

// Every rank-<r>.sqlite under `dir`, read; files that fail go to `skipped`. False (and `error`)
// only when the directory itself cannot be read.
bool readTraceDirectory(const std::string& dir, std::vector<RankTrace>* traces,
                        std::vector<SkippedFile>* skipped, std::string* error);

}  // namespace analysis
}  // namespace attnscope
