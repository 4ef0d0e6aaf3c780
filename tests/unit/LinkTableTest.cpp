#include "attnscope/core/LinkTable.h"

#include <gtest/gtest.h>

#include <vector>

namespace attnscope {
namespace {

LinkTable::Entry entry(int64_t seq, uint64_t instance, OpKind kind) {
  return {seq, Link{instance, static_cast<int32_t>(instance), kind}};
}

TEST(LinkTableTest, FindsByThreadAndSequenceNumber) {
  LinkTable t;
  const std::vector<LinkTable::Entry> a = {entry(1, 1, OpKind::kQkvProjection),
                                           entry(2, 1, OpKind::kSoftmax)};
  const std::vector<LinkTable::Entry> b = {entry(1, 2, OpKind::kDropout)};
  t.append(7, a.data(), a.size());
  t.append(8, b.data(), b.size());
  Link out;
  ASSERT_TRUE(t.find(7, 2, &out));
  EXPECT_EQ(out.kind, OpKind::kSoftmax);
  ASSERT_TRUE(t.find(8, 1, &out));  // same number, other forward thread
  EXPECT_EQ(out.kind, OpKind::kDropout);
  EXPECT_FALSE(t.find(7, 3, &out));
  EXPECT_FALSE(t.find(9, 1, &out));
  EXPECT_EQ(t.size(), 3u);
}

TEST(LinkTableTest, TheLastRecordedOfEqualNumbersWins) {
  // aten::linear and the aten::t inside it peek the same number; t's node takes it.
  LinkTable t;
  const std::vector<LinkTable::Entry> v = {
      entry(5, 1, OpKind::kOther), entry(5, 1, OpKind::kLayoutCopy),
      entry(5, 1, OpKind::kQkvProjection), entry(6, 1, OpKind::kSoftmax)};
  t.append(1, v.data(), v.size());
  Link out;
  ASSERT_TRUE(t.find(1, 5, &out));
  EXPECT_EQ(out.kind, OpKind::kQkvProjection);
}

TEST(LinkTableTest, AnEnclosingCallEndingAfterANestedOneStaysSearchable) {
  LinkTable t;
  // The nested call (numbers 3..4) ends first, then the enclosing one (1..2 and 5..6).
  const std::vector<LinkTable::Entry> inner = {entry(3, 2, OpKind::kSoftmax),
                                               entry(4, 2, OpKind::kDropout)};
  const std::vector<LinkTable::Entry> outer = {
      entry(1, 1, OpKind::kQkvProjection), entry(2, 1, OpKind::kOther),
      entry(5, 1, OpKind::kOutputProjection), entry(6, 1, OpKind::kOther)};
  t.append(1, inner.data(), inner.size());
  t.append(1, outer.data(), outer.size());
  Link out;
  for (int64_t seq = 1; seq <= 6; ++seq) ASSERT_TRUE(t.find(1, seq, &out)) << seq;
  ASSERT_TRUE(t.find(1, 4, &out));
  EXPECT_EQ(out.instance, 2u);
  ASSERT_TRUE(t.find(1, 5, &out));
  EXPECT_EQ(out.kind, OpKind::kOutputProjection);
}

TEST(LinkTableTest, ClearEmptiesEveryThread) {
  LinkTable t;
  const std::vector<LinkTable::Entry> v = {entry(1, 1, OpKind::kSoftmax)};
  t.append(1, v.data(), v.size());
  t.append(2, v.data(), v.size());
  t.clear();
  Link out;
  EXPECT_FALSE(t.find(1, 1, &out));
  EXPECT_FALSE(t.find(2, 1, &out));
  EXPECT_EQ(t.size(), 0u);
}

}  // namespace
}  // namespace attnscope
