// Correlation ids -> layer, phase and op kind; kernel names -> attention backend.
#include "attnscope/collectors/KernelAttributor.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace attnscope {
namespace {

using Kind = ActivityRecord::Kind;

ActivityRecord correlation(uint32_t correlationId, const DeviceKey& key) {
  return ActivityRecord{Kind::kExternalCorrelation,
                        correlationId,
                        KernelAttributor::packExternalId(key),
                        0,
                        0,
                        0,
                        nullptr};
}

ActivityRecord kernel(uint32_t correlationId, uint64_t start, uint64_t end,
                      const char* name = "ampere_sgemm_128x64_tn") {
  return ActivityRecord{Kind::kKernel, correlationId, 0, start, end, 0, name};
}

DeviceKey key(uint64_t instance, int32_t layer, Phase phase, OpKind kind) {
  DeviceKey k;
  k.instance = instance;
  k.layer = layer;
  k.phase = phase;
  k.kind = kind;
  return k;
}

// The API record of CUDA call `correlationId`, made on `thread`.
ActivityRecord api(uint32_t correlationId, bool launches = true, uint32_t thread = 1) {
  ActivityRecord r;
  r.kind = Kind::kApi;
  r.correlationId = correlationId;
  r.threadId = thread;
  r.launchesWork = launches;
  return r;
}

// A launch under `key`: external correlation and API record (as CUPTI writes them at API exit).
void launched(KernelAttributor& a, uint32_t correlationId, const DeviceKey& k,
              uint32_t thread = 1) {
  a.addRecord(correlation(correlationId, k));
  a.addRecord(api(correlationId, true, thread));
}

KernelAttributor::Options kernelsOnly() {
  KernelAttributor::Options o;
  o.kernels = true;
  return o;
}

TEST(KernelAttributorTest, ExternalIdRoundTripsEveryField) {
  const DeviceKey keys[] = {
      key(1, 0, Phase::kForward, OpKind::kQkvProjection),
      key(123456789, 65535, Phase::kBackward, OpKind::kOther),
      key((uint64_t{1} << 36) - 1, (1 << 20) - 1, Phase::kRecompute, OpKind::kFusedAttention)};
  for (const DeviceKey& k : keys) {
    const DeviceKey back = KernelAttributor::unpackExternalId(KernelAttributor::packExternalId(k));
    EXPECT_EQ(back.instance, k.instance);
    EXPECT_EQ(back.layer, k.layer);
    EXPECT_EQ(back.phase, k.phase);
    EXPECT_EQ(back.kind, k.kind);
  }
  EXPECT_NE(KernelAttributor::packExternalId(keys[0]), KernelAttributor::packExternalId(keys[1]));
}

TEST(KernelAttributorTest, KernelTimeGoesToTheLayerPhaseAndKindOfItsCorrelation) {
  KernelAttributor a(kernelsOnly());
  launched(a, 10, key(7, 2, Phase::kForward, OpKind::kScoreMatmul));
  launched(a, 11, key(7, 2, Phase::kForward, OpKind::kSoftmax));
  launched(a, 12, key(7, 2, Phase::kBackward, OpKind::kSoftmax));
  a.hostEnded(7, 2, Phase::kForward);
  a.hostEnded(7, 2, Phase::kBackward);
  a.addRecord(kernel(10, 1000, 1600));
  a.addRecord(kernel(11, 1600, 1700));
  a.addRecord(kernel(11, 1700, 1750));  // one launch, two records (a graph, a split kernel)
  a.addRecord(kernel(12, 5000, 5900));
  a.addRecord(api(13, false));  // the thread went on
  std::vector<CallRecord> calls = a.endRound(false);
  ASSERT_EQ(calls.size(), 2u);
  std::sort(calls.begin(), calls.end(),
            [](const CallRecord& x, const CallRecord& y) { return x.phase < y.phase; });
  const CallRecord& fwd = calls[0];
  EXPECT_EQ(fwd.layer, 2);
  EXPECT_EQ(fwd.phase, Phase::kForward);
  EXPECT_EQ(fwd.kinds[static_cast<int>(OpKind::kScoreMatmul)].ns, 600);
  EXPECT_EQ(fwd.kinds[static_cast<int>(OpKind::kScoreMatmul)].ops, 1u);
  EXPECT_EQ(fwd.kinds[static_cast<int>(OpKind::kSoftmax)].ns, 150);
  EXPECT_EQ(fwd.kinds[static_cast<int>(OpKind::kSoftmax)].ops, 2u);
  EXPECT_EQ(fwd.ns, 750);  // no event span: the summed device time
  const CallRecord& bwd = calls[1];
  EXPECT_EQ(bwd.phase, Phase::kBackward);
  EXPECT_EQ(bwd.kinds[static_cast<int>(OpKind::kSoftmax)].ns, 900);
  EXPECT_EQ(a.counters().attributed, 4u);
  EXPECT_EQ(a.counters().unattributed, 0u);
}

TEST(KernelAttributorTest, ACallWaitsForEveryLaunchItsApiRecordsAnnounce) {
  KernelAttributor a(kernelsOnly());
  const DeviceKey k = key(3, 1, Phase::kForward, OpKind::kContextMatmul);
  launched(a, 40, k);
  launched(a, 41, k);
  a.addRecord(api(42, false));  // later calls of the thread are in: nothing more of the call
  a.hostEnded(3, 1, Phase::kForward);
  a.addRecord(kernel(40, 0, 300));
  for (int round = 0; round < 100; ++round) {
    EXPECT_TRUE(a.endRound(false).empty()) << "launch 41 has not run yet, round " << round;
  }
  a.addRecord(kernel(41, 300, 400));  // the device got there, a hundred rounds later
  const std::vector<CallRecord> calls = a.endRound(false);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kinds[static_cast<int>(OpKind::kContextMatmul)].ns, 400);
  EXPECT_EQ(a.counters().late, 0u);
}

