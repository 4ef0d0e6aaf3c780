// Unit tests of attnscope::StatsTable: layer registration and its cap, filling cells from
// CallRecords, merging by layer name, deep copies and bounded memory.

#include "attnscope/core/StatsTable.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnscope {
namespace {

struct KindSpec {
  OpKind kind;
  int64_t ns;
  uint32_t ops;
  int64_t bytes;
  int64_t peak;
};

CallRecord makeRecord(int32_t layer, Phase phase, int64_t ns, int64_t bytes, int64_t peak,
                      const std::vector<KindSpec>& kinds) {
  CallRecord r;
  r.layer = layer;
  r.phase = phase;
  r.ns = ns;
  r.bytes = bytes;
  r.peak = peak;
  for (const KindSpec& k : kinds) {
    CallRecord::Kind& cell = r.kinds[static_cast<int>(k.kind)];
    cell.ns = k.ns;
    cell.ops = k.ops;
    cell.bytes = k.bytes;
    cell.peak = k.peak;
  }
  return r;
}

const LayerStats* findLayer(const StatsTable& table, const std::string& name) {
  for (const LayerStats& layer : table.layers()) {
    if (layer.name == name) return &layer;
  }
  return nullptr;
}

const PhaseStats* phaseOf(const LayerStats& layer, Phase phase) {
  return layer.phases[static_cast<int>(phase)].get();
}

const CellStats* kindOf(const PhaseStats& phase, OpKind kind) {
  return phase.kinds[static_cast<int>(kind)].get();
}

void expectSameCell(const CellStats& a, const CellStats& b, const std::string& where) {
  EXPECT_EQ(a.seconds.buckets(), b.seconds.buckets()) << where;
  EXPECT_EQ(a.seconds.count(), b.seconds.count()) << where;
  EXPECT_NEAR(a.seconds.sum(), b.seconds.sum(), 1e-12 * std::abs(b.seconds.sum())) << where;
  EXPECT_EQ(a.seconds.min(), b.seconds.min()) << where;
  EXPECT_EQ(a.seconds.max(), b.seconds.max()) << where;
  EXPECT_EQ(a.ops, b.ops) << where;
  EXPECT_EQ(a.bytes, b.bytes) << where;
  EXPECT_EQ(a.peak, b.peak) << where;
}

// Same layer names (in any order) with the same statistics in every phase and kind.
void expectSameTables(const StatsTable& a, const StatsTable& b) {
  ASSERT_EQ(a.layers().size(), b.layers().size());
  for (const LayerStats& la : a.layers()) {
    const LayerStats* lb = findLayer(b, la.name);
    ASSERT_NE(lb, nullptr) << la.name;
    for (int p = 0; p < kNumPhases; ++p) {
      const std::string where = la.name + "/" + phaseName(static_cast<Phase>(p));
      ASSERT_EQ(la.phases[p] == nullptr, lb->phases[p] == nullptr) << where;
      if (!la.phases[p]) continue;
      expectSameCell(la.phases[p]->call, lb->phases[p]->call, where + "/call");
      for (int k = 0; k < kNumOpKinds; ++k) {
        const std::string kw = where + "/" + opKindName(static_cast<OpKind>(k));
        ASSERT_EQ(la.phases[p]->kinds[k] == nullptr, lb->phases[p]->kinds[k] == nullptr) << kw;
        if (la.phases[p]->kinds[k]) {
          expectSameCell(*la.phases[p]->kinds[k], *lb->phases[p]->kinds[k], kw);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Layer registration

TEST(StatsTableLayerTest, LayerIdRegistersNamesInOrder) {
  StatsTable table;
  EXPECT_EQ(table.layerId("encoder.0.attn"), 0);
  EXPECT_EQ(table.layerId("encoder.1.attn"), 1);
  EXPECT_EQ(table.layerId("encoder.0.attn"), 0);  // known name: same id, nothing new
  ASSERT_EQ(table.layers().size(), 2u);
  EXPECT_EQ(table.layers()[0].name, "encoder.0.attn");
  EXPECT_EQ(table.layers()[1].name, "encoder.1.attn");
  for (const LayerStats& layer : table.layers()) {
    for (const auto& phase : layer.phases) EXPECT_EQ(phase, nullptr);  // no call yet
  }
  EXPECT_EQ(table.droppedCalls(), 0u);
}

TEST(StatsTableLayerTest, MaxLayersCapReturnsMinusOne) {
  StatsTable table(2);
  EXPECT_EQ(table.layerId("a"), 0);
  EXPECT_EQ(table.layerId("b"), 1);
  EXPECT_EQ(table.layerId("c"), -1);
  EXPECT_EQ(table.layerId("c"), -1);  // still unknown, never registered
  EXPECT_EQ(table.layerId("b"), 1);   // known names keep working at the cap
  EXPECT_EQ(table.layers().size(), 2u);
  EXPECT_EQ(table.droppedCalls(), 0u);  // looking up an id is not a call
}

TEST(StatsTableLayerTest, AddOfInvalidLayerIsCountedAsDropped) {
  StatsTable table(1);
  const int32_t a = table.layerId("a");
  const int32_t b = table.layerId("b");
  ASSERT_EQ(a, 0);
  ASSERT_EQ(b, -1);
  table.add(makeRecord(b, Phase::kForward, 1000, 1, 1, {{OpKind::kSoftmax, 10, 1, 1, 1}}));
  EXPECT_EQ(table.droppedCalls(), 1u);
  table.add(makeRecord(5, Phase::kForward, 1000, 1, 1, {}));  // beyond the registered layers
  EXPECT_EQ(table.droppedCalls(), 2u);
  table.add(makeRecord(-7, Phase::kBackward, 1000, 1, 1, {}));
  EXPECT_EQ(table.droppedCalls(), 3u);
  // Nothing was recorded anywhere.
  ASSERT_EQ(table.layers().size(), 1u);
  for (const auto& phase : table.layers()[0].phases) EXPECT_EQ(phase, nullptr);
  // A valid add is recorded and does not count as dropped.
  table.add(makeRecord(a, Phase::kForward, 1000, 1, 1, {}));
  EXPECT_EQ(table.droppedCalls(), 3u);
  ASSERT_NE(phaseOf(table.layers()[0], Phase::kForward), nullptr);
}

// ---------------------------------------------------------------------------------------------
// add()

TEST(StatsTableAddTest, FillsCallAndKindCells) {
  StatsTable table;
  const int32_t id = table.layerId("attn");
  table.add(makeRecord(
      id, Phase::kForward, 1'000'000, 100, 50,
      {{OpKind::kQkvProjection, 200'000, 3, 60, 40}, {OpKind::kSoftmax, 100'000, 1, 40, 30}}));
  table.add(makeRecord(
      id, Phase::kForward, 3'000'000, 10, 80,
      {{OpKind::kQkvProjection, 400'000, 3, 5, 20}, {OpKind::kDropout, 50'000, 2, 5, 90}}));

  const LayerStats& layer = table.layers()[0];
  const PhaseStats* fwd = phaseOf(layer, Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(phaseOf(layer, Phase::kBackward), nullptr);
  EXPECT_EQ(phaseOf(layer, Phase::kRecompute), nullptr);

  // The whole call: one sample per record, ops summed over kinds, bytes summed, peak max.
  EXPECT_EQ(fwd->call.seconds.count(), 2u);
  EXPECT_DOUBLE_EQ(fwd->call.seconds.sum(), 4e-3);
  EXPECT_DOUBLE_EQ(fwd->call.seconds.min(), 1e-3);
  EXPECT_DOUBLE_EQ(fwd->call.seconds.max(), 3e-3);
  EXPECT_EQ(fwd->call.ops, 3u + 1u + 3u + 2u);
  EXPECT_EQ(fwd->call.bytes, 110);
  EXPECT_EQ(fwd->call.peak, 80);

  const CellStats* qkv = kindOf(*fwd, OpKind::kQkvProjection);
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->seconds.count(), 2u);
  EXPECT_DOUBLE_EQ(qkv->seconds.sum(), 6e-4);
  EXPECT_EQ(qkv->ops, 6u);
  EXPECT_EQ(qkv->bytes, 65);
  EXPECT_EQ(qkv->peak, 40);

  const CellStats* softmax = kindOf(*fwd, OpKind::kSoftmax);
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(softmax->seconds.count(), 1u);
  EXPECT_DOUBLE_EQ(softmax->seconds.sum(), 1e-4);
  EXPECT_EQ(softmax->ops, 1u);
  EXPECT_EQ(softmax->bytes, 40);
  EXPECT_EQ(softmax->peak, 30);

  const CellStats* dropout = kindOf(*fwd, OpKind::kDropout);
  ASSERT_NE(dropout, nullptr);
  EXPECT_EQ(dropout->seconds.count(), 1u);
  EXPECT_EQ(dropout->ops, 2u);
  EXPECT_EQ(dropout->bytes, 5);
  EXPECT_EQ(dropout->peak, 90);

  for (OpKind kind : {OpKind::kScoreMatmul, OpKind::kContextMatmul, OpKind::kOutputProjection,
                      OpKind::kLayoutCopy, OpKind::kFusedAttention, OpKind::kOther}) {
    EXPECT_EQ(kindOf(*fwd, kind), nullptr) << opKindName(kind);
  }
}

TEST(StatsTableAddTest, KindsWithZeroOpsLeaveNoCell) {
  StatsTable table;
  const int32_t id = table.layerId("attn");
  // Time and bytes without ops are not a kind that ran.
  table.add(makeRecord(
      id, Phase::kForward, 1'000'000, 0, 0,
      {{OpKind::kSoftmax, 500'000, 0, 1024, 1024}, {OpKind::kScoreMatmul, 100'000, 1, 8, 8}}));
  const PhaseStats* fwd = phaseOf(table.layers()[0], Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(kindOf(*fwd, OpKind::kSoftmax), nullptr);
  ASSERT_NE(kindOf(*fwd, OpKind::kScoreMatmul), nullptr);
  EXPECT_EQ(fwd->call.ops, 1u);
  int cells = 0;
  for (const auto& cell : fwd->kinds) cells += cell != nullptr;
  EXPECT_EQ(cells, 1);
}

TEST(StatsTableAddTest, RecordWithoutOpsStillCountsTheCall) {
  StatsTable table;
  const int32_t id = table.layerId("attn");
  table.add(makeRecord(id, Phase::kBackward, 2'000'000, 64, 32, {}));
  const PhaseStats* bwd = phaseOf(table.layers()[0], Phase::kBackward);
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(bwd->call.seconds.count(), 1u);
  EXPECT_EQ(bwd->call.ops, 0u);
  EXPECT_EQ(bwd->call.bytes, 64);
  EXPECT_EQ(bwd->call.peak, 32);
  for (const auto& cell : bwd->kinds) EXPECT_EQ(cell, nullptr);
  EXPECT_EQ(phaseOf(table.layers()[0], Phase::kForward), nullptr);
}

TEST(StatsTableAddTest, PhasesAndLayersAreSeparate) {
  StatsTable table;
  const int32_t a = table.layerId("a");
  const int32_t b = table.layerId("b");
  table.add(makeRecord(a, Phase::kForward, 1000, 1, 1, {{OpKind::kSoftmax, 10, 1, 0, 0}}));
  table.add(makeRecord(a, Phase::kBackward, 2000, 2, 2, {{OpKind::kSoftmax, 20, 2, 0, 0}}));
  table.add(makeRecord(b, Phase::kRecompute, 3000, 3, 3, {{OpKind::kSoftmax, 30, 3, 0, 0}}));
  const LayerStats& la = table.layers()[a];
  const LayerStats& lb = table.layers()[b];
  EXPECT_EQ(kindOf(*phaseOf(la, Phase::kForward), OpKind::kSoftmax)->ops, 1u);
  EXPECT_EQ(kindOf(*phaseOf(la, Phase::kBackward), OpKind::kSoftmax)->ops, 2u);
  EXPECT_EQ(phaseOf(la, Phase::kRecompute), nullptr);
  EXPECT_EQ(phaseOf(lb, Phase::kForward), nullptr);
  EXPECT_EQ(phaseOf(lb, Phase::kBackward), nullptr);
  EXPECT_EQ(kindOf(*phaseOf(lb, Phase::kRecompute), OpKind::kSoftmax)->ops, 3u);
}

TEST(StatsTableAddTest, ClearForgetsEverything) {
  StatsTable table(1);
  table.add(makeRecord(table.layerId("a"), Phase::kForward, 1000, 1, 1, {}));
  table.add(makeRecord(table.layerId("b"), Phase::kForward, 1000, 1, 1, {}));  // dropped
  ASSERT_EQ(table.droppedCalls(), 1u);
  table.clear();
  EXPECT_TRUE(table.layers().empty());
  EXPECT_EQ(table.droppedCalls(), 0u);
  EXPECT_EQ(table.layerId("b"), 0);  // the cap applies afresh
}

// ---------------------------------------------------------------------------------------------
// merge()

struct NamedRecord {
  std::string layer;
  CallRecord record;  // record.layer is filled per table
};

std::vector<NamedRecord> sampleRecords(const std::vector<std::string>& names, int perName,
                                       int seed) {
  std::vector<NamedRecord> out;
  for (int i = 0; i < perName; ++i) {
    for (size_t n = 0; n < names.size(); ++n) {
      const int64_t s = seed * 1000 + i * 37 + static_cast<int64_t>(n) * 101;
      const Phase phase = static_cast<Phase>((i + n) % kNumPhases);
      std::vector<KindSpec> kinds = {{OpKind::kQkvProjection, 1000 + s, 3, s, s % 97}};
      if (i % 2 == 0) kinds.push_back({OpKind::kSoftmax, 500 + s, 1, 2 * s, s % 89});
      if (i % 3 == 0) kinds.push_back({OpKind::kFusedAttention, 7000 + s, 1, 3 * s, s % 83});
      out.push_back({names[n], makeRecord(-1, phase, 20'000 + 13 * s, 5 * s, s % 101, kinds)});
    }
  }
  return out;
}

void addAll(StatsTable& table, const std::vector<NamedRecord>& records) {
  for (const NamedRecord& r : records) {
    CallRecord record = r.record;
    record.layer = table.layerId(r.layer);
    table.add(record);
  }
}

TEST(StatsTableMergeTest, MergeByNameEqualsAddingAllRecordsToOneTable) {
  const std::vector<NamedRecord> first = sampleRecords({"x", "y"}, 20, 1);
  const std::vector<NamedRecord> second = sampleRecords({"z", "y", "x"}, 30, 2);

  StatsTable a;
  addAll(a, first);
  StatsTable b;
  addAll(b, second);  // registers z, y, x: ids differ from a's
  ASSERT_NE(a.layers()[0].name, b.layers()[0].name);

  StatsTable all;
  addAll(all, first);
  addAll(all, second);

  a.merge(b);
  expectSameTables(a, all);
  // a's layers keep their ids; new names are appended.
  ASSERT_EQ(a.layers().size(), 3u);
  EXPECT_EQ(a.layers()[0].name, "x");
  EXPECT_EQ(a.layers()[1].name, "y");
  EXPECT_EQ(a.layers()[2].name, "z");
  EXPECT_EQ(a.layerId("z"), 2);
}

TEST(StatsTableMergeTest, MergeIntoEmptyTableEqualsSource) {
  StatsTable source;
  addAll(source, sampleRecords({"p", "q", "r"}, 10, 3));
  StatsTable target;
  target.merge(source);
  expectSameTables(target, source);
}

TEST(StatsTableMergeTest, MergeAddsDroppedCalls) {
  StatsTable a(1);
  a.add(makeRecord(a.layerId("x"), Phase::kForward, 1, 0, 0, {}));
  a.add(makeRecord(a.layerId("dropped"), Phase::kForward, 1, 0, 0, {}));
  StatsTable b(1);
  b.add(makeRecord(b.layerId("x"), Phase::kForward, 1, 0, 0, {}));
  b.add(makeRecord(b.layerId("dropped"), Phase::kForward, 1, 0, 0, {}));
  b.add(makeRecord(b.layerId("dropped"), Phase::kForward, 1, 0, 0, {}));
  a.merge(b);
  EXPECT_EQ(a.droppedCalls(), 3u);
  EXPECT_EQ(phaseOf(a.layers()[0], Phase::kForward)->call.seconds.count(), 2u);
}

TEST(StatsTableMergeTest, LayersBeyondTheCapAreCountedAsDropped) {
  StatsTable a(2);
  addAll(a, sampleRecords({"x", "y"}, 4, 1));
  StatsTable b;
  addAll(b, sampleRecords({"z", "x"}, 5, 2));  // 5 calls of z, 5 of x
  a.merge(b);
  ASSERT_EQ(a.layers().size(), 2u);  // z does not fit
  EXPECT_EQ(findLayer(a, "z"), nullptr);
  // Every call of z is accounted for: counted as dropped, not silently lost.
  EXPECT_EQ(a.droppedCalls(), 5u);
  uint64_t xCalls = 0;
  for (const auto& phase : findLayer(a, "x")->phases) {
    if (phase) xCalls += phase->call.seconds.count();
  }
  EXPECT_EQ(xCalls, 4u + 5u);
}

// ---------------------------------------------------------------------------------------------
// Copies

TEST(StatsTableCopyTest, CopyIsDeep) {
  StatsTable original;
  addAll(original, sampleRecords({"x", "y"}, 10, 4));
  StatsTable reference;  // what the original holds, built independently
  addAll(reference, sampleRecords({"x", "y"}, 10, 4));

  StatsTable copy = original;
  expectSameTables(copy, original);
  // The copy owns its cells.
  EXPECT_NE(copy.layers()[0].phases[0].get(), original.layers()[0].phases[0].get());

  addAll(copy, sampleRecords({"x", "y", "new"}, 10, 5));
  EXPECT_EQ(copy.layers().size(), 3u);
  expectSameTables(original, reference);
  EXPECT_EQ(original.layers().size(), 2u);
  EXPECT_EQ(original.layerId("x"), 0);
}

TEST(StatsTableCopyTest, CopyAssignmentIsDeep) {
  StatsTable original;
  addAll(original, sampleRecords({"x"}, 6, 6));
  StatsTable reference;
  addAll(reference, sampleRecords({"x"}, 6, 6));
  StatsTable copy;
  addAll(copy, sampleRecords({"other"}, 3, 7));
  copy = original;
  expectSameTables(copy, original);
  addAll(copy, sampleRecords({"x"}, 6, 8));
  expectSameTables(original, reference);
}

TEST(StatsTableCopyTest, LayerStatsCopyIsDeep) {
  StatsTable table;
  addAll(table, sampleRecords({"x"}, 6, 9));
  const LayerStats& original = table.layers()[0];
  const PhaseStats* fwd = phaseOf(original, Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(kindOf(*fwd, OpKind::kQkvProjection), nullptr);
  const uint64_t ops = fwd->call.ops;
  const uint64_t qkvOps = kindOf(*fwd, OpKind::kQkvProjection)->ops;

  LayerStats copy = original;
  PhaseStats& copyFwd = *copy.phases[static_cast<int>(Phase::kForward)];
  copyFwd.call.ops += 1000;
  copyFwd.kinds[static_cast<int>(OpKind::kQkvProjection)]->ops += 1000;
  copyFwd.kinds[static_cast<int>(OpKind::kOther)] = std::make_unique<CellStats>();
  copy.name = "renamed";

  EXPECT_EQ(original.name, "x");
  EXPECT_EQ(fwd->call.ops, ops);
  EXPECT_EQ(kindOf(*fwd, OpKind::kQkvProjection)->ops, qkvOps);
  EXPECT_EQ(kindOf(*fwd, OpKind::kOther), nullptr);

  LayerStats assigned;
  assigned = original;
  assigned.phases[static_cast<int>(Phase::kForward)]->call.ops = 0;
  EXPECT_EQ(fwd->call.ops, ops);
}

TEST(StatsTableCopyTest, PhaseStatsSelfAssignmentKeepsCells) {
  PhaseStats phase;
  phase.kinds[0] = std::make_unique<CellStats>();
  phase.kinds[0]->ops = 7;
  PhaseStats& alias = phase;
  phase = alias;
  ASSERT_NE(phase.kinds[0], nullptr);
  EXPECT_EQ(phase.kinds[0]->ops, 7u);
}

// ---------------------------------------------------------------------------------------------
// Bounded memory

TEST(StatsTableMemoryTest, ManyAddsKeepTheLayerCountConstant) {
  StatsTable table;
  const std::vector<std::string> names = {"l0", "l1", "l2", "l3"};
  for (const std::string& n : names) table.layerId(n);
  for (int i = 0; i < 100000; ++i) {
    const int32_t id = table.layerId(names[i % names.size()]);
    table.add(makeRecord(id, static_cast<Phase>(i % kNumPhases), 1000 + i, 1, 1,
                         {{static_cast<OpKind>(i % kNumOpKinds), 100, 1, 1, 1}}));
    ASSERT_EQ(table.layers().size(), names.size()) << i;
  }
  uint64_t calls = 0;
  for (const LayerStats& layer : table.layers()) {
    for (const auto& phase : layer.phases) {
      if (phase) calls += phase->call.seconds.count();
    }
  }
  EXPECT_EQ(calls, 100000u);
  EXPECT_EQ(table.droppedCalls(), 0u);
}

TEST(StatsTableMemoryTest, ManyDistinctNamesStopAtTheCap) {
  StatsTable table(16);
  for (int i = 0; i < 100000; ++i) {
    table.add(
        makeRecord(table.layerId("layer" + std::to_string(i)), Phase::kForward, 1000, 0, 0, {}));
  }
  EXPECT_EQ(table.layers().size(), 16u);
  EXPECT_EQ(table.droppedCalls(), 100000u - 16u);
}

}  // namespace
}  // namespace attnscope
