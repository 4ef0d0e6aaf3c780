#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "attnscope/reporter/KeyValueStore.h"

namespace attnscope {
namespace detail {

// The reporter's KeyValueStore on a c10d store (attnscope's prefixed view of the job's TCPStore,
// torchrun's agent store or attnscope's own). c10d's exceptions pass through.
class C10dKeyValueStore final : public KeyValueStore {
 public:
  explicit C10dKeyValueStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  void deleteKey(const std::string& key) override;
  const c10::intrusive_ptr<c10d::Store>& c10dStore() const { return store_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace detail
}  // namespace attnscope