TEST(KernelAttributorTest, ACallIsNotSealedUntilALaterApiRecordOfItsThreadCame) {
  KernelAttributor a(kernelsOnly());
  const DeviceKey k = key(3, 1, Phase::kForward, OpKind::kQkvProjection);
  launched(a, 40, k);
  a.addRecord(kernel(40, 0, 300));
  a.addRecord(api(41, false, /*thread=*/2));  // another thread's progress says nothing
  a.hostEnded(3, 1, Phase::kForward);
  EXPECT_TRUE(a.endRound(false).empty()) << "the rest of the call may be in a later buffer";
  launched(a, 42, k);  // it was
  a.addRecord(kernel(42, 300, 350));
  a.addRecord(api(43, false));
  const std::vector<CallRecord> calls = a.endRound(false);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].ns, 350);
}

TEST(KernelAttributorTest, KernelArrivingBeforeItsCorrelationRecordIsMatchedWhenItComes) {
  KernelAttributor a(kernelsOnly());
  a.addRecord(kernel(40, 0, 300));  // its buffer came back first
  for (int round = 0; round < 10; ++round) EXPECT_TRUE(a.endRound(false).empty());
  launched(a, 40, key(3, 1, Phase::kForward, OpKind::kContextMatmul));
  a.addRecord(api(41, false));
  a.hostEnded(3, 1, Phase::kForward);
  const std::vector<CallRecord> calls = a.endRound(false);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].layer, 1);
  EXPECT_EQ(calls[0].kinds[static_cast<int>(OpKind::kContextMatmul)].ns, 300);
  EXPECT_EQ(a.counters().unattributed, 0u);
}

TEST(KernelAttributorTest, WorkLaunchedOutsideAttentionIsCountedOutside) {
  KernelAttributor a(kernelsOnly());
  a.addRecord(api(50));  // launched outside any attention call: no external id
  a.addRecord(api(51));
  a.addRecord(kernel(50, 0, 100));
  a.endRound(false);
  ActivityRecord copy;
  copy.kind = Kind::kMemcpy;
  copy.correlationId = 51;
  copy.startNs = 100;
  copy.endNs = 200;
  a.addRecord(copy);  // a later buffer
  a.endRound(false);
  EXPECT_EQ(a.counters().outside, 2u);
  EXPECT_EQ(a.counters().unattributed, 0u);
  EXPECT_EQ(a.counters().attributed, 0u);
}

TEST(KernelAttributorTest, RecordsWaitingForTheirCorrelationAreBounded) {
  KernelAttributor::Options o = kernelsOnly();
  o.maxPending = 3;
  KernelAttributor a(o);
  for (uint32_t c = 0; c < 5; ++c) a.addRecord(kernel(c, 0, 1));
  EXPECT_EQ(a.counters().unattributed, 2u);  // the ones beyond the bound, at once
  a.endRound(true);
  EXPECT_EQ(a.counters().unattributed, 5u);  // their correlation never came
}

TEST(KernelAttributorTest, RecordsOfAFoldedCallAreCountedLateNotSampledTwice) {
  KernelAttributor a(kernelsOnly());
  launched(a, 60, key(9, 0, Phase::kForward, OpKind::kSoftmax));
  a.addRecord(kernel(60, 0, 100));
  a.addRecord(api(61, false));
  a.hostEnded(9, 0, Phase::kForward);
  ASSERT_EQ(a.endRound(false).size(), 1u);
  a.addRecord(kernel(60, 100, 200));  // a straggling record of the same launch
  EXPECT_TRUE(a.endRound(false).empty());
  EXPECT_EQ(a.counters().late, 1u);
}

TEST(KernelAttributorTest, ACallWhoseRecordsNeverComeIsGivenUpOnceLaterCallsFolded) {
  KernelAttributor::Options o = kernelsOnly();
  o.giveUpAfter = 4;
  KernelAttributor a(o);
  launched(a, 1, key(1, 0, Phase::kForward, OpKind::kSoftmax));
  a.hostEnded(1, 0, Phase::kForward);  // its kernel record was dropped by CUPTI
  uint32_t id = 2;
  size_t folded = 0;
  for (uint64_t call = 2; call < 10; ++call) {
    launched(a, id, key(call, 0, Phase::kForward, OpKind::kSoftmax));
    a.addRecord(kernel(id, id * 10, id * 10 + 5));
    a.hostEnded(call, 0, Phase::kForward);
    a.addRecord(api(++id + 1000, false));
    ++id;
    folded += a.endRound(false).size();
  }
  EXPECT_EQ(a.counters().callsGivenUp, 1u);
  EXPECT_EQ(folded, 8u) << "the given-up call folds too, with what it had (nothing: dropped)";
}

TEST(KernelAttributorTest, SpanSetsTheCallTimeAndKernelsTheKinds) {
  KernelAttributor::Options o = kernelsOnly();
  o.spans = true;
  KernelAttributor a(o);
  launched(a, 70, key(4, 1, Phase::kForward, OpKind::kQkvProjection));
  a.addRecord(kernel(70, 0, 400));
  a.addRecord(api(71, false));
  a.hostEnded(4, 1, Phase::kForward);
  EXPECT_TRUE(a.endRound(false).empty()) << "waits for the event span";
  a.addSpan(4, 1, Phase::kForward, 450);
  const std::vector<CallRecord> calls = a.endRound(false);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].ns, 450);
  EXPECT_EQ(calls[0].kinds[static_cast<int>(OpKind::kQkvProjection)].ns, 400);
}

TEST(KernelAttributorTest, WithSpansASideStreamsKernelsAreLeftOutLikeTheSpanLeavesThemOut) {
  for (const bool spans : {false, true}) {
    KernelAttributor::Options o = kernelsOnly();
    o.spans = spans;
    KernelAttributor a(o);
    const DeviceKey k = key(4, 1, Phase::kForward, OpKind::kScoreMatmul);
    launched(a, 70, k);
    launched(a, 71, k);
    ActivityRecord main = kernel(70, 0, 400);
    main.streamId = 7;
    ActivityRecord side = kernel(71, 100, 300);  // overlaps, on a stream of its own
    side.streamId = 13;
    a.addRecord(main);
    a.addRecord(side);
    a.addRecord(api(72, false));
    a.hostEnded(4, 1, Phase::kForward);
    a.addSpan(4, 1, Phase::kForward, 400);
    const std::vector<CallRecord> calls = a.endRound(false);
    ASSERT_EQ(calls.size(), 1u);
    const CallRecord::Kind& cell = calls[0].kinds[static_cast<int>(OpKind::kScoreMatmul)];
    EXPECT_EQ(cell.ns, spans ? 400 : 600) << "spans " << spans;
    EXPECT_EQ(a.counters().sideStream, spans ? 1u : 0u);
  }
}

TEST(KernelAttributorTest, EventsOnlyCallsFoldAsSoonAsTheSpanIsIn) {
  KernelAttributor::Options o;
  o.spans = true;
  KernelAttributor a(o);
  a.addSpan(5, 3, Phase::kBackward, 1234);
  const std::vector<CallRecord> calls = a.endRound(false);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].layer, 3);
  EXPECT_EQ(calls[0].phase, Phase::kBackward);
  EXPECT_EQ(calls[0].ns, 1234);
  for (const CallRecord::Kind& k : calls[0].kinds) EXPECT_EQ(k.ops, 0u);
}

TEST(KernelAttributorTest, AMissingSpanDoesNotHoldTheCallBack) {
  KernelAttributor::Options o = kernelsOnly();
  o.spans = true;
  KernelAttributor a(o);
  launched(a, 80, key(6, 0, Phase::kForward, OpKind::kDropout));
  a.addRecord(kernel(80, 0, 50));
  a.addRecord(api(81, false));
  a.hostEnded(6, 0, Phase::kForward);
  a.spanMissing(6, Phase::kForward);
  const std::vector<CallRecord> calls = a.endRound(false);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].ns, 50);
}

TEST(KernelAttributorTest, FinalRoundFoldsWhatRanAndDropsCallsStillOnTheDevice) {
  KernelAttributor a(kernelsOnly());
  launched(a, 90, key(8, 0, Phase::kForward, OpKind::kSoftmax));
  a.addRecord(kernel(90, 0, 10));
  a.hostEnded(8, 0, Phase::kForward);  // complete, but not sealed: the last call
  launched(a, 91, key(9, 0, Phase::kForward, OpKind::kSoftmax));
  a.addRecord(kernel(91, 0, 0));  // a forced flush hands over a kernel not yet run
  a.hostEnded(9, 0, Phase::kForward);
  a.addRecord(kernel(92, 0, 10));  // no correlation ever
  const std::vector<CallRecord> calls = a.endRound(true);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].ns, 10);
  EXPECT_EQ(a.counters().inFlight, 1u);
  EXPECT_EQ(a.counters().callsInFlight, 1u);
  EXPECT_EQ(a.counters().unattributed, 1u);
  EXPECT_EQ(a.counters().late, 0u);
}

TEST(KernelAttributorTest, BuffersFillInATenthOfASecondWithinBounds) {
  EXPECT_EQ(activityBufferBytes(0), size_t{64} << 10);
  EXPECT_EQ(activityBufferBytes(10e6), size_t{1} << 20);  // 10 MB/s: 1 MB a tenth of a second
  EXPECT_EQ(activityBufferBytes(1e12), size_t{4} << 20);
}

TEST(KernelAttributorTest, BackendFromKernelNames) {
  struct Case {
    const char* name;
    AttentionBackend backend;
  };
  const Case cases[] = {
      {"void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false>, "
       "true>(Flash_fwd_params)",
       AttentionBackend::kFlash},
      {"_ZN5flash24flash_bwd_dot_do_o_kernelILb1E23Flash_bwd_kernel_traitsEEvNS_16Flash_bwd_"
       "paramsE",
       AttentionBackend::kFlash},
      {"fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::"
       "half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
       AttentionBackend::kMemoryEfficient},
      {"fmha_cutlassB_f16_aligned_64x64_k64_sm80", AttentionBackend::kMemoryEfficient},
      {"cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0",
       AttentionBackend::kCudnn},
      {"ampere_sgemm_128x64_tn", AttentionBackend::kMath},
      {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
       "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
       AttentionBackend::kMath},
      {"nvjet_tst_128x64_64x8_2x1_v_bz_TNT", AttentionBackend::kMath},
  };
  for (const Case& c : cases) EXPECT_EQ(KernelAttributor::backendOf(c.name), c.backend) << c.name;
  EXPECT_EQ(KernelAttributor::backendOf(nullptr), AttentionBackend::kMath);
}

TEST(KernelAttributorTest, BackendsAreCountedPerLayerForKernelsOnly) {
  KernelAttributor a(kernelsOnly());
  launched(a, 1, key(1, 0, Phase::kForward, OpKind::kFusedAttention));
  launched(a, 2, key(2, 1, Phase::kForward, OpKind::kScoreMatmul));
  a.addRecord(kernel(1, 0, 10, "flash_fwd_splitkv_kernel"));
  a.addRecord(kernel(1, 10, 20, "flash_fwd_splitkv_combine_kernel"));
  a.addRecord(ActivityRecord{Kind::kMemset, 1, 0, 20, 30, 0, nullptr});
  a.addRecord(kernel(2, 30, 40, "ampere_sgemm_64x64_nn"));
  const auto backends = a.backends();
  ASSERT_EQ(backends.size(), 2u);
  EXPECT_EQ(backends[0][static_cast<int>(AttentionBackend::kFlash)], 2u);
  EXPECT_EQ(backends[0][static_cast<int>(AttentionBackend::kMath)], 0u);
  EXPECT_EQ(backends[1][static_cast<int>(AttentionBackend::kMath)], 1u);
  GpuStatus::LayerBackends l0;
  l0.kernels = backends[0];
  EXPECT_EQ(l0.dominant(), AttentionBackend::kFlash);
  GpuStatus::LayerBackends l1;
  l1.kernels = backends[1];
  EXPECT_EQ(l1.dominant(), AttentionBackend::kMath);
  EXPECT_STREQ(attentionBackendName(AttentionBackend::kMemoryEfficient), "memory_efficient");
}

}  // namespace
}  // namespace attnscope
